"""Time-to-target mode's quality verdicts for a statistical method (``basis = "target"``).

Usage::

    verdict = target_verdict(result, serial_result)   # a parity dict, or None
    verdict["status"], verdict["detectable_loss"], verdict["power_source"]

A statistical method (fedavg, histogram forests, ...) runs another algorithm than serial, so
its quality is judged, not proven. In time-to-target mode the quality gap at the stop says
little (both sides stop just past the target), so :mod:`parabench.analysis.parity` asks this
module instead:

* **converged** (:func:`converged_verdict`): the case trained on past the target to the
  measured table's epoch budget (:func:`parabench.case.stopping.hold_epochs`); its quality
  there must be within :data:`~parabench.analysis.ratios.SPREAD_FACTOR` x serial's seed
  spread at that budget of serial's median (both from ``quality_targets.json``:
  :func:`~parabench.workloads.quality_targets.converged_reference`). Converged quality varies far
  less over seeds than an early epoch's, so this verdict sees small losses; its power (the
  loss it flags in 95 % of runs) is stated. ``differs`` reads ``converged -0.046``. **Paired
  by seed** where the entry holds a ``paired`` block (``parabench calibrate --paired``) and the
  run's data seed is one of its seeds: against serial's quality at that seed, within 3 x the
  spread of two sound trainings of the same data, which leaves the data draw's share of
  serial's spread out (``ok, blind <0.018 (paired by seed)`` for cnn at quick, against
  0.071 unpaired); the narrower of the two is used.
* **reached** (:func:`reach_verdict`), where the case could not be held (``--max-epochs``
  under the budget, no table entry): ok when it reached the target serial reached. A run can
  touch the target at one lucky evaluation of a noisy plateau, so it is blinder: its power
  comes from serial's curves (:func:`~parabench.workloads.quality_targets.reach_power`).
"""

from __future__ import annotations

import math
from typing import Any

from parabench.analysis.ratios import (
    SPREAD_FACTOR,
    detectable_loss,
    parity_holds,
    parity_tolerance,
    quality_gap,
)
from parabench.case.result import Result
from parabench.registry import workloads
from parabench.workloads.quality_targets import (
    ConvergedReference,
    calibrate_command,
    converged_reference,
    paired_spread,
    reach_power,
)

__all__ = ["converged_bounds", "converged_verdict", "paired_verdict", "reach_verdict",
           "statistical_verdict", "target_verdict"]


def target_verdict(result: Result, base: Result) -> dict[str, Any] | None:
    """The verdict of a statistical ``result`` in time-to-target mode against its baseline run
    ``base``: :func:`converged_verdict` where the run was held past the target, else
    :func:`reach_verdict`; None (the quality gap at the stop decides) where neither applies."""
    return converged_verdict(result) or reach_verdict(result, base)


def reach_verdict(result: Result, base: Result) -> dict[str, Any] | None:
    """Ok when ``result`` reached the target serial reached, failed when it did not within its
    epochs, with the power from serial's measured curves
    (:func:`~parabench.workloads.quality_targets.reach_power`; None where unmeasured). None unless
    both sides ran to the same target and serial got there."""
    mine, theirs = result.time_to_target, base.time_to_target
    if (mine is None or theirs is None or mine.target is None or not theirs.reached
            or mine.target != theirs.target or mine.higher_is_better != theirs.higher_is_better):
        return None
    power = reach_power(result.workload, result.profile, mine.target, mine.higher_is_better,
                        *_data_device(result))
    out: dict[str, Any] = {
        "basis": "target", "status": "ok" if mine.reached else "failed",
        "detectable_loss": power.loss if power else None,
        "power_source": power.text() if power else _no_power(result)}
    if power is None or power.seeds < 2:  # the text says what the power rests on
        out["power_note"] = "1 serial seed, no calibration" if power is None else "1 seed"
    if not mine.reached:
        best = "" if mine.best_quality is None else f" (its best {mine.best_quality:.4g})"
        out.update(differs="not reached", reason=(
            f"did not reach serial's target {mine.target:.4g} within {mine.epochs_run} "
            f"epoch(s){best}; serial reached it after {theirs.samples_to_target or 0:,} "
            f"samples"))
    return out


def converged_verdict(result: Result) -> dict[str, Any] | None:
    """A statistical run held past the target (``time_to_target.converged_quality``): its
    quality after the table's epochs against serial's there, within :data:`SPREAD_FACTOR` of
    their spread (:func:`converged_bounds`): paired by seed where the entry measured serial
    at this run's data seed and the paired spread, else serial's median over the seeds; where
    both apply, the one that sees the smaller loss."""
    ttt = result.time_to_target
    if ttt is None or ttt.converged_quality is None:
        return None
    hib = ttt.higher_is_better
    where = (result.workload, result.profile, *_data_device(result))
    refs = [r for r in (converged_reference(*where, seed=result.seed),
                        converged_reference(*where)) if r is not None]
    if not refs:
        return None
    # the narrower of the two: which one is a property of the entry, not of this run's outcome
    ref = min(refs, key=lambda r: converged_bounds(r, hib)[2])
    spread, tol, loss = converged_bounds(ref, hib)
    gap = quality_gap(ttt.converged_quality, ref.median, hib)
    whose = (f"serial's at seed {result.seed} (paired: {ref.seeds} seeds' spread of two "
             "training seeds on the same data)" if ref.paired
             else f"serial's median there over {ref.seeds} seeds")
    out: dict[str, Any] = {
        "basis": "target", "status": "ok" if parity_holds(gap, tol) else "failed",
        "gap": gap, "tolerance": tol,
        "baseline": (f"serial, seed {result.seed}, paired" if ref.paired
                     else f"serial, {ref.seeds} seeds ({ref.source})"),
        "baseline_quality": ref.median, "spread": spread,
        "spread_source": ref.source, "detectable_loss": loss,
        "power_source": (f"its quality after {ref.epochs} epoch(s) against {whose}, within "
                         f"{SPREAD_FACTOR:g}x that spread: a run losing {loss:.3g} fails 95 % "
                         "of the time")}
    if ref.paired:
        out["power_note"] = "paired by seed"
    if out["status"] == "failed":
        what = (f"serial's {ref.median:.4g} at seed {result.seed}" if ref.paired
                else f"serial's median {ref.median:.4g} ({ref.seeds} seeds)")
        out.update(differs=f"converged {gap:+.3f}", reason=(
            f"after {ref.epochs} epoch(s) its quality {ttt.converged_quality:.4g} is "
            f"{-gap:.4g} below {what}, more than the tolerance {tol:.3g} "
            f"({SPREAD_FACTOR:g}x serial's {'paired ' if ref.paired else ''}spread)"))
    return out


def converged_bounds(ref: ConvergedReference, higher_is_better: bool
                     ) -> tuple[float, float, float]:
    """(spread, tolerance, detectable loss) of the converged check against ``ref``: the
    spread relative for a lower-is-better metric, the tolerance
    :func:`~parabench.analysis.ratios.parity_tolerance`'s, the loss flagged in 95 % of runs
    (:func:`~parabench.analysis.ratios.detectable_loss`; paired: the spread is the gap's)."""
    spread = ref.std if higher_is_better else ref.std / abs(ref.median)
    tol = parity_tolerance("statistical", ref.median, higher_is_better, spread)
    loss = detectable_loss(tol, spread, ref.median, higher_is_better,
                           reference_runs=ref.seeds, paired=ref.paired)
    return spread, tol, loss


def statistical_verdict(result: Result, base: Result, gap: float, detectable: float | None
                        ) -> dict[str, Any]:
    """What decides a statistical ``result`` against its baseline run ``base``, beyond the
    quality gap at the end (``gap``, stating ``detectable``): :func:`target_verdict` in
    time-to-target mode, else :func:`paired_verdict` where it sees a smaller loss; for an
    estimator (one fit, whose end is its converged quality) the paired verdict also wins over
    the reaching verdict where it sees less. {}: the gap decides as it is."""
    paired = paired_verdict(result, gap)
    if paired is not None and detectable is not None and (
            paired["detectable_loss"] >= detectable):
        paired = None
    verdict = target_verdict(result, base)
    if verdict and paired and _one_fit(result) and (
            paired["detectable_loss"] < (verdict.get("detectable_loss") or math.inf)):
        verdict = None
    return verdict or paired or {}


def paired_verdict(result: Result, gap: float) -> dict[str, Any] | None:
    """The quality gap to the sweep's own serial at the same seed (the same data) within
    :data:`SPREAD_FACTOR` x the spread of two sound trainings of that data, where the entry
    measured it at the result's epochs
    (:func:`~parabench.workloads.quality_targets.paired_spread`); None elsewhere, and for a
    network stopped at a target (its converged or reaching verdict decides)."""
    assert result.quality is not None and result.quality.value is not None
    ttt = result.time_to_target
    if ttt is not None and ttt.target is not None and not _one_fit(result):
        return None  # stopped at the target: its quality there is not at a measured epoch
    hib = result.quality.higher_is_better
    epochs = None if _one_fit(result) else result.epochs
    pair = paired_spread(result.workload, result.profile, epochs, *_data_device(result))
    if pair is None:
        return None
    baseline = result.quality.value + (-gap if hib else gap)
    spread, tol, loss = converged_bounds(ConvergedReference(
        baseline, pair.sd, pair.pairs, pair.epochs, pair.source, paired=True), hib)
    ok = parity_holds(gap, tol)
    return {"status": "ok" if ok else "failed", "tolerance": tol,
            "spread": spread, "spread_source": pair.source, "detectable_loss": loss,
            "power_note": "paired by seed", "reason": None if ok else (
                f"its quality {result.quality.value:.4g} is {-gap:.4g} below serial's "
                f"{baseline:.4g} at the same seed, more than the tolerance {tol:.3g} "
                f"({SPREAD_FACTOR:g}x the spread of two trainings of that data)"),
            "power_source": (f"its quality against serial's at the same seed, within "
                             f"{SPREAD_FACTOR:g}x the spread of two trainings of that data: a "
                             f"run losing {loss:.3g} fails 95 % of the time")}


def _one_fit(result: Result) -> bool:
    """An estimator: every epoch refits the same model (its quality at the end is converged)."""
    return result.workload in workloads and not workloads.get(result.workload).epochs_improve


def _data_device(result: Result) -> tuple[str | None, str | None]:
    """The ``--data-dir`` and device ``result`` ran on: which calibrated entry describes it."""
    return (result.config or {}).get("options", {}).get("data_dir"), result.device


def _no_power(result: Result) -> str:
    """Why a reaching verdict without measured curves states no power, and what would."""
    command = calibrate_command(result.workload, result.profile, *_data_device(result))
    return (f"power unknown: no calibrated curves for {result.workload} at {result.profile}, "
            "and this run's one serial seed stopped at the target, which does not show how far "
            f"above it serial's curve goes (`{command}` measures them)")
