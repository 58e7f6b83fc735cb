"""Time-to-accuracy: train until held-out quality first reaches a target, MLPerf style.

Usage::

    parabench run --workload cnn --method serial,ddp --workers 2 --target-quality 0.9
    parabench run --workload mlp --target-quality --max-epochs 20   # the workload's default

    target = resolve_target("default", workloads.get("mlp"))        # 0.97 x serial's quick 0.78
    tracker = TargetTracker(target=target, higher_is_better=True, epochs_improve=True)
    for epoch in range(max_epochs):                                 # the lifecycle's loop
        session.train_epoch(epoch)
        if tracker.after_epoch(session):                            # evaluated off the clock
            break
    tracker.summary(epoch_s, startup_s, max_epochs)                 # the result's time_to_target

A case in this mode evaluates held-out quality after every epoch, outside the epoch's clock
(evaluation time is summed apart), and stops at the first epoch whose quality reaches the
target (``>=``, or ``<=`` for lower-is-better metrics such as reconstruction MSE), or after
``--max-epochs``. Its time to target is ``train_s``, the sum of the epoch times up to and
including that epoch (the first, warm-up epoch included: its updates count towards the
quality), with ``startup_s`` reported beside it, never added in.

The default target of a workload is :data:`TARGET_FRACTION` of the quality serial reaches at
the quick profile in 3 epochs (``Workload.reference_quality``, measured and listed in the
README); for a lower-is-better metric it is that value divided by the fraction. The default
is a quick-profile figure whatever ``--profile`` says: at tiny it may be out of reach.

Estimator workloads refit the same seeded forest each epoch, so their quality cannot improve
over epochs: the first fit either reaches the target or the case stops there with "not
reached: every epoch refits the same model".
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field
from typing import Any

from parabench.case.clock import Stopwatch
from parabench.case.measure import tree_cpu_seconds
from parabench.case.records import TimeToTarget
from parabench.config import ConfigError, RunConfig
from parabench.method import Session
from parabench.workload import Workload

TARGET_FRACTION = 0.97
DEFAULT_MAX_EPOCHS = 10
DEFAULT = "default"


def default_target(workload: Workload) -> float:
    """0.97 x serial's quick-profile quality (reference / 0.97 when lower is better)."""
    ref = workload.reference_quality
    if ref is None:
        raise ConfigError(
            f"workload {workload.name} declares no reference quality for a default target; "
            "give --target-quality Q"
        )
    return ref * TARGET_FRACTION if workload.quality.higher_is_better else ref / TARGET_FRACTION


def resolve_target(spec: float | str | None, workload: Workload) -> float | None:
    """A numeric target for ``workload`` from ``--target-quality`` (None: mode off)."""
    if spec is None:
        return None
    if spec == DEFAULT:
        return default_target(workload)
    if isinstance(spec, bool) or not isinstance(spec, int | float) or not math.isfinite(spec):
        raise ConfigError(f"target quality must be a finite number or 'default', got {spec!r}")
    return float(spec)


def reached(value: float | None, target: float, higher_is_better: bool) -> bool:
    if value is None or math.isnan(value):
        return False
    return value >= target if higher_is_better else value <= target


#: the progress line :meth:`TargetTracker.status_line` prints after each evaluation
QUALITY_LINE = re.compile(r"^quality (\S+), target ")


def salvage(config: RunConfig, lines: list[str], epoch_s: list[float]) -> dict[str, Any]:
    """``epoch_quality`` and ``time_to_target`` of a killed case, from its progress lines.

    The runner keeps the epochs of a worker that died before writing its result (a timeout,
    a crash); in time-to-target mode this keeps the qualities it had printed, so the result
    says "not reached in N epochs" instead of nothing. Start-up is unknown there (None).
    """
    from parabench.registry import workloads

    tracker = tracker_for(workloads.get(config.workload), config)
    if tracker is None:
        return {}
    for line in lines:
        if m := QUALITY_LINE.match(line.strip()):
            value = None if m.group(1) == "none" else float(m.group(1))
            tracker.qualities.append(value)
            if tracker.reached_epoch is None and reached(value, tracker.target,
                                                         tracker.higher_is_better):
                tracker.reached_epoch = len(tracker.qualities)
    return {"epoch_quality": list(tracker.qualities),
            "time_to_target": TimeToTarget.from_dict(tracker.summary(epoch_s, None,
                                                                     config.epochs))}


def tracker_for(workload: Workload, config: RunConfig) -> TargetTracker | None:
    """The tracker of a case in time-to-target mode; None when ``target_quality`` is unset."""
    if config.target_quality is None:
        return None
    return TargetTracker(target=config.target_quality,
                         higher_is_better=workload.quality.higher_is_better,
                         epochs_improve=workload.epochs_improve)


@dataclass(kw_only=True)
class TargetTracker:
    """Per-epoch held-out quality of one case, and when it first reached the target."""

    target: float
    higher_is_better: bool
    epochs_improve: bool = True
    qualities: list[float | None] = field(default_factory=list)
    eval_s: list[float] = field(default_factory=list)
    eval_cpu_s: float = 0.0
    reached_epoch: int | None = None  # 1-based

    def after_epoch(self, session: Session) -> bool:
        """Evaluate once (timed apart); True when training should stop here."""
        cpu0, watch = tree_cpu_seconds(os.getpid()), Stopwatch()
        value = session.evaluate()
        self.eval_s.append(watch.seconds())
        self.eval_cpu_s += tree_cpu_seconds(os.getpid()) - cpu0
        self.qualities.append(value)
        if self.reached_epoch is None and reached(value, self.target, self.higher_is_better):
            self.reached_epoch = len(self.qualities)
        return self.reached_epoch is not None or not self.epochs_improve

    def status_line(self) -> str:
        """One progress line about the epoch just evaluated."""
        value = self.last_quality
        shown = "none" if value is None else f"{value:.6g}"
        line = f"quality {shown}, target {self.target:g}"
        if self.reached_epoch == len(self.qualities):
            return f"{line}: reached at epoch {self.reached_epoch}, stopping early"
        if not self.epochs_improve:
            return f"{line}: not reached, and every epoch refits the same model: stopping"
        return line

    @property
    def last_quality(self) -> float | None:
        return self.qualities[-1] if self.qualities else None

    def summary(self, epoch_s: list[float], startup_s: float | None,
                max_epochs: int) -> dict[str, Any]:
        """The result's ``time_to_target`` field."""
        out: dict[str, Any] = {
            "target": self.target,
            "higher_is_better": self.higher_is_better,
            "max_epochs": max_epochs,
            "epochs_run": len(epoch_s),
            "reached": self.reached_epoch is not None,
            "epoch": self.reached_epoch,
            "train_s": None,
            "startup_s": startup_s,
            "eval_s_total": sum(self.eval_s),
            "best_quality": self._best(),
            "stopped_early": False,
            "reason": "",
        }
        if self.reached_epoch is not None:
            out["train_s"] = sum(epoch_s[: self.reached_epoch])
            out["stopped_early"] = self.reached_epoch < max_epochs
        elif not self.epochs_improve and self.qualities:
            out["reason"] = "not reached: every epoch refits the same model"
        else:
            out["reason"] = f"not reached in {len(self.qualities)} epochs"
        return out

    def _best(self) -> float | None:
        known = [q for q in self.qualities if q is not None and not math.isnan(q)]
        if not known:
            return None
        return max(known) if self.higher_is_better else min(known)
