"""A started case stepped epoch by epoch: what pytest-benchmark and asv time.

Usage::

    with StartedCase(case.config(profile="tiny")) as started:   # start-up + one warm-up epoch
        started.startup_s
        stats = started.step()                     # one steady-state epoch: the timed unit
        started.quality()

Start-up (process spawn, rendezvous, JIT, data, model) happens in ``StartedCase.__enter__``,
outside any timed region; ``step`` runs one epoch of the already-started session and, on CUDA,
the session synchronises before it returns (see :mod:`parabench.torch.loop`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from parabench.config import RunConfig
from parabench.method import EpochStats, Session
from parabench.registry import methods, workloads


@dataclass
class StartedCase:
    """A session started once, warmed up by one epoch, and stepped epoch by epoch."""

    config: RunConfig
    warmup_epochs: int = 1
    startup_s: float = 0.0
    warmup_s: float = 0.0
    epochs_run: int = 0
    history: list[EpochStats] = field(default_factory=list)
    session: Session | None = None

    def __enter__(self) -> StartedCase:
        workload = workloads.get(self.config.workload)
        method = methods.get(self.config.method)
        if (reason := method.check(workload, self.config)) is not None:
            raise RuntimeError(f"cannot run {self.config.label()}: {reason}")
        self.session = method.session(workload, self.config)
        t0 = time.perf_counter()
        try:
            self.session.start()
            self.startup_s = time.perf_counter() - t0
            self.warmup_s = sum(self.step().seconds for _ in range(self.warmup_epochs))
        except BaseException:
            self.session.close()
            raise
        self.history.clear()  # warm-up epochs are not steady state
        return self

    def step(self) -> EpochStats:
        assert self.session is not None, "use StartedCase as a context manager"
        stats = self.session.train_epoch(self.epochs_run)
        self.epochs_run += 1
        self.history.append(stats)
        return stats

    def quality(self) -> float:
        assert self.session is not None
        return self.session.evaluate()

    @property
    def samples_per_epoch(self) -> int:
        assert self.session is not None
        return self.session.samples_per_epoch

    def __exit__(self, *exc: object) -> None:
        if self.session is not None:
            self.session.close()
