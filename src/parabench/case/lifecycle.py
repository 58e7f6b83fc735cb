"""The one lifecycle of a case - start, epochs, evaluate, speed windows, close - and the only
place its clock lives. The CLI worker, pytest-benchmark, asv and torchrun all drive it.

Usage::

    lifecycle = CaseLifecycle(config=config, workload=workloads.get(config.workload),
                              method=methods.get(config.method))  # launcher=POOL, meter=None
    if (reason := lifecycle.reason()) is None:
        with lifecycle:                          # start (timed: startup_s); close on any exit
            lifecycle.train(config.epochs)       # the epochs: learning curve, quality, parity
            quality, eval_s = lifecycle.evaluate()
            lifecycle.measure_windows()          # speed: a warm-up window, then WINDOWS more
            lifecycle.windows, lifecycle.window_steps

    with StartedCase(case.config(profile="tiny")) as started:   # pytest-benchmark and asv
        started.startup_s, started.warmup_s      # start, one epoch, the warm-up window
        stats = started.step()                   # one steady-state window: the timed unit
        started.quality()

**Speed windows.** Speed is not read from epochs (a tiny epoch is milliseconds or tens of
seconds, and the first is warm-up) but from windows: after the epochs and the evaluation the
session trains steady windows of ``steps`` global mini-batch steps each
(:meth:`~parabench.method.Session.train_window`; an estimator's window is one fit, fedavg's one
round, TensorFlow's one epoch: ``window_unit``), each timed by the case's clock, as many as
:mod:`parabench.case.windows`' rule takes. The first window is warm-up (it also calibrates):
it is recorded but left out of the steady state. ``steps`` is ``--steps N``, or picked so a
window takes about ``WINDOW_TARGET_S`` from the warm-up window's time per step. Throughput
is the median of the windows' samples/s with a 95 % bootstrap confidence interval
(:func:`parabench.case.bootstrap.median_ci`). The windows train on after the quality was
taken, on :func:`~parabench.torch.loop.window_order` (the same samples for every method), so
they change neither the learning curve nor parity.

Where a part of an epoch is a window's unit (``Method.windows_from_training``: fedavg, whose
part and window are both one round), a case in time-to-target mode trains no windows only to
time them: the parts it trained for quality serve, the first epoch's last part as the warm-up
window and the parts of later epochs in order as the steady ones, as many as the rule takes
(more are trained after the epochs if it wants more). Each part's CPU seconds and host-clock
span are read around it, outside the evaluations between them, for the checks at the file;
the result says how many windows were such parts (``Window.from_training``).

:class:`CaseLifecycle` makes the case's :class:`~parabench.core.clock.Clock` and sets
``session.clock`` (and ``session.launcher``) before ``start``: the session times its work
region with it and reads no timer itself. On CUDA the clock synchronises the device: through
the session's ``synchronize()`` where it has one, else the current CUDA device of this
process once torch has initialised CUDA here (a pool's parent never touches the GPU).

Around each window the energy counters are read (:mod:`parabench.case.energy`), outside the
session's clock. :meth:`CaseLifecycle.train` is the worker's loop: with a
:class:`~parabench.case.tracker.TargetTracker` each epoch is trained in the session's parts
(:meth:`~parabench.method.Session.epoch_parts`), each followed by a held-out evaluation off
the clock, and training stops once the target is reached; it returns the CPU efficiency of
the training (evaluations left out).
"""

from __future__ import annotations

import os
import statistics
import sys
from collections.abc import Callable
from dataclasses import dataclass, field

from parabench.case.energy import EnergyMeter
from parabench.case.parts import Between, TimedPart, checked_samples, timing_parts, train_epoch
from parabench.case.tracker import TargetTracker
from parabench.case.windows import steps_for, stretches, window_rule
from parabench.config import RunConfig
from parabench.core.clock import Clock, Stopwatch
from parabench.core.launcher import POOL, Launcher, launching
from parabench.core.measure import CpuRate, tree_cpu_seconds
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
    clock: Clock | None = None  # None: made from the session and the config at ``start``
    session: Session | None = None
    startup_s: float | None = None
    epochs_run: int = 0
    history: list[EpochStats] = field(default_factory=list)  # steady epochs (no warm-up)
    #: speed windows, the warm-up one first (``warmup_windows`` of them), see the module doc
    windows: list[EpochStats] = field(default_factory=list)
    warmup_windows: int = 0
    window_steps: int | None = None  # None until calibrated, or when a window is not steps
    last_epoch: EpochStats | None = None  # warm-up included: the first guess of a window
    #: CPU seconds per wall second of the case's process tree over the steady windows, and
    #: [start, end] of those windows on the host clock (evidence for the checks at the file)
    window_cores: float | None = None
    windows_span: list[float] | None = None
    #: [start, end] of each stretch of steady windows where they are not one block (None: one)
    window_spans: list[list[float]] | None = None
    #: parts trained for quality that may serve as speed windows
    #: (``Method.windows_from_training``): the first epoch's last part, then every later one
    trained_parts: list[TimedPart] = field(default_factory=list)
    #: how many of ``windows`` (warm-up included) are such parts
    windows_from_training: int = 0
    #: time to target: the loaders' samples up to each evaluation (None: a part kept no count)
    eval_served: list[int | None] = field(default_factory=list)

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

    def epoch(self, between: Between | None = None) -> EpochStats:
        """The session's epoch, energy counters read around it; with ``between`` (time to
        target), trained in the session's parts, ``between`` called after each (off the
        clock): True ends the epoch there, and its stats are those of the parts trained."""
        stats = train_epoch(self._started(), self.epochs_run, self.meter, between)
        self.epochs_run += 1
        self.history.append(stats)
        self.last_epoch = stats
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

        served: list[int | None] = [0]  # the loaders' count so far, apart from the claims

        def between(stats: EpochStats, epoch: int, part: int, parts: int) -> bool:
            assert tracker is not None  # held-out quality, evaluated off the training clock
            served[0] = None if None in (served[0], stats.served) else served[0] + stats.served
            stop = tracker.after_part(session, stats, epoch, part, parts)
            if tracker.evaluated:
                self.eval_served.append(served[0])
            if line := tracker.status_line():
                say(line)
            return stop

        if tracker is not None and self.method.windows_from_training:
            between = timing_parts(between, self.trained_parts)
        cpu0, watch = tree_cpu_seconds(os.getpid()), Stopwatch()
        for epoch in range(epochs):
            stats = self.epoch(between if tracker is not None else None)
            say(f"epoch {epoch + 1}/{epochs} {stats.seconds:.3f}s loss {stats.loss:.4f}")
            if tracker is not None and tracker.stop:
                break
        eval_wall, eval_cpu = (sum(tracker.eval_s), tracker.eval_cpu_s) if tracker else (0, 0)
        wall = watch.seconds() - eval_wall
        cores = self.config.workers * session.threads_per_worker
        cpu = tree_cpu_seconds(os.getpid()) - cpu0 - eval_cpu
        return cpu / (wall * cores)

    def window(self) -> EpochStats:
        """The next speed window (the first one calibrates ``window_steps``; see the doc)."""
        session = self._started()
        steps = self.window_steps or self.config.steps or 1
        if session.window_unit == "steps" and self.window_steps is None and not self.config.steps:
            # first guess from the last epoch (its first steps are warm-up: a low guess)
            last = self.last_epoch
            steps = steps_for(last, session.batch_size) if last else 1
        stats = checked_samples(session.train_window(len(self.windows), steps),
                                f"speed window {len(self.windows)}")
        if session.window_unit == "steps" and stats.samples != steps * (session.batch_size or 0):
            # a rank training the whole window (or none of it) would misstate samples/s
            raise RuntimeError(
                f"speed window {len(self.windows)}: the ranks trained {stats.samples} samples, "
                f"not {steps} steps x global batch {session.batch_size}: throughput would be "
                f"wrong")
        if not self.windows and session.window_unit == "steps":
            self.window_steps = self.config.steps or steps_for(stats, session.batch_size)
        self.windows.append(stats)
        return stats

    def warm_up_window(self) -> EpochStats:
        """The warm-up (and calibration) window: recorded, left out of the steady state."""
        stats = self.window()
        self.warmup_windows = len(self.windows)
        return stats

    def windows_asked(self) -> int | None:
        """The steady windows asked for: ``config.windows``, else ``$PARABENCH_WINDOWS``."""
        if self.config.windows is not None:
            return self.config.windows
        env = os.environ.get("PARABENCH_WINDOWS", "")
        return max(2, int(env)) if env.isdigit() else None

    def measure_windows(self, say: Say | None = None) -> None:
        """The warm-up window, then steady ones until :func:`~parabench.case.windows.window_rule`
        stops them (none with ``--steps 0``)."""
        if self.config.steps == 0:
            return
        rule = window_rule(self.windows_asked())
        say = say or (lambda _msg: None)
        session = self._started()
        spent, rates, taken = 0.0, [], 0
        blocks: list[TimedPart] = []  # (the steady windows' seconds, CPU s, span) per stretch
        if len(self.trained_parts) > 1:  # a warm-up part and at least one steady one
            warm, *steady = self.trained_parts
            self.windows.append(warm.stats)
            self.warmup_windows = 1
            say(f"speed: the {session.window_unit}s trained for quality from epoch 2 on "
                f"serve as windows, after a warm-up {session.window_unit} of "
                f"{warm.stats.seconds:.3f}s")
            for part in steady:
                if rule.stop(rates, spent, taken) is not None:
                    break
                self.windows.append(part.stats)
                blocks.append(part)
                taken, spent = taken + 1, spent + part.stats.seconds
                if part.stats.seconds:
                    rates.append(part.stats.samples / part.stats.seconds)
            self.windows_from_training = len(self.windows)
        else:
            self.warm_up_window()
            unit = f"{self.window_steps} steps" if self.window_steps else session.window_unit
            say(f"speed: {rule.wanted} windows of {unit} after a warm-up window "
                f"of {self.windows[0].seconds:.3f}s")
        if (why := rule.stop(rates, spent, taken)) is None:
            with CpuRate(os.getpid()) as rate:  # the cores the processes really kept busy
                while (why := rule.stop(rates, spent, taken)) is None:
                    if taken == rule.wanted:
                        say(f"speed: CI wider than {rule.ci_target:.0%}, "
                            f"up to {rule.most - taken} more windows")
                    stats, taken = self.window(), taken + 1
                    spent += stats.seconds
                    if stats.seconds:
                        rates.append(stats.samples / stats.seconds)
            assert rate.span is not None
            blocks.append(TimedPart(None, rate.cpu_s, rate.span))
        if why == "budget":
            say(f"speed: stopped after {taken} windows ({spent:.1f}s budget spent)")
        if blocks:
            self.window_cores, self.windows_span, self.window_spans = stretches(blocks)
        if rates:
            say(f"speed: median {statistics.median(rates):,.0f} samples/s "
                f"over {len(rates)} windows")

    def evaluate(self) -> tuple[float, float]:
        """The held-out quality and the seconds it took (timed by the case's clock)."""
        session = self._started()
        assert self.clock is not None
        return self.clock.time(session.evaluate)

    def final_quality(self, tracker: TargetTracker | None = None,
                      say: Say | None = None) -> tuple[float | None, float]:
        """(quality, eval_s): the tracker's last evaluation if it made one, else evaluate;
        then the session keeps the weights scored (``Session.keep_final_weights``)."""
        if tracker is not None and tracker.eval_s and tracker.evaluated:  # the last part's
            final = tracker.last_quality, tracker.eval_s[-1]
        else:
            (say or (lambda _msg: None))("evaluating")
            final = self.evaluate()
        self._started().keep_final_weights()
        return final

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
    """A case started once, warmed up by ``warmup_epochs`` epochs and the warm-up window, and
    stepped window by window.

    What pytest-benchmark and asv time: start-up (spawn, rendezvous, JIT, data, model) and
    warm-up happen in ``__enter__``, outside any timed region; ``step`` is one speed window,
    the same window the CLI measures (``config.steps``, or calibrated the same way).
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
            self.warmup_s += lifecycle.warm_up_window().seconds
        except BaseException:
            lifecycle.close()
            raise
        return self

    def step(self) -> EpochStats:
        """One steady speed window (recorded in ``windows``)."""
        return self._lifecycle().window()

    @property
    def windows(self) -> list[EpochStats]:
        """The steady windows stepped so far (the warm-up one left out)."""
        lc = self._lifecycle()
        return lc.windows[lc.warmup_windows:]

    @property
    def window_steps(self) -> int | None:
        return self._lifecycle().window_steps

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

