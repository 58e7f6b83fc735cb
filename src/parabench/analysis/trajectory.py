"""Exact parity from the training trajectory: the same losses step by step, the same weights.

Usage::

    verdict = compare_traces(result.trace, serial.trace)
    verdict["ok"], verdict["loss_rel_max"], verdict["weight_rel_l2"], verdict["tolerance"]

A method whose ``parity`` is "exact" computes serial's mathematics, so from serial's initial
weights and serial's global data order its first steps must give serial's losses, and its
weights after them serial's weights, up to float reduction order. Final held-out accuracy
cannot tell: a DDP that sums gradients instead of averaging them only doubles the learning
rate and often reaches the same accuracy. The trajectory tells at once.

A trace (``Result.trace``), recorded by the case in its first steps::

    {"steps": K,                           # steps traced (K = TRACE_STEPS, or fewer)
     "losses": [l_1, ..., l_K],            # each step's mean training loss (global batch)
     "digest": {param: {"sum": s, "norm": n, "proj": [p_1, ..., p_P]}}}   # after step K

``proj`` is a random projection of the parameter (float64) to ``P`` numbers, the same for
every process (a signed count sketch seeded by the parameter's name,
:func:`parabench.torch.loop.weight_digest`), so ``|proj - proj_serial| / |proj_serial|``
estimates the relative L2 difference of the weights themselves, without storing them.

Verdict (two-sided): the largest relative loss difference over the K steps and the largest
relative weight difference over parameters must each be within their tolerance
(:data:`LOSS_RTOL`, :data:`WEIGHT_RTOL`), which are derived from the drift reduction order
alone causes (see their comments).
"""

from __future__ import annotations

import math
from typing import Any

from parabench.case.records import Trace
from parabench.method import TRACE_STEPS  # noqa: F401 - the format's step count, re-exported

#: Drift of the trace figures, measured with ``python scripts/weight_drift.py --trace mlp cnn
#: conv_autoencoder seq2seq`` (2026-11-23, torch 2.14.1, CPU, 1 thread per worker, tiny, the
#: workloads' default batch, on a loaded 2-core machine: drift is arithmetic, not timing).
#: Largest relative step-loss difference / estimated relative L2 weight difference vs serial:
#:
#: ====================  =============  =============  ==================  ================
#: variant               mlp (20 st.)   cnn (15 st.)   conv_autoenc. (15)  seq2seq (20)
#: ====================  =============  =============  ==================  ================
#: serial at 2 threads   0 / 7e-16      0 / 4.1e-8     9.0e-8 / 4.7e-15    0 / 2.9e-15
#: model_parallel 2      0 / 0          0 / 0          0 / 0               (no stages)
#: ddp x2                1.3e-7/1.3e-7  1.6e-7/1.3e-7  4.3e-6 / 2.2e-4    (statistical)
#: fsdp x2               1.3e-7/1.3e-7  1.6e-7/1.3e-7  4.3e-6 / 2.2e-4    (statistical)
#: pipeline 2 stages     9.9e-8/1.4e-7  1.2e-7/6.3e-6  4.2e-6 / 2.2e-4    (no stages)
#: hybrid 2x2            1.1e-7/1.8e-7  2.4e-7/3.6e-5  4.2e-6 / 2.2e-4    (no stages)
#: gradient x (1+1e-3)   2.4e-4/8.9e-4  9.2e-4/9.2e-3  1.5e-5 / 9.4e-3    1.3e-7 / 7.1e-7
#: ====================  =============  =============  ==================  ================
#:
#: The worst drift is conv_autoencoder's 2.2e-4 in the weights (Adam divides by the root of
#: tiny second moments, which magnifies the last bits of near-zero gradients: every way of
#: splitting the batch lands there) and 4.3e-6 in the loss. The planted bugs of
#: tests/test_planted_bugs_torch.py are 1.8e-2 .. 3 in the loss and 0.17 .. 0.66 in the
#: weights (mlp). seq2seq's token-mean loss makes a split batch another computation (ddp x2:
#: 7.4e-4 / 1.3e-2), so data parallelism declares it statistical (torch/data_parallel.py).
#: Adam is nearly blind to a uniform gradient scale (seq2seq: 1.3e-7 / 7.1e-7), so a bug that
#: only scales the gradient (summed instead of averaged) shows on the SGD workloads only.
#:
#: relative weight difference accepted as drift: 4.5x the worst drift measured (2.2e-4);
#: a 1e-3 gradient error on cnn / conv_autoencoder (9e-3) is 9x above it, mlp's (8.9e-4) not
WEIGHT_RTOL = 1e-3
#: relative per-step loss difference accepted as drift: 12x the worst drift (4.3e-6)
LOSS_RTOL = 5e-5


def rel_diff(values: list[float], reference: list[float]) -> float:
    """``|values - reference| / |reference|`` (L2); the absolute difference when it is 0."""
    diff = math.sqrt(sum((a - b) ** 2 for a, b in zip(values, reference, strict=True)))
    scale = math.sqrt(sum(b * b for b in reference))
    return diff / scale if scale > 0 else diff


def loss_rel_max(losses: list[float], reference: list[float]) -> float:
    """The largest relative difference of step losses (over the common steps)."""
    worst = 0.0
    for a, b in zip(losses, reference, strict=False):
        if not (math.isfinite(a) and math.isfinite(b)):
            return math.inf
        worst = max(worst, abs(a - b) / abs(b) if b else abs(a - b))
    return worst


def weight_rel_l2(digest: dict[str, Any], reference: dict[str, Any]) -> tuple[float, str]:
    """(the largest estimated relative L2 weight difference, the parameter it is in)."""
    worst, where = 0.0, ""
    for name, ref in reference.items():
        mine = digest.get(name)
        if mine is None or len(mine["proj"]) != len(ref["proj"]):
            return math.inf, name  # another model: nothing to compare
        value = rel_diff(mine["proj"], ref["proj"])
        if not math.isfinite(value):
            return math.inf, name
        if value > worst:
            worst, where = value, name
    if set(digest) - set(reference):
        return math.inf, sorted(set(digest) - set(reference))[0]
    return worst, where


def compare_traces(trace: Trace | dict[str, Any],
                   reference: Trace | dict[str, Any]) -> dict[str, Any]:
    """Exact parity's figures and verdict for ``trace`` against the baseline's ``reference``
    (:class:`~parabench.case.records.Trace`, or its dict as a session records it)."""
    mine, ref = Trace.from_dict(trace), Trace.from_dict(reference)
    assert mine is not None and ref is not None
    steps = min(mine.steps, ref.steps)
    if mine.steps != ref.steps:
        return {"ok": False, "basis": "trajectory", "steps": steps,
                "reason": f"traced {mine.steps} steps, the baseline {ref.steps}"}
    loss = loss_rel_max(mine.losses, ref.losses)
    weight, where = weight_rel_l2(mine.digest, ref.digest)
    return {
        "ok": loss <= LOSS_RTOL and weight <= WEIGHT_RTOL,
        "basis": "trajectory",
        "steps": steps,
        "loss_rel_max": loss,
        "weight_rel_l2": weight,
        "worst_parameter": where,
        "tolerance": {"loss_rel": LOSS_RTOL, "weight_rel_l2": WEIGHT_RTOL},
    }
