"""One case's held-out quality at every evaluation in time-to-target mode, and when it first
reached the target (:mod:`parabench.case.stopping` makes the tracker of a case and says how
the mode works).

Usage::

    tracker = TargetTracker(target=0.9, higher_is_better=True, mid_from=1)
    tracker.record(0.91, epoch=1, part=2, parts=8, samples=1_408, seconds=1.2)  # an evaluation
    tracker.reached_epoch, tracker.stop    # 2, True: the target was reached in epoch 2
    tracker.status_line()                  # 'quality 0.91, target 0.9 at epoch 2 part 3/8 ...'
    tracker.summary([0.6, 0.6], 3.0, 10)["samples_to_target"]   # 1408: the result's field
    reached(0.91, 0.9, higher_is_better=True)                   # True

The lifecycle calls :meth:`TargetTracker.after_part` after each part it trains, which
evaluates (off the training clock) where the placement rules say and records it.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field
from typing import Any

from parabench.core.clock import Stopwatch
from parabench.core.measure import tree_cpu_seconds
from parabench.method import EpochStats, Session


def reached(value: float | None, target: float, higher_is_better: bool) -> bool:
    if value is None or math.isnan(value):
        return False
    return value >= target if higher_is_better else value <= target


#: the progress line :meth:`TargetTracker.status_line` prints after each evaluation: the
#: quality, where (epoch, part) and the samples and training seconds up to there
QUALITY_LINE = re.compile(r"^quality (\S+), target \S+ at epoch (\d+)(?: part (\d+)/(\d+))? "
                          r"\((\d+) samples, (\S+)s training\)")


@dataclass(kw_only=True)
class TargetTracker:
    """Held-out quality of one case at every evaluation, and when it first reached the target.

    ``qualities`` holds one value per epoch (its last evaluation: the result's
    ``epoch_quality``), ``evals`` every evaluation as (epochs, samples, train_s, quality):
    the epochs trained so far (fractional between parts), every worker's samples and the
    training seconds up to it.
    """

    target: float
    higher_is_better: bool
    epochs_improve: bool = True
    source: str = ""
    qualities: list[float | None] = field(default_factory=list)
    evals: list[tuple[float, int, float, float | None]] = field(default_factory=list)
    eval_s: list[float] = field(default_factory=list)
    eval_cpu_s: float = 0.0
    reached_epoch: int | None = None  # 1-based
    #: the evaluation that first reached the target (an index into ``evals``)
    reached_eval: int | None = None
    samples: int = 0
    train_s: float = 0.0
    #: evaluations per epoch (the most an epoch had), the nominal samples between two, and
    #: the resolution in words; the last evaluation's (epoch, part, parts), 0-based
    parts: int = 0
    every_samples: int | None = None
    resolution: str = ""
    position: tuple[int, int, int] = (0, 0, 1)
    #: train on past the target to this epoch (:func:`~parabench.case.stopping.hold_epochs`);
    #: None: stop at the target
    hold_epochs: int | None = None
    #: whether the last part was evaluated (a held run past the target skips mid-epoch ones)
    evaluated: bool = True
    #: epochs before this one (0-based) are evaluated at their ends only
    #: (:func:`~parabench.case.stopping.mid_epoch_from`)
    mid_from: int = 0
    #: serial's crossing in this sweep, for a method graded exactly (``RunConfig.eval_from``):
    #: before it nothing is evaluated, and the first evaluation at or past it is
    #: the last (:attr:`past_crossing`); 0: none
    eval_from: int = 0

    def after_part(self, session: Session, stats: EpochStats, epoch: int, part: int,
                   parts: int) -> bool:
        """Evaluate once after part ``part`` of ``parts`` of ``epoch`` (0-based), which
        trained ``stats`` (timed apart); True when training should stop here. The epochs
        before ``mid_from`` are evaluated at their ends only; nothing before serial's crossing
        (``eval_from``), and a run held past the target only at its last held epoch's end:
        no verdict reads the evaluations between (the epoch's quality reads None there)."""
        before_crossing = self.samples + stats.samples < self.eval_from
        holding = (self.reached_eval is not None and self.hold_epochs is not None
                   and epoch + 1 < self.hold_epochs)
        ends_only = self.reached_eval is not None or epoch < self.mid_from
        self.evaluated = not (before_crossing or holding or (ends_only and part < parts - 1))
        if not self.evaluated:
            self.samples += stats.samples
            self.train_s += stats.seconds
            if part == parts - 1:
                self.unevaluated_to(epoch + 1)
            return False
        cpu0, watch = tree_cpu_seconds(os.getpid()), Stopwatch()
        value = session.evaluate()
        self.eval_s.append(watch.seconds())
        self.eval_cpu_s += tree_cpu_seconds(os.getpid()) - cpu0
        if not self.resolution:
            self.resolution = resolution(session, parts, self.mid_from, self.eval_from)
            self.every_samples = round(session.samples_per_epoch / parts) or None
        self.record(value, epoch=epoch, part=part, parts=parts, samples=stats.samples,
                    seconds=stats.seconds)
        return self.stop

    def unevaluated_to(self, epochs: int) -> None:
        """The epochs up to ``epochs`` (a count) that no evaluation ended read None."""
        self.qualities += [None] * (epochs - len(self.qualities))

    def record(self, value: float | None, *, epoch: int, part: int, parts: int, samples: int,
               seconds: float) -> None:
        """One evaluation after part ``part`` of ``parts`` of ``epoch``, which trained
        ``samples`` in ``seconds``."""
        self.samples += samples
        self.train_s += seconds
        self.parts, self.position = max(self.parts, parts), (epoch, part, parts)
        self.evals.append((epoch + (part + 1) / parts, self.samples, self.train_s, value))
        if self.reached_eval is None and reached(value, self.target, self.higher_is_better):
            self.reached_eval, self.reached_epoch = len(self.evals) - 1, epoch + 1
        if part == parts - 1 or self.stop:  # the epoch's last evaluation
            self.qualities.append(value)

    @property
    def stop(self) -> bool:
        """Whether training stops: the target was reached (and the held epochs are done),
        serial's crossing was evaluated (``eval_from``), or more epochs cannot help."""
        if self.reached_eval is not None:
            return self.hold_epochs is None or len(self.qualities) >= self.hold_epochs
        return (not self.epochs_improve and bool(self.evals)) or self.past_crossing

    @property
    def past_crossing(self) -> bool:
        """Whether an evaluation at or past serial's crossing (``eval_from``) was made: a
        method with serial's mathematics is at the target there, so one that is not stops
        where serial did, and parity compares the two at the same samples."""
        return bool(self.eval_from and self.evals and self.evals[-1][1] >= self.eval_from)

    def status_line(self) -> str:
        """One progress line about the evaluation just made (:data:`QUALITY_LINE`); "" when
        the last part was not evaluated."""
        if not self.evaluated:
            return ""
        value = self.evals[-1][3] if self.evals else None
        shown = "none" if value is None else f"{value:.6g}"
        epoch, part, parts = self.position
        at = f"at epoch {epoch + 1}" + (f" part {part + 1}/{parts}" if parts > 1 else "")
        line = (f"quality {shown}, target {self.target:g} {at} ({self.samples} samples, "
                f"{self.train_s:.6f}s training)")
        if self.reached_eval is not None and self.reached_eval == len(self.evals) - 1:
            if self.hold_epochs is not None and not self.stop:
                return (f"{line}: reached; training on to epoch {self.hold_epochs} for the "
                        f"converged check")
            return f"{line}: reached, stopping early"
        if not self.epochs_improve:
            return f"{line}: not reached, and every epoch refits the same model: stopping"
        if self.past_crossing:
            return f"{line}: not reached where serial was ({self.eval_from} samples): stopping"
        return line

    @property
    def last_quality(self) -> float | None:
        return self.evals[-1][3] if self.evals else None

    def summary(self, epoch_s: list[float], startup_s: float | None,
                max_epochs: int) -> dict[str, Any]:
        """The result's ``time_to_target`` field."""
        hit = None if self.reached_eval is None else self.evals[self.reached_eval]
        out: dict[str, Any] = {
            "target": self.target,
            "target_source": self.source,
            "higher_is_better": self.higher_is_better,
            "max_epochs": max_epochs,
            "epochs_run": len(epoch_s),
            "reached": hit is not None,
            "epoch": self.reached_epoch,
            "epochs_to_target": None if hit is None else hit[0],
            "samples_to_target": None if hit is None else hit[1],
            "train_s": None if hit is None else hit[2],
            "startup_s": startup_s,
            "eval_s_total": sum(self.eval_s),
            "evals_per_epoch": self.parts or None,
            "eval_every_samples": self.every_samples,
            "resolution": self.resolution,
            "mid_epoch_from": self.mid_from,
            "eval_samples": [e[1] for e in self.evals],
            "eval_quality": [e[3] for e in self.evals],
            "best_quality": self._best(),
            "stopped_early": False,
            "reason": "",
        }
        if self.hold_epochs is not None:
            held = self.qualities[:self.hold_epochs]
            out["converged_epochs"] = self.hold_epochs
            out["converged_quality"] = held[-1] if len(held) == self.hold_epochs else None
        if hit is not None:
            out["stopped_early"] = hit[0] < max_epochs
        elif not self.epochs_improve and self.evals:
            out["reason"] = "not reached: every epoch refits the same model"
        elif self.past_crossing:
            out["reason"] = (f"not reached where serial was ({self.eval_from:,} samples), where "
                             "serial's mathematics is at the target: stopped there")
            out["stopped_at_crossing"] = self.evals[-1][0]
        else:
            out["reason"] = f"not reached in {len(self.qualities)} epochs"
        return out

    def _best(self) -> float | None:
        known = [e[3] for e in self.evals if e[3] is not None and not math.isnan(e[3])]
        if not known:
            return None
        return max(known) if self.higher_is_better else min(known)


def resolution(session: Session, parts: int, mid_from: int = 0, eval_from: int = 0) -> str:
    """How finely ``session`` resolves when the target was reached, in words (``mid_from``:
    :func:`~parabench.case.stopping.mid_epoch_from`; ``eval_from``:
    :attr:`TargetTracker.eval_from`)."""
    if eval_from and session.workload.epochs_improve:
        at = (f"{parts} parts per epoch" if parts > 1 else
              f"{session.config.method} trains whole epochs here: the first epoch's end past it")
        return (f"evaluated once, at serial's crossing in this sweep ({eval_from:,} samples; "
                f"{at}), where it stops: a method graded exactly trains serial's mathematics, "
                f"so it is at the target there, and parity compares the two at the same samples")
    if parts > 1 and mid_from:
        return (f"{parts} evaluations per epoch from epoch {mid_from + 1}, one at the end of "
                f"each epoch before it (serial's measured seeds first reached the target at "
                f"the end of epoch {mid_from + 1})")
    if parts > 1:
        return f"{parts} evaluations per epoch"
    if not session.workload.epochs_improve:
        return "one evaluation per fit: the fit reaches the target or not"
    return (f"one evaluation per epoch: {session.config.method} trains whole epochs here, so "
            f"samples_to_target is resolved to an epoch")
