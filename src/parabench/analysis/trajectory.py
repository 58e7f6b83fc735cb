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
     "digest": {param: {"sum": s, "norm": n, "proj": [p_1, ..., p_P], "numel": e}},  # step K
     "covered": {"tensors": T, "elements": E},   # what the digest holds
     "model": {"tensors": T, "elements": E},     # the model's float parameters and buffers
     "final_digest": {...}, "final_covered": {...}}   # the weights the evaluation scored

``proj`` is a random projection of the parameter (float64) to ``P`` numbers, the same for
every process (a signed count sketch seeded by the parameter's name,
:func:`parabench.torch.loop.weight_digest`), so ``|proj - proj_serial| / |proj_serial|``
estimates the relative L2 difference of the weights themselves, without storing them.

Verdict (two-sided): the largest relative loss difference over the K steps and the largest
relative weight difference over parameters must each be within their tolerance
(:data:`LOSS_RTOL`, :data:`WEIGHT_RTOL`), which are derived from the drift reduction order
alone causes (see their comments). A digest must cover its whole model (``covered`` ==
``model``, the model counted from the module, not from the digest) and both the same, else
nothing is compared (:func:`coverage_problem`): a digest that leaves the biases out on both
sides would agree with itself. The final weights are compared within
:data:`FINAL_WEIGHT_RTOL` scaled by :func:`drift_scale`; :mod:`parabench.analysis.parity`
adds each epoch's training loss and the quality at equal weights (:func:`eval_tolerance`).
Traces recorded before these fields (schema 2 results) are compared on what they hold.
"""

from __future__ import annotations

import math
from typing import Any

from parabench.core.records import Trace
from parabench.method import TRACE_STEPS  # the format's step count, re-exported

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
#: tests/methods/test_planted_bugs_torch.py are 1.8e-2 .. 3 in the loss and 0.17 .. 0.66 in the
#: weights (mlp). seq2seq's token-mean loss makes a split batch another computation (ddp x2:
#: 7.4e-4 / 1.3e-2), so data parallelism declares it statistical (torch/data_parallel.py).
#: Adam is nearly blind to a uniform gradient scale (seq2seq: 1.3e-7 / 7.1e-7), so a bug that
#: only scales the gradient (summed instead of averaged) shows on the SGD workloads only.
#:
#: gpt (tiny, AdamW, 20 steps; ``python scripts/weight_drift.py --trace gpt``, 2026-11-25,
#: same torch, a 2-core machine at load ~7), loss / weights: serial at 2 threads 1.6e-7 /
#: 9.3e-7; ddp and fsdp x2 1.6e-7 / 1.2e-6; pipeline 2 stages 1.6e-7 / 5.4e-6; hybrid 2x2
#: 2.0e-7 / 1.3e-5; tensor parallel: tp x2 1.6e-7 / 1.1e-5 (sequence parallel the same),
#: tp x4 8.3e-8 / 6.6e-6, fsdp_tp 2x2 1.6e-7 / 1.0e-5, pipeline_tp 2x2 1.6e-7 / 3.7e-6 (worst
#: always a q bias). The tolerances below hold them with 80x / 250x to spare. AdamW, like
#: Adam, is blind to a uniform gradient scale (x (1 + 1e-3): 1.7e-7 / 8.1e-6), so gpt cannot
#: catch a summed-instead-of-averaged gradient; its tensor-parallel plants are caught.
#:
#: relative weight difference accepted as drift: 4.5x the worst drift measured (2.2e-4);
#: a 1e-3 gradient error on cnn / conv_autoencoder (9e-3) is 9x above it, mlp's (8.9e-4) not
WEIGHT_RTOL = 1e-3
#: relative per-step loss difference accepted as drift: 12x the worst drift (4.3e-6)
LOSS_RTOL = 5e-5

#: The whole run (issue 28): the final (evaluated) weights, every epoch's mean training loss
#: and the held-out quality at those weights, measured with ``parabench run --workload
#: mlp,cnn,conv_autoencoder --method serial,ddp,fsdp,pipeline --workers 2 --profile tiny
#: --epochs 3 --steps 0 --threads 1 --out drift.jsonl`` and ``python
#: scripts/whole_run_drift.py drift.jsonl`` (2026-11-25, torch 2.14.1, CPU, busy 2-core
#: machine), each against serial at 1 thread (serial at 2 threads in brackets):
#:
#: ================  =====  ==================  ==================  =======================
#: workload          steps  final weights       epoch loss (worst)  quality gap
#: ================  =====  ==================  ==================  =======================
#: mlp               96     7.2e-7 (0 serial)   6.9e-8              0 (accuracy, 512 test)
#: cnn               45     1.2e-6 (1.7e-6)     6.4e-6 (7.3e-6)     0 (accuracy)
#: conv_autoencoder  45     3.8e-4 (1.4e-4)     3.2e-7              3.4e-8 MSE (8.8e-7 rel.)
#: ================  =====  ==================  ==================  =======================
#:
#: conv_autoencoder's weight drift grew from 2.2e-4 after 15 steps to 3.8e-4 after 45: the
#: factor sqrt(3) of a random walk, so whole-run tolerances are the first steps' ones scaled
#: by sqrt(run steps / TRACE_STEPS) (:func:`drift_scale`): final weights 1e-3 x 1.5 at 45
#: steps, 3.9x the worst drift; the per-epoch loss 5e-5 x 1.5, 10x the worst (7.3e-6). The
#: planted ``ddp_staleorder`` (epoch 0's order in every epoch) is far outside both.
#:
#: That holds only so far. At 10 epochs (``--epochs 10``, same command) serial at 2 threads
#: against serial at 1 thread already differs by 1.9e-3 in cnn's epoch-4 loss (60 steps: a
#: loss spike from 0.063 to 0.29 amplifies the last bits) and by 3.7e-2 / 0.33 in cnn's /
#: conv_autoencoder's final weights after 150 steps: the size of a bug (``ddp_staleorder``
#: on mlp: 1.6e-3 in epoch 2's loss, 0.13 in the final weights). mlp stays at 1.5e-7 / 7.4e-7
#: through 320 steps. So epoch losses and final weights are graded up to the steps where
#: the measured drift stayed within the sqrt law (:func:`drift_horizon`): 320 for mlp, 45
#: (cnn's and conv_autoencoder's 3 tiny epochs) for every other workload; past that the
#: figures are recorded and the parity says they were not graded.
#:
#: gpt (AdamW), the same command with ``--workload gpt --epochs 6`` (2026-11-25, busy
#: machine): after 300 steps final weights 8.0e-6 (serial at 2 threads), 7.7e-6 (ddp, fsdp),
#: 3.9e-5 (pipeline); epoch losses 1.5e-7 at worst; quality gap 0. Graded through 300 steps.
FINAL_WEIGHT_RTOL = WEIGHT_RTOL
EPOCH_LOSS_RTOL = LOSS_RTOL
#: training steps up to which whole-run drift was measured to follow the sqrt law (above)
DRIFT_HORIZON = {"mlp": 320, "gpt": 300}
DEFAULT_DRIFT_HORIZON = 45

#: CUDA: everything above was measured on CPU, where a run repeats bit for bit. On a GPU,
#: PyTorch runs float32 convolutions in TF32 (``cudnn.allow_tf32`` defaults on: 10 mantissa
#: bits) with non-deterministic cuDNN kernels, so two correct runs drift far more. Seen on
#: the first GPU run (one H200, torch 2.11, tiny, one worker against serial on the GPU,
#: ``bash scripts/gpu_check.sh``, 2026-11-27), correct runs, first steps loss / weights:
#: cnn ddp 3.9e-6 / 6.4e-5 (another run: 5.1e-7 / 4.9e-5 final), cnn fsdp 0 / 2.1e-7,
#: cnn pipeline 1.1e-4 / 1.5e-4, mlp ddp 0 / 0 (no convolution). The CPU allowances failed
#: three of them: pipeline's first-steps loss (1.1e-4 > 5e-5), and ddp's and fsdp's epoch-3
#: loss (1.6e-3 and 5.6e-4 after 45 steps, against 7.5e-5). So on CUDA the first steps are
#: graded within these, 18x / 33x the worst seen on 4 runs (a small sample: recalibrate on
#: a GPU), which still catch a 1e-3 gradient error on cnn (9.2e-3 in the weights, CPU) and
#: the planted bugs (>= 1.8e-2 / 0.17), but not on mlp (8.9e-4); epoch losses and final
#: weights are recorded, not graded (:func:`drift_horizon` is 0), and the held-out quality
#: keeps the one-sided exact tolerance.
CUDA_LOSS_RTOL = 2e-3
CUDA_WEIGHT_RTOL = 5e-3


def first_steps_tolerance(device: str = "cpu") -> dict[str, float]:
    """The first steps' allowed drift on ``device``: ``{"loss_rel", "weight_rel_l2"}``."""
    if device == "cuda":
        return {"loss_rel": CUDA_LOSS_RTOL, "weight_rel_l2": CUDA_WEIGHT_RTOL}
    return {"loss_rel": LOSS_RTOL, "weight_rel_l2": WEIGHT_RTOL}


#: the held-out quality of weights that match serial's: accuracy moved by 0 in every case
#: measured; 2e-3 admits one flipped sample of mlp's 512 (a logit tie broken by the last
#: bit), the issue's half-set evaluation (+0.016) is 8x above it. A lower-is-better loss:
#: relative, 1e-5 (11x the 8.8e-7 measured).
EVAL_TOLERANCE = 2e-3
EVAL_RTOL = 1e-5


def drift_horizon(workload: str, device: str = "cpu") -> int:
    """The steps up to which whole-run figures are graded for ``workload`` on ``device``
    (see above: none on CUDA)."""
    if device == "cuda":
        return 0
    return DRIFT_HORIZON.get(workload, DEFAULT_DRIFT_HORIZON)


def drift_scale(steps: int | None) -> float:
    """How much more reduction-order drift ``steps`` SGD steps accumulate than the first
    TRACE_STEPS: sqrt(steps / TRACE_STEPS), at least 1 (see the measurement above)."""
    return max(1.0, math.sqrt((steps or 0) / TRACE_STEPS))


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


def epoch_loss_rel_max(losses: list[float], reference: list[float]) -> tuple[float, int]:
    """(the largest relative difference of per-epoch training losses, its 1-based epoch)
    over the epochs both ran (time-to-target runs may stop apart)."""
    worst, where = 0.0, 0
    for k, (a, b) in enumerate(zip(losses, reference, strict=False), start=1):
        value = loss_rel_max([a], [b])
        if value > worst or not math.isfinite(value):
            worst, where = value, k
            if not math.isfinite(value):
                break
    return worst, where


def eval_tolerance(baseline: float, higher_is_better: bool) -> float:
    """How far the held-out quality of the same weights may land from serial's
    (:data:`EVAL_TOLERANCE`; :data:`EVAL_RTOL` of the baseline for a lower-is-better loss)."""
    return EVAL_TOLERANCE if higher_is_better else EVAL_RTOL * abs(baseline)


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


def _size(figures: dict[str, int]) -> str:
    return f"{figures['tensors']} tensors, {figures['elements']:,} elements"


def coverage_problem(mine: Trace, ref: Trace) -> str | None:
    """Why the two traces' digests cannot be compared (None: they can).

    Each digest must cover its whole model (every floating-point parameter and persistent
    buffer, counted from the module: ``Trace.model``), and both must cover the same. A
    trace recorded before digests said what they covered (``covered`` None) is taken as it
    is: nothing to check it against.
    """
    for who, trace in (("this run", mine), ("the baseline", ref)):
        for what, covered in (("weight digest", trace.covered),
                              ("final weight digest", trace.final_covered)):
            if covered is not None and trace.model is not None and covered != trace.model:
                return (f"{who}'s {what} covers {_size(covered)} of the model's "
                        f"{_size(trace.model)}")
    if mine.covered is not None and ref.covered is not None and mine.covered != ref.covered:
        return (f"digests of different coverage: {_size(mine.covered)} against the "
                f"baseline's {_size(ref.covered)}")
    return None


def compare_traces(trace: Trace | dict[str, Any], reference: Trace | dict[str, Any],
                   run_steps: int | None = None, horizon: int | None = None,
                   device: str = "cpu") -> dict[str, Any]:
    """Exact parity's figures and verdict for ``trace`` against the baseline's ``reference``
    (:class:`~parabench.core.records.Trace`, or its dict as a session records it).

    ``differs`` names what differed when the verdict fails ("digest coverage", "steps",
    "first steps", "final weights"); the final weights (the evaluated ones) are compared
    when both traces have them, within :data:`FINAL_WEIGHT_RTOL` x
    :func:`drift_scale` of ``run_steps`` (the run's training steps); past ``horizon`` steps
    (:func:`drift_horizon`) a difference is recorded, not graded (``final_graded`` False).
    ``device`` picks the first steps' allowance (:func:`first_steps_tolerance`); on CUDA
    the final weights are never graded.
    """
    mine, ref = Trace.from_dict(trace), Trace.from_dict(reference)
    assert mine is not None and ref is not None
    steps = min(mine.steps, ref.steps)
    if (problem := coverage_problem(mine, ref)) is not None:
        return {"ok": False, "basis": "trajectory", "steps": steps, "reason": problem,
                "differs": "digest coverage"}
    if mine.steps != ref.steps:
        return {"ok": False, "basis": "trajectory", "steps": steps, "differs": "steps",
                "reason": f"traced {mine.steps} steps, the baseline {ref.steps}"}
    loss = loss_rel_max(mine.losses, ref.losses)
    weight, where = weight_rel_l2(mine.digest, ref.digest)
    allowed = first_steps_tolerance(device)
    out = {
        "ok": loss <= allowed["loss_rel"] and weight <= allowed["weight_rel_l2"],
        "basis": "trajectory",
        "steps": steps,
        "loss_rel_max": loss,
        "weight_rel_l2": weight,
        "worst_parameter": where,
        "tolerance": dict(allowed),
    }
    if not out["ok"]:
        out["differs"] = "first steps"
    if mine.final_digest and ref.final_digest:
        final, final_where = weight_rel_l2(mine.final_digest, ref.final_digest)
        tol = FINAL_WEIGHT_RTOL * drift_scale(run_steps)
        graded = device != "cuda" and (horizon is None or (run_steps or 0) <= horizon
                                         or final <= tol)
        out.update(final_weight_rel_l2=final, final_graded=graded)
        out["tolerance"]["final_weight_rel_l2"] = tol
        if final > tol and out["ok"] and graded:
            out.update(ok=False, differs="final weights", worst_parameter=final_where,
                       reason=f"final weights differ from serial's ({final_where}: "
                              f"{final:.1e} > {tol:.1e} after {run_steps} steps)")
    return out
