"""An epoch as the lifecycle trains it: whole, or in parts with an evaluation between them.

Usage::

    stats = train_epoch(session, epoch, meter)              # session.train_epoch, checked
    stats = train_epoch(session, epoch, meter, between)     # time to target: in parts
    checked_samples(stats, "epoch 3")   # the samples claimed against those the loaders served

With ``between`` (:meth:`parabench.case.lifecycle.CaseLifecycle.train` in time-to-target
mode) the epoch is trained in the session's parts (at most
:data:`~parabench.case.stopping.EVALS_PER_EPOCH`, :meth:`parabench.method.Session.epoch_parts`)
and ``between(stats, epoch, part, parts)`` runs after each part, outside its clock and its
energy reads; a True return ends the epoch there, and the epoch's stats are those of the
parts it trained (:meth:`~parabench.method.EpochStats.join`).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

from parabench.case.energy import EnergyMeter
from parabench.case.stopping import EVALS_PER_EPOCH
from parabench.core.clock import Stopwatch
from parabench.core.measure import tree_cpu_seconds
from parabench.method import EpochStats, Session

#: called after each part of an epoch: (its stats, epoch, part, parts) -> stop the epoch here
Between = Callable[[EpochStats, int, int, int], bool]


@dataclass(frozen=True)
class TimedPart:
    """A part trained for quality (None: a stretch of speed windows trained to be timed), the
    CPU seconds the case's process tree used in it and its [start, end] on the host clock."""

    stats: EpochStats | None
    cpu_s: float
    span: list[float]


def timing_parts(between: Between, kept: list[TimedPart]) -> Between:
    """``between`` that first appends to ``kept`` each part that may serve as a speed window
    (the first epoch's last part, then every part of a later one) with the CPU seconds and
    the host-clock span it took; the clocks are read again once ``between`` (the evaluation)
    is done, where the next part starts."""
    pid = os.getpid()
    mark = (Stopwatch(), tree_cpu_seconds(pid))  # where the part starts

    def timed(stats: EpochStats, epoch: int, part: int, parts: int) -> bool:
        nonlocal mark
        if epoch > 0 or part == parts - 1:
            watch, cpu0 = mark
            kept.append(TimedPart(stats, tree_cpu_seconds(pid) - cpu0,
                                  [watch.t0, watch.t0 + watch.seconds()]))
        stop = between(stats, epoch, part, parts)
        mark = (Stopwatch(), tree_cpu_seconds(pid))
        return stop

    return timed


def checked_samples(stats: EpochStats, what: str) -> EpochStats:
    """``stats``, if it claims the samples its loaders served (``EpochStats.served``); else
    the case fails with both figures (a per-rank count taken for a global one, say)."""
    if stats.served is not None and stats.served != stats.samples:
        raise RuntimeError(
            f"{what}: the session claims {stats.samples} samples but its data loaders served "
            f"{stats.served}: throughput would be wrong")
    return stats


def train_epoch(session: Session, epoch: int, meter: EnergyMeter | None = None,
                between: Between | None = None) -> EpochStats:
    """Epoch ``epoch`` of ``session`` (see the module doc), the energy counters read around
    each call that trains."""
    parts = session.epoch_parts(EVALS_PER_EPOCH) if between else 1
    done: list[EpochStats] = []
    for part in range(parts):
        before = meter.read() if meter else None
        stats = checked_samples(
            session.train_part(epoch, part, parts) if parts > 1 else session.train_epoch(epoch),
            f"epoch {epoch}" + (f" part {part + 1}/{parts}" if parts > 1 else ""))
        if meter:
            meter.add_epoch(before, meter.read(), part)
        done.append(stats)
        if between is not None and between(stats, epoch, part, parts):
            if meter and part < parts - 1:
                meter.cut_short = True  # its joules are a part's: no steady epoch
            break
    return EpochStats.join(done)
