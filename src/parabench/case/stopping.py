"""Time-to-accuracy: train until held-out quality first reaches a target, MLPerf style.

Usage::

    parabench run --workload cnn --method serial,ddp --workers 2 --target-quality 0.9
    parabench run --workload mlp --target-quality --max-epochs 20   # the measured default

    rule = resolve(ToTarget(), workloads.get("mlp"), "tiny")  # quality_targets.json's number
    target = rule.quality
    tracker = TargetTracker(target=target, higher_is_better=True, epochs_improve=True)
    parts = session.epoch_parts(EVALS_PER_EPOCH)   # as the lifecycle's epochs do it
    for epoch in range(max_epochs):
        for part in range(parts):
            stats = session.train_part(epoch, part, parts)
            if tracker.after_part(session, stats, epoch, part, parts):  # off the clock
                break
        if tracker.stop:
            break
    tracker.summary(epoch_s, startup_s, max_epochs)   # the result's time_to_target

A case in this mode evaluates held-out quality between *parts* of each epoch, outside the
training clock (evaluation time is summed apart): up to :data:`EVALS_PER_EPOCH` parts of
whole steps for the torch sessions that train an epoch in parts
(:meth:`~parabench.method.Session.epoch_parts`: serial, model_parallel, ddp, fsdp, tp,
fsdp_tp, pipeline, hybrid, pipeline_tp), one per round for fedavg, one per epoch for the
others (TensorFlow's methods, the forests), which the result says (``evals_per_epoch``,
``resolution``). Epochs before the one at whose end serial's measured seeds first reached the
target are evaluated at their ends only (:func:`mid_epoch_from`); a method graded exactly
only at serial's crossing in the sweep (``RunConfig.eval_from``), where it stops; a statistical
method held past the target (:func:`hold_epochs`) only at the hold's end. The parts of an
epoch train exactly its batches, in its order. It stops at the first evaluation whose quality
reaches the target (``>=``, or ``<=`` for lower-is-better metrics such as reconstruction
MSE), mid-epoch if that is where (the last epoch is then partial), or after ``--max-epochs``.
It records the samples trained up to that evaluation (``samples_to_target``, every worker's)
and ``train_s``, the training seconds up to it (the first, warm-up epoch included: its
updates count towards the quality), with ``startup_s`` reported beside it, never added in.

The default target of a workload is measured (:mod:`parabench.workloads.quality_targets`: a
``parabench calibrate`` store's entry, else the shipped table): serial's reliable quality at
the profile, the 10th percentile over seeds (90th lower-is-better) after the entry's epoch
budget. Where none was measured it falls back to :data:`TARGET_FRACTION` of serial's quick
3-epoch quality (``Workload.reference_quality``; divided when lower is better), said so in
the case's progress and ``target_source``.

Estimator workloads refit the same seeded forest each epoch, so their quality cannot improve
over epochs: the first fit either reaches the target or the case stops there with "not
reached: every epoch refits the same model".
"""

from __future__ import annotations

import os
from typing import Any

from parabench.case.tracker import QUALITY_LINE, TargetTracker
from parabench.config import ConfigError, RunConfig
from parabench.core.records import TimeToTarget
from parabench.stopping import Epochs, StoppingRule, ToTarget
from parabench.workload import Workload
from parabench.workloads.quality_targets import (
    first_reach_epoch,
    missing_reason,
    quality_target,
)

TARGET_FRACTION = 0.97
DEFAULT_MAX_EPOCHS = 10
#: the most evaluations per epoch a session that trains an epoch in parts gets: its
#: samples-to-target is then resolved to 1/8 of an epoch
EVALS_PER_EPOCH = 8
#: set (to anything): every part of every epoch is evaluated (:func:`mid_epoch_from`)
EVAL_ALL_PARTS = "PARABENCH_EVAL_ALL_PARTS"


def default_max_epochs(names: list[str], profile: str) -> int:
    """``--max-epochs``'s default for a run of the workloads ``names`` at ``profile``:
    :data:`DEFAULT_MAX_EPOCHS`, or the longest epoch budget of their measured targets where
    that is longer, so a statistical case can train on to its budget for the converged check
    (:func:`hold_epochs`)."""
    budgets = [entry.epochs for name in names
               if (entry := quality_target(name, profile)) is not None]
    return max([DEFAULT_MAX_EPOCHS, *budgets])


def fallback_target(workload: Workload) -> float:
    """0.97 x serial's quick-profile quality (reference / 0.97 when lower is better)."""
    ref = workload.reference_quality
    if ref is None:
        raise ConfigError(
            f"workload {workload.name} declares no reference quality for a default target; "
            "give --target-quality Q"
        )
    return ref * TARGET_FRACTION if workload.quality.higher_is_better else ref / TARGET_FRACTION


def default_target(workload: Workload, profile: str, data_dir: str | None = None,
                   device: str | None = None) -> tuple[float, str]:
    """(target, where from): the measured one (:func:`quality_target`), else the fallback."""
    if (entry := quality_target(workload.name, profile, data_dir, device)) is not None:
        return entry.value, entry.source
    why = missing_reason(workload.name, profile, data_dir, device)
    return fallback_target(workload), f"{why}: using {TARGET_FRACTION:g} x quick reference"


def resolve(rule: StoppingRule, workload: Workload, profile: str,
            own_data: bool = False, data_dir: str | None = None,
            device: str | None = None) -> StoppingRule:
    """A grid's ``rule`` made one case's (:mod:`parabench.stopping`): :class:`Epochs` as it
    is, or a :class:`ToTarget` with a number and a cap. Each workload's own target is the
    measured one (:func:`default_target`), or the rule's ``otherwise`` where nobody measured
    one at ``profile`` or the case trains on the user's own data (``own_data``,
    ``--data-dir``, unless a calibrated store has an entry for ``data_dir``), else the
    fallback target; the cap is the rule's, else :func:`default_max_epochs` of this
    workload."""
    if isinstance(rule, Epochs):
        return rule
    cap = rule.max_epochs or default_max_epochs([workload.name], profile)
    if rule.quality is not None:
        return ToTarget(float(rule.quality), max_epochs=cap)
    if rule.otherwise is not None and ((own_data and data_dir is None) or quality_target(
            workload.name, profile, data_dir, device) is None):
        return rule.otherwise
    return ToTarget(default_target(workload, profile, data_dir, device)[0], max_epochs=cap)


def at_measured_target(config: RunConfig, max_epochs: int | None = None) -> RunConfig | None:
    """``config`` in time-to-target mode at its workload's measured target, training at most
    ``max_epochs`` (default: :func:`default_max_epochs`); None where nobody measured one at the
    profile, or on the user's own data (``--data-dir``), which the target was not measured
    on: :func:`resolve`'s rule for a measured target. What the coverage grid's held workloads
    use."""
    from parabench.registry import workloads

    rule = resolve(ToTarget(max_epochs=max_epochs, otherwise=Epochs(config.epochs)),
                   workloads.get(config.workload), config.profile,
                   own_data=bool(config.options.get("data_dir")))
    return config.with_stop(rule) if isinstance(rule, ToTarget) else None


def target_source(target: float, workload: Workload, profile: str,
                  data_dir: str | None = None, device: str | None = None) -> str:
    """Where a case's numeric target came from: the default (measured, or the fallback, as
    :func:`default_target` says) when it is that number, else "--target-quality"."""
    try:
        value, source = default_target(workload, profile, data_dir, device)
    except ConfigError:
        return "--target-quality"
    return source if value == target else "--target-quality"


def salvage(config: RunConfig, lines: list[str], epoch_s: list[float]) -> dict[str, Any]:
    """``epoch_quality`` and ``time_to_target`` of a killed case (a timeout, a crash), from
    the progress lines it printed, so the result says "not reached in N epochs" (or where it
    was reached) instead of nothing; start-up is unknown there (None)."""
    from parabench.registry import workloads

    tracker = tracker_for(workloads.get(config.workload), config)
    if tracker is None:
        return {}
    for line in lines:
        if not (m := QUALITY_LINE.match(line.strip())):
            continue
        value, epoch = None if m.group(1) == "none" else float(m.group(1)), int(m.group(2)) - 1
        part, parts = (int(m.group(3)) - 1, int(m.group(4))) if m.group(3) else (0, 1)
        tracker.unevaluated_to(epoch)  # epochs that printed no quality were not evaluated
        tracker.record(value, epoch=epoch, part=part, parts=parts,
                       samples=int(m.group(5)) - tracker.samples,
                       seconds=float(m.group(6)) - tracker.train_s)
    tracker.unevaluated_to(len(epoch_s))
    return {"epoch_quality": list(tracker.qualities),
            "time_to_target": TimeToTarget.from_dict(tracker.summary(epoch_s, None,
                                                                     config.epochs))}


def tracker_for(workload: Workload, config: RunConfig) -> TargetTracker | None:
    """The tracker of a case in time-to-target mode; None when ``target_quality`` is unset."""
    if config.target_quality is None:
        return None
    return TargetTracker(target=config.target_quality,
                         higher_is_better=workload.quality.higher_is_better,
                         epochs_improve=workload.epochs_improve,
                         source=target_source(config.target_quality, workload,
                                              config.profile, config.options.get("data_dir"),
                                              config.device),
                         hold_epochs=hold_epochs(workload, config),
                         mid_from=mid_epoch_from(workload, config),
                         eval_from=0 if os.environ.get(EVAL_ALL_PARTS) else config.eval_from or 0)


def mid_epoch_from(workload: Workload, config: RunConfig) -> int:
    """The epoch (0-based) from which a case evaluates between the parts of an epoch; the
    epochs before it are evaluated at their ends only. That is the epoch at whose end the
    first of serial's measured seeds reached the case's target
    (:func:`~parabench.workloads.quality_targets.first_reach_epoch`): before it no measured
    run was at the target at an epoch's end, so evaluations between its parts would rarely
    decide anything and cost the most. 0 (every part) where serial's curves do not describe
    this case: no curves at the profile (for ``--data-dir``, none calibrated on those files),
    a batch size or another option that changes the mathematics, or
    ``$PARABENCH_EVAL_ALL_PARTS`` set (how ``scripts/eval_placement.py`` measures what this
    changes)."""
    from parabench.identity import math_options

    others = set(config.options) - {"data_dir"}  # its curves are the data's calibrated ones
    if (config.target_quality is None or config.batch_size is not None
            or others & set(math_options()) or os.environ.get(EVAL_ALL_PARTS)):
        return 0
    first = first_reach_epoch(workload.name, config.profile, config.target_quality,
                              workload.quality.higher_is_better,
                              data_dir=config.options.get("data_dir"), device=config.device)
    return first - 1 if first else 0


def hold_epochs(workload: Workload, config: RunConfig) -> int | None:
    """The epochs a statistical method trains to, past the target, for the converged check:
    the measured table's budget (:func:`~parabench.workloads.quality_targets.quality_target`), when
    the case may train that long (``--max-epochs``) and its epochs can improve; else None."""
    from parabench.registry import methods

    if not workload.epochs_improve or config.method not in methods:
        return None
    if methods.get(config.method).grading(workload, config).kind != "statistical":
        return None
    entry = quality_target(workload.name, config.profile, config.options.get("data_dir"),
                           config.device)
    return entry.epochs if entry is not None and entry.epochs <= config.epochs else None
