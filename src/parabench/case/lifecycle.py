"""The one lifecycle of a case - start, warm-up, timed windows, evaluate, close - and the
only place its clock lives. The CLI worker, pytest-benchmark, asv and torchrun all drive it.

Usage::

    lifecycle = CaseLifecycle(config, workload, method)     # launcher=POOL, meter=None
    if (reason := lifecycle.reason()) is None:
        with lifecycle:                          # start (timed: startup_s); close on any exit
            lifecycle.warm_up(1)                 # epochs run, then left out of ``history``
            stats = lifecycle.epoch()            # one timed window (today: an epoch)
            quality, eval_s = lifecycle.evaluate()

    with StartedCase(case.config(profile="tiny")) as started:   # pytest-benchmark and asv
        started.startup_s, started.warmup_s
        stats = started.step()                   # one steady-state epoch: the timed unit
        started.quality()

:class:`CaseLifecycle` makes the case's :class:`~parabench.case.clock.Clock` and sets
``session.clock`` (and ``session.launcher``) before ``start``: the session times its work
region with it and reads no timer itself. On CUDA the clock synchronises the device: through
the session's ``synchronize()`` where it has one, else the current CUDA device of this
process once torch has initialised CUDA here (a pool's parent never touches the GPU).

Around each window the energy counters are read (:mod:`parabench.case.energy`), outside the
session's clock. :meth:`CaseLifecycle.train` is the worker's loop: with a
:class:`~parabench.case.target.TargetTracker` each epoch is followed by a held-out evaluation
off the clock, and training stops once the target is reached; it returns the CPU efficiency
of the training (evaluations left out).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field

from parabench.case.clock import Clock, now
from parabench.case.energy import EnergyMeter
from parabench.case.launcher import POOL, Launcher, launching
from parabench.case.measure import tree_cpu_seconds
from parabench.case.target import TargetTracker
from parabench.config import RunConfig
from parabench.method import EpochStats, Method, Session
from parabench.workload import Workload

Say = Callable[[str], None]


def device_sync(session: Session, config: RunConfig) -> Callable[[], None] | None:
    """What the clock calls before each read: the session's hook, or this process's GPU."""
    hook = getattr(session, "synchronize", None)
    if callable(hook):
        return hook
    if config.device != "cuda":
        return None

    def sync() -> None:
        torch = sys.modules.get("torch")  # never import (or initialise CUDA) just to sync
        if torch is not None and torch.cuda.is_initialized():
            torch.cuda.synchronize()

    return sync


@dataclass(kw_only=True)
class CaseLifecycle:
    """One case's session from start to close; see the module doc."""

    config: RunConfig
    workload: Workload
    method: Method
    launcher: Launcher = POOL
    #: energy counters read around every window (None: not read)
    meter: EnergyMeter | None = None
    #: None: made from the session and the config at ``start``
    clock: Clock | None = None
    session: Session | None = None
    startup_s: float | None = None
    epochs_run: int = 0
    #: the steady-state windows (warm-up ones are left out)
    history: list[EpochStats] = field(default_factory=list)

    def reason(self) -> str | None:
        """Why this case cannot run here (None: it can)."""
        with launching(self.launcher):
            return self.method.check(self.workload, self.config)

    def start(self) -> Session:
        """Open the session, hand it the clock and launcher, start it (timed: ``startup_s``)."""
        self.session = session = self.method.session(self.workload, self.config)
        self.clock = self.clock or Clock(sync=device_sync(session, self.config))
        session.clock, session.launcher = self.clock, self.launcher
        _, self.startup_s = self.clock.time(session.start)
        return session

    def epoch(self) -> EpochStats:
        """One window: the session's epoch, energy counters read around it."""
        session = self._started()
        before = self.meter.read() if self.meter else None
        stats = session.train_epoch(self.epochs_run)
        if self.meter:
            self.meter.add_epoch(before, self.meter.read())
        self.epochs_run += 1
        self.history.append(stats)
        return stats

    def warm_up(self, epochs: int) -> float:
        """Run ``epochs`` windows and leave them out of ``history``; their seconds summed."""
        seconds = sum(self.epoch().seconds for _ in range(epochs))
        self.history.clear()  # warm-up epochs are not steady state
        return seconds

    def train(self, epochs: int, tracker: TargetTracker | None = None,
              say: Say | None = None) -> float:
        """Up to ``epochs`` windows (fewer once ``tracker`` reaches its target): CPU efficiency.

        CPU efficiency is the tree's CPU seconds over wall seconds x cores while training;
        per-epoch evaluations are not training: their wall and CPU time are left out.
        """
        say = say or (lambda _msg: None)
        session = self._started()
        cpu0, wall0 = tree_cpu_seconds(os.getpid()), now()
        for epoch in range(epochs):
            stats = self.epoch()
            say(f"epoch {epoch + 1}/{epochs} {stats.seconds:.3f}s loss {stats.loss:.4f}")
            if tracker is not None:  # held-out quality, evaluated off the epoch clock
                stop = tracker.after_epoch(session)
                say(tracker.status_line())
                if stop:
                    break
        eval_wall, eval_cpu = (sum(tracker.eval_s), tracker.eval_cpu_s) if tracker else (0, 0)
        wall = now() - wall0 - eval_wall
        cores = self.config.workers * session.threads_per_worker
        cpu = tree_cpu_seconds(os.getpid()) - cpu0 - eval_cpu
        return cpu / (wall * cores)

    def evaluate(self) -> tuple[float, float]:
        """The held-out quality and the seconds it took (timed by the case's clock)."""
        session = self._started()
        assert self.clock is not None
        return self.clock.time(session.evaluate)

    def final_quality(self, tracker: TargetTracker | None = None,
                      say: Say | None = None) -> tuple[float | None, float]:
        """(quality, eval_s): the tracker's last evaluation if it made one, else evaluate."""
        if tracker is not None and tracker.eval_s:  # the last epoch's evaluation is final
            return tracker.last_quality, tracker.eval_s[-1]
        if say is not None:
            say("evaluating")
        return self.evaluate()

    def close(self) -> None:
        """Close the session (safe to call again, and after any error)."""
        if self.session is not None:
            self.session.close()

    def _started(self) -> Session:
        assert self.session is not None, "start the case first"
        return self.session

    def __enter__(self) -> CaseLifecycle:
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass
class StartedCase:
    """A case started once, warmed up by ``warmup_epochs`` epochs, and stepped epoch by epoch.

    What pytest-benchmark and asv time: start-up (spawn, rendezvous, JIT, data, model) and
    warm-up happen in ``__enter__``, outside any timed region; ``step`` is one window.
    """

    config: RunConfig
    warmup_epochs: int = 1
    startup_s: float = 0.0
    warmup_s: float = 0.0
    lifecycle: CaseLifecycle | None = field(default=None, repr=False)

    def __enter__(self) -> StartedCase:
        from parabench.registry import methods, workloads

        self.lifecycle = lifecycle = CaseLifecycle(
            config=self.config, workload=workloads.get(self.config.workload),
            method=methods.get(self.config.method),
        )
        if (reason := lifecycle.reason()) is not None:
            raise RuntimeError(f"cannot run {self.config.label()}: {reason}")
        try:
            lifecycle.start()
            self.startup_s = lifecycle.startup_s or 0.0
            self.warmup_s = lifecycle.warm_up(self.warmup_epochs)
        except BaseException:
            lifecycle.close()
            raise
        return self

    def step(self) -> EpochStats:
        return self._lifecycle().epoch()

    def quality(self) -> float:
        return self._lifecycle()._started().evaluate()

    @property
    def session(self) -> Session | None:
        return self.lifecycle.session if self.lifecycle else None

    @property
    def history(self) -> list[EpochStats]:
        return self.lifecycle.history if self.lifecycle else []

    @property
    def epochs_run(self) -> int:
        return self.lifecycle.epochs_run if self.lifecycle else 0

    @property
    def samples_per_epoch(self) -> int:
        return self._lifecycle()._started().samples_per_epoch

    def _lifecycle(self) -> CaseLifecycle:
        assert self.lifecycle is not None, "use StartedCase as a context manager"
        return self.lifecycle

    def __exit__(self, *exc: object) -> None:
        if self.lifecycle is not None:
            self.lifecycle.close()

