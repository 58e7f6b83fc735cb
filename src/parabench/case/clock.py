"""The one clock of a case: every measured region goes through :class:`Clock`, every
per-step component through :class:`Spans`.

Usage::

    clock = Clock(sync=lambda: torch.cuda.synchronize(dev))     # made by the harness
    value, seconds = clock.time(work)      # sync; t0; work(); sync; t1 - also recorded
    clock.windows                          # every region timed so far, in order

    # on a rank: barrier; t0; work(); sync; t1; barrier - the slowest rank's seconds is the job's
    clock = Clock(sync=ctx.synchronize, barrier=ctx.barrier)

    spans = Spans(cuda=False)              # components inside a region
    with spans("forward"):
        ...
    spans.seconds()                        # {"forward": 0.12, ...}

The harness (:mod:`parabench.case.lifecycle` in the case's process, the rank driver on each
rank) makes the clocks and hands them to sessions and rank programs, which say *what* the work
is and never read a timer themselves. On CUDA the device is synchronised before each clock
read; component spans are CUDA events read after that synchronise, so timing adds no sync
inside the region.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

T = TypeVar("T")


def now() -> float:
    """The host clock every figure is read from (monotonic, sub-microsecond)."""
    return time.perf_counter()


class Clock:
    """Times regions of work: ``[barrier]; sync; t0; work(); sync; t1; [barrier]``.

    ``sync`` makes queued device work finish before a clock read (CUDA); ``barrier`` lines
    ranks up so all start together and none starts the next region while another is still in
    this one. Every timed region's seconds are appended to ``windows``.
    """

    def __init__(self, *, sync: Callable[[], None] | None = None,
                 barrier: Callable[[], None] | None = None,
                 timer: Callable[[], float] = now) -> None:
        self.sync = sync or (lambda: None)
        self.barrier = barrier
        #: the clock read (:func:`now`; tests inject a scripted one)
        self.timer = timer
        self.windows: list[float] = []

    def time(self, work: Callable[[], T]) -> tuple[T, float]:
        """``work()`` and the seconds it took (synchronised; between barriers on ranks)."""
        if self.barrier is not None:
            self.barrier()
        self.sync()
        t0 = self.timer()
        value = work()
        self.sync()
        seconds = self.timer() - t0
        if self.barrier is not None:
            self.barrier()
        self.windows.append(seconds)
        return value, seconds

    @contextmanager
    def region(self) -> Iterator[list[float]]:
        """``with clock.region() as out:`` - the block timed like :meth:`time`; ``out[0]`` after."""
        out: list[float] = []
        if self.barrier is not None:
            self.barrier()
        self.sync()
        t0 = self.timer()
        try:
            yield out
        finally:
            self.sync()
            seconds = self.timer() - t0
            if self.barrier is not None:
                self.barrier()
            self.windows.append(seconds)
            out.append(seconds)


class Spans:
    """Named time totals inside a region: host clock on CPU, CUDA event pairs on a GPU."""

    def __init__(self, cuda: bool = False) -> None:
        self.cuda = cuda
        self.reset()

    def reset(self) -> None:
        self.totals: dict[str, float] = defaultdict(float)
        self.events: list[tuple[str, Any, Any]] = []

    @contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        if not self.cuda:
            t0 = now()
            try:
                yield
            finally:
                self.totals[name] += now() - t0
            return
        import torch

        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        yield
        end.record()
        self.events.append((name, start, end))

    def seconds(self) -> dict[str, float]:
        """Totals per name (CUDA: call after the region's synchronise)."""
        out = dict(self.totals)
        for name, start, end in self.events:
            out[name] = out.get(name, 0.0) + start.elapsed_time(end) / 1e3
        return out
