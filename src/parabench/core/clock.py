"""The one clock of a case: every measured region goes through :class:`Clock`, every
per-step component through :class:`Spans`.

Usage::

    clock = Clock(sync=None)       # made by the harness: sync=torch.cuda.synchronize on a GPU
    value, seconds = clock.time(work)      # sync; t0; work(); sync; t1 - also recorded
    clock.windows                          # every region timed so far, in order

    watch = Stopwatch(); ...; watch.seconds()  # not a region of work: start-up, wall time

    # on a rank: barrier; t0; work(); sync; t1; barrier - the slowest rank's seconds is the job's
    clock = Clock(sync=ctx.synchronize, barrier=ctx.barrier)

    spans = Spans(cuda=False)              # components inside a region, exclusive:
    with spans("forward"):
        ...
    spans.seconds()                        # {"forward": 0.12, ...} (a nested span's time
                                           # is not also its enclosing span's)

    with wall_part("data"):                # a part of this process's case wall time
        ...                                # (WALL: the case's split, parabench.analysis.wall)

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


class Stopwatch:
    """Seconds since it was made, read off the host clock without synchronising: for what is
    not a measured region of work (the runner's wall time and timeout, start-up, an
    evaluation, a note, a sampler's pacing, step marks). Outside this module time is read only
    through :class:`Clock`, :class:`Spans` and this; ``tests/project/test_layout.py`` checks it."""

    def __init__(self, timer: Callable[[], float] = now) -> None:
        self.timer = timer
        self.t0 = timer()

    @classmethod
    def since(cls, t0: float) -> Stopwatch:
        """A stopwatch started at ``t0``, a reading of :func:`now` (another process's: the
        host clock is CLOCK_MONOTONIC, one for every process)."""
        watch = cls()
        watch.t0 = t0
        return watch

    def seconds(self) -> float:
        return self.timer() - self.t0


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
    """Exclusive named time totals inside a region: host clock on CPU, CUDA events on a GPU.

    Spans nest as a stack: a span opened inside another is that span's child, and its time is
    taken out of its parent's, so every instant counts for one name only and the totals
    partition the covered time (``forward`` around a timed wait shows the wait apart)::

        with spans("backward"):          # 1.0 s in all
            with spans("communication"): # 0.3 s of it
                ...
        spans.seconds()                  # {"backward": 0.7, "communication": 0.3}
    """

    def __init__(self, cuda: bool = False, *, timer: Callable[[], float] = now) -> None:
        self.cuda = cuda
        #: the host clock read (:func:`now`; tests inject a scripted one)
        self.timer = timer
        self.reset()

    def reset(self) -> None:
        self.totals: dict[str, float] = defaultdict(float)
        #: CUDA: (name, start event, end event, index of the enclosing span or -1)
        self.events: list[tuple[str, Any, Any, int]] = []
        #: the open spans: CPU [name, t0, seconds of children]; CUDA the index in ``events``
        self._open: list[Any] = []

    @contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        if not self.cuda:
            frame = [name, self.timer(), 0.0]
            self._open.append(frame)
            try:
                yield
            finally:
                self._open.pop()
                elapsed = self.timer() - frame[1]
                self.totals[name] += elapsed - frame[2]
                if self._open:
                    self._open[-1][2] += elapsed
            return
        import torch

        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        parent = self._open[-1] if self._open else -1
        self._open.append(len(self.events))
        self.events.append((name, start, end, parent))
        start.record()
        try:
            yield
        finally:
            end.record()
            self._open.pop()

    def seconds(self) -> dict[str, float]:
        """Exclusive totals per name (CUDA: call after the region's synchronise)."""
        out = dict(self.totals)
        elapsed = [start.elapsed_time(end) / 1e3 for _, start, end, _ in self.events]
        own = list(elapsed)
        for i, (_, _, _, parent) in enumerate(self.events):
            if parent >= 0:
                own[parent] -= elapsed[i]
        for (name, *_), seconds in zip(self.events, own, strict=True):
            out[name] = out.get(name, 0.0) + seconds
        return out


#: this process's case wall time by part (:mod:`parabench.analysis.wall`): the case's phases
#: (:func:`parabench.case.execute.execute`) and, nested in its start, the work it does here
#: (data, model); a rank process's parts stay in that process
WALL = Spans()


def wall_part(name: str) -> Any:
    """``with wall_part("data"): ...``: a named part of this process's case wall time
    (exclusive: a part nested in another is taken out of it)."""
    return WALL(name)
