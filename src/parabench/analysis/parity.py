"""Parity: does a parallel run still reach the serial baseline's held-out quality?

Usage::

    parity = assess(result, baselines)   # baselines: serial results of the same sweep/file
    parity.status                        # "ok" | "failed" | "not-applicable"

A result is compared with the serial result of the same workload, profile, seed, epochs,
global batch size and data options (data_dir, precision, DataLoader knobs do not change the
math, but data_dir and precision do), on the same device when there is one, else on CPU.
"Serial" is the method's ``baseline_method``: ``serial`` for all but TensorFlow's methods,
which are compared with ``tf_serial`` (the same Keras model and loop without distribution).

``gap`` is the method's quality minus serial's, signed so that positive means better (the
convention of :mod:`parabench.analysis.ratios`, which does this arithmetic).
Parity fails when the method is worse than serial by more than the tolerance:

* methods with ``parity = "exact"`` (DDP, FSDP, pipeline, sklearn backends, seed-replicated
  MPI forests) compute the same mathematics, so only float reduction order separates them
  from serial: tolerance :data:`EXACT_TOLERANCE` (0.015 accuracy, or 1.5 % of a
  lower-is-better loss such as reconstruction MSE). Reduction-order differences are ~1e-7 per
  step but SGD amplifies them over hundreds of steps: ``pipeline`` on ``mlp`` at the quick
  profile, 2 epochs, ended 0.008 accuracy from serial although its weights match serial's to
  float tolerance after several steps (the tests check weights, far more strictly). The
  failures this must catch (a run stuck at chance, an unsharded or un-averaged run that
  diverges) are gaps of tenths. When both runs recorded a trajectory (torch) it decides
  instead, two-sided, on the whole run (:mod:`parabench.analysis.trajectory`): the first
  steps' losses and weights, the digests' coverage, the final weights (where both stopped
  at the same point), every epoch's training loss that covers the same training on both
  sides (time to target may stop them apart, even mid-epoch: :func:`comparable_epochs`;
  each within drift measured over that many steps, up to the steps where
  drift was measured to stay small: past them recorded, not graded, ``whole_run_note``
  says so), and where the final
  weights match, the held-out quality must *equal* serial's within the evaluation's float
  tolerance (:func:`~parabench.analysis.trajectory.eval_tolerance`): better than serial at
  the same weights fails too. ``differs`` names what differed ("epoch 2 loss",
  "evaluation +0.016", ...). A baseline without a final digest (older results) keeps the
  one-sided quality tolerance as the check on the evaluation.
* methods with ``parity = "statistical"`` (federated averaging, histogram forests, Spark)
  run another algorithm: tolerance is :data:`SPREAD_FACTOR` x the serial baseline's own
  seed-to-seed standard deviation of quality, read from the shipped, measured table
  (:mod:`parabench.workloads.spread`, written by ``scripts/seed_spread.py``), with a floor
  of :data:`MIN_STATISTICAL_TOLERANCE`, measured after the result's epochs (the nearest
  measured where those were not). The parity dict names the spread and its source.
  Where the table (and the workload) has no figure for that workload x profile, the check
  still runs, on :data:`FALLBACK_SPREAD`, and says so: ``spread_source`` is ``"fallback"``
  and ``reason`` reads "no measured seed spread for X at Y: run scripts/seed_spread.py".
  Checked rather than not-applicable, because the failures it must catch (a run stuck at
  chance, a server that drops clients) are gaps of tenths that any plausible spread flags.
* in time-to-target mode, a statistical method is graded by
  :mod:`parabench.analysis.target_parity` (``basis = "target"``): the gap at the stop says
  little, as both sides stop just past the target. A case held past the target to the
  measured table's budget is judged on its quality there against serial's over the table's
  seeds, else on whether it reached the target; either states its power in
  ``power_source``.
* A method may grade a workload otherwise than its declared kind, by its
  ``Method.grading(workload, config)`` hook (e.g. ``"statistical"`` for a BatchNorm model
  under data parallelism, whose per-rank batch statistics are not serial's); the result
  records that :class:`~parabench.core.records.Grading` and the parity carries its reason as
  ``kind_reason``.
* fedavg is compared at equal work: one fedavg epoch is ``clients / local_epochs`` rounds, so
  every client processes serial's samples per epoch (:mod:`parabench.methods.fedavg`); the
  result's ``facts.samples_per_client`` is copied into the parity.

A fast-but-wrong method is therefore flagged in its result, and reports show it.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable
from typing import Any

from parabench.analysis.ratios import (  # the tolerances live with the arithmetic; named here too
    EXACT_TOLERANCE,
    MIN_STATISTICAL_TOLERANCE,
    SPREAD_FACTOR,
    baseline_of,
    detectable_loss,
    is_baseline,
    parity_holds,
    parity_tolerance,
    quality_gap,
)
from parabench.analysis.target_parity import statistical_verdict
from parabench.analysis.trajectory import (
    EPOCH_LOSS_RTOL,
    compare_traces,
    drift_horizon,
    drift_scale,
    epoch_loss_rel_max,
    eval_tolerance,
)
from parabench.case.result import Result
from parabench.core.records import Parity
from parabench.identity import CaseId
from parabench.identity import work_options as identity_work_options
from parabench.registry import methods
from parabench.workloads.spread import missing_reason, seed_spread

__all__ = ["EXACT_TOLERANCE", "FALLBACK_SPREAD", "MIN_STATISTICAL_TOLERANCE", "SPREAD_FACTOR",
           "assess", "baseline_for", "parity_kind", "spread_for", "tolerance"]

#: the spread statistical parity uses, *and names*, where nothing was measured (see above)
FALLBACK_SPREAD = 0.01


def _match_key(r: Result) -> tuple:
    """What the baseline result shares (:attr:`parabench.identity.CaseId.parity_slot`)."""
    return CaseId.recorded(r).parity_slot


def baseline_for(result: Result, baselines: Iterable[Result]) -> Result | None:
    """The baseline result this one is compared with (same device preferred, else CPU; a
    plain one, without :func:`work_options`, preferred to one with them)."""
    name = baseline_of(result.method)
    candidates = [b for b in baselines
                  if b.method == name and b.status == "ok" and b.quality is not None
                  and b.quality.value is not None and _match_key(b) == _match_key(result)]
    # the plain baseline first (no compile, no checkpointing: eager serial), then the one at
    # the same threads (the same reduction order), else the order given (the newest first)
    candidates.sort(key=lambda b: (bool(work_options(b)),
                                   b.threads_per_worker != result.threads_per_worker))
    for device in (result.device, "cpu"):
        same = [b for b in candidates if b.device == device]
        if same:
            return same[0]
    return None


def spread_for(workload_name: str, profile: str, higher_is_better: bool = True,
               epochs: int | None = None) -> dict[str, Any]:
    """The seed spread statistical parity uses: ``spread``, ``spread_source`` (+ ``reason``),
    measured at ``epochs`` where it was (see :func:`~parabench.workloads.spread.seed_spread`).

    For a lower-is-better metric (a loss) the tolerance is relative to the baseline
    (:func:`~parabench.analysis.ratios.parity_tolerance`), so the spread is too: std / mean.
    """
    entry = seed_spread(workload_name, profile, epochs)
    if entry is None:
        return {"spread": FALLBACK_SPREAD, "spread_source": "fallback",
                "reason": missing_reason(workload_name, profile)}
    spread = entry.std if higher_is_better else entry.relative()
    return {"spread": spread, "spread_source": entry.source}


def tolerance(kind: str, workload_name: str, profile: str, baseline_value: float,
              higher_is_better: bool, epochs: int | None = None) -> float:
    """The quality tolerance :func:`assess` applies (it calls this, with the result's epochs)."""
    return _tolerance(kind, workload_name, profile, baseline_value, higher_is_better,
                      epochs)[0]


def _tolerance(kind: str, workload_name: str, profile: str, baseline_value: float,
               higher_is_better: bool, epochs: int | None) -> tuple[float, dict[str, Any]]:
    """(tolerance, the spread it came from: {} for exact, else :func:`spread_for`'s)."""
    spread = {} if kind == "exact" else spread_for(workload_name, profile, higher_is_better,
                                                   epochs)
    return (parity_tolerance(kind, baseline_value, higher_is_better, spread.get("spread", 0.0)),
            spread)


def parity_kind(result: Result) -> tuple[str, str | None]:
    """(kind, why): the grading the method declared for this workload (``result.grading``,
    from ``Method.grading``), else the method's declared kind; why only when they differ."""
    declared = methods.get(result.method).parity if result.method in methods else "exact"
    kind = result.grading.kind if result.grading else declared
    why = result.grading.reason if result.grading else None
    return kind, why if kind != declared else None


def assess(result: Result, baselines: Iterable[Result]) -> Parity | None:
    """The ``parity`` field for ``result`` (None when the case did not finish ok)."""
    out = _assess(result, baselines)
    return None if out is None else Parity.from_dict(out)


def work_options(result: Result) -> dict[str, Any]:
    """``result``'s options that change the work timed but not the mathematics, away from
    their defaults (:func:`parabench.identity.work_options`)."""
    return identity_work_options(dict(CaseId.recorded(result).options))


def plain_baseline(result: Result, baselines: Iterable[Result]) -> Result | None:
    """For a baseline run with :func:`work_options` on (serial with ``compile=True``): the
    same baseline with all of them at their defaults, which it must match exactly. None when
    ``result`` is no such run or the plain one is not in ``baselines``."""
    if not is_baseline(result.method) or not work_options(result):
        return None
    plain = [b for b in baselines if b.method == result.method and b is not result
             and not work_options(b)]
    return baseline_for(result, plain)


def _assess(result: Result, baselines: Iterable[Result]) -> dict[str, Any] | None:
    baselines = list(baselines)
    kind, why = parity_kind(result)
    plain = plain_baseline(result, baselines)
    if is_baseline(result.method) and (plain is None or result.status != "ok"):
        return {"status": "not-applicable", "kind": kind, "reason": "this is the baseline"}
    if plain is not None:  # serial with checkpointing or compile: graded on plain serial
        kind, why = "exact", ("the same baseline without "
                              + ", ".join(sorted(work_options(result))))
    if result.status != "ok" or result.quality is None or result.quality.value is None:
        return None
    base = plain or baseline_for(result, baselines)
    if base is None:
        name = baseline_of(result.method)
        return {"status": "not-applicable", "kind": kind,
                "reason": f"no {name} result with the same workload, profile, seed, epochs, "
                          f"batch and data in this sweep; add --method {name}"}
    assert base.quality is not None and base.quality.value is not None
    q, q0 = result.quality.value, base.quality.value
    better_high = result.quality.higher_is_better
    gap = quality_gap(q, q0, better_high)
    tol, spread = _tolerance(kind, result.workload, result.profile, q0, better_high,
                             result.epochs)
    out = {
        "status": "ok" if parity_holds(gap, tol) else "failed",
        "kind": kind,
        "basis": "quality",
        "gap": gap,
        "tolerance": tol,
        "baseline": f"{base.method}/{base.device}",
        "baseline_quality": q0,
        **spread,
    }
    if why:
        out["kind_reason"] = why
    if kind == "statistical" and "spread" in spread:  # the verdict's power, stated
        out["detectable_loss"] = detectable_loss(tol, spread["spread"], q0, better_high)
    if kind == "statistical":  # time to target's verdicts; paired by seed where measured
        out.update(statistical_verdict(result, base, gap, out.get("detectable_loss")))
    if result.facts.samples_per_client is not None:  # fedavg: the equal-work figure, shown
        out["samples_per_client"] = result.facts.samples_per_client
    evidence = exact_evidence(result, base) if kind == "exact" else None
    if evidence is not None:  # exact: the trajectory or the predictions decide, not accuracy
        same = evidence.pop("ok")
        out.update(evidence, tolerance=evidence.get("tolerance", 0.0),
                   status="ok" if same else "failed")
        if evidence["basis"] == "trajectory":
            first_ok = same or evidence.get("differs") == "final weights"
            out.update(trajectory_ok=first_ok, quality_tolerance=tol)
            if first_ok:
                out.update(_whole_run(result, base, evidence, gap, tol))
    return out


def trained_epochs(result: Result) -> float:
    """The epochs ``result`` trained: fractional where time to target stopped it between the
    parts of an epoch (its last ``loss`` is then that partial epoch's)."""
    ttt = result.time_to_target
    if ttt is not None and ttt.stopped_at is not None:
        return ttt.stopped_at
    return float(len(result.loss) or result.epochs)


def comparable_epochs(result: Result, base: Result) -> int:
    """How many of the two results' epoch losses cover the same training: all of them where
    both stopped at the same point, else the whole epochs both trained."""
    mine, theirs = trained_epochs(result), trained_epochs(base)
    if mine == theirs:
        return min(len(result.loss), len(base.loss))
    return math.floor(min(mine, theirs))


def run_steps(result: Result, epochs: float | None = None) -> int | None:
    """The training steps of ``result``'s first ``epochs`` epochs (default: all it trained)."""
    if not result.samples_per_epoch or not result.batch_size:
        return None
    epochs = trained_epochs(result) if epochs is None else epochs
    return math.floor(epochs * -(-result.samples_per_epoch // result.batch_size) + 1e-9)


def arithmetic_device(result: Result, base: Result) -> str:
    """"cuda" when either side trained on a GPU (whose drift allowances apply), else "cpu"."""
    return "cuda" if "cuda" in (result.device, base.device) else "cpu"


def _whole_run(result: Result, base: Result, evidence: dict[str, Any], gap: float,
               tol: float) -> dict[str, Any]:
    """Beyond the first steps (which matched): every epoch's training loss, the final weights
    (already in ``evidence``), then the held-out quality, two-sided where the final weights
    match serial's."""
    n = comparable_epochs(result, base)  # time to target may stop them apart, even mid-epoch
    out: dict[str, Any] = {
        "epoch_loss_rel_max": epoch_loss_rel_max(result.loss[:n], base.loss[:n])[0]}
    device = arithmetic_device(result, base)
    horizon = drift_horizon(base.workload, device)
    for epoch, (mine, theirs) in enumerate(zip(result.loss[:n], base.loss[:n], strict=True),
                                           start=1):
        diff = epoch_loss_rel_max([mine], [theirs])[0]
        steps = run_steps(base, min(epoch, trained_epochs(base)))  # a partial last epoch
        if steps is not None and steps > horizon and math.isfinite(diff):
            out["whole_run_note"] = (
                "epoch losses and final weights on cuda not graded: GPU kernels (TF32 "
                "convolutions, non-deterministic cuDNN) drift past the CPU-measured allowance"
                if device == "cuda" else
                f"epoch losses and final weights past {horizon} steps not graded: "
                f"reduction-order drift was not measured to stay small there")
            break
        allowed = EPOCH_LOSS_RTOL * drift_scale(steps)
        if not diff <= allowed:  # NaN fails too
            return {**out, "status": "failed", "differs": f"epoch {epoch} loss", "reason": (
                f"epoch {epoch} loss differs from serial's by {diff:.1e} (relative; drift "
                f"allows {allowed:.1e} after {run_steps(base, epoch)} steps) although the "
                f"first steps match")}
    if evidence.get("differs") == "final weights":
        return out  # failed already, with its reason
    assert result.quality is not None and result.quality.value is not None
    final = evidence.get("final_weight_rel_l2")
    if final is not None and not evidence.get("final_graded", True):
        out["whole_run_note"] = "; ".join(filter(None, (
            out.get("whole_run_note"),
            f"final weights {final:.1e} from serial's "
            f"{'on cuda' if device == 'cuda' else f'past {horizon} steps'}: not graded")))
    elif final is not None:  # the same weights were evaluated
        eval_tol = eval_tolerance(base.quality.value if base.quality else 0.0,
                                  result.quality.higher_is_better)
        out["quality_tolerance"] = eval_tol
        if abs(gap) > eval_tol:
            return {**out, "status": "failed", "differs": f"evaluation {gap:+.3f}", "reason": (
                f"evaluation differs from serial's at the same weights: quality gap "
                f"{gap:+.4f}, the evaluation's float tolerance {eval_tol:.0e}")}
        return out
    # no final digest on one side (a result recorded before it was), or final weights past
    # the drift horizon: the old one-sided check
    if not parity_holds(gap, tol):
        return {**out, "status": "failed", "differs": f"quality {gap:+.3f}", "reason": (
            "training matches serial's first steps but the held-out quality does "
            "not: the method's evaluation differs (or training diverged later)")}
    return out


def exact_evidence(result: Result, base: Result) -> dict[str, Any] | None:
    """Exact parity's proof, two-sided (None when either side recorded none).

    Torch methods: the first steps' losses and the weights after them against serial's
    (:mod:`parabench.analysis.trajectory`). Seed-exact forests: the held-out predictions digest
    must be serial's and the quality gap exactly 0.
    """
    if result.trace and base.trace:
        mine, theirs = result.trace, base.trace
        if trained_epochs(result) != trained_epochs(base):  # time to target stopped them
            mine = dataclasses.replace(mine, final_digest=None)  # apart: other final weights
        device = arithmetic_device(result, base)
        return compare_traces(mine, theirs, run_steps(base),
                              drift_horizon(base.workload, device), device)
    mine, theirs = result.facts.predictions_sha, base.facts.predictions_sha
    if mine and theirs:
        assert result.quality is not None and base.quality is not None
        same = mine == theirs and result.quality.value == base.quality.value
        return {"ok": same, "basis": "predictions", "identical": mine == theirs,
                "predictions_sha": mine, "baseline_predictions_sha": theirs}
    return None
