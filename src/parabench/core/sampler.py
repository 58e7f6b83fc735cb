"""The runner's background sampler of a case's process tree: memory peaks, CPU points.

Usage::

    with TreeSampler(pid) as sampler:      # samples every 50 ms in two daemon threads
        proc.wait()
    sampler.peak_rss_mb, sampler.peak_pss_mb, sampler.pss_source, sampler.seen, sampler.cpu_s
    sampler.cores_over([start, end])       # the tree's CPU s per wall s between two host-clock
                                           # times (None when the samples do not bracket them)

**Memory** (:mod:`parabench.core.measure`: what a reading is, and why PSS is read at most
``pss_budget`` of the time): the peak is the largest sum over the tree at one instant.

**CPU.** Every tick records the tree's CPU seconds at that instant on the host clock, so the
runner can read the cores a case kept busy over a span the case names (its steady speed
windows) from outside the case: the independent figure :mod:`parabench.case.audit` holds the
case's own ``window_cores`` against. These points come from a thread of their own: listing
the tree and reading PSS can take a few hundred ms on a busy machine, and in the same thread
they left gaps between the points wider than :meth:`TreeSampler.cores_over` reads across.

Sampling can miss a spike shorter than the interval; the worker also reports its own
``ru_maxrss`` (exact for itself) and the runner takes the larger for RSS.
"""

from __future__ import annotations

import bisect
import math
import threading
from pathlib import Path
from typing import Any

import psutil

from parabench.core.clock import Stopwatch
from parabench.core.measure import TreeMemory, pss_source, tree, tree_memory, tree_rss_bytes


def _interpolated(points: list[tuple[float, float]], t: float, max_gap_s: float
                  ) -> float | None:
    """The value at ``t`` on the line through the samples (time, value) around it; None
    when there is none on one side, or the nearer one on either side is over ``max_gap_s``
    away."""
    i = bisect.bisect_left(points, (t, -math.inf))
    if i == 0 or i == len(points):
        return None
    (t0, v0), (t1, v1) = points[i - 1], points[i]
    if t - t0 > max_gap_s or t1 - t > max_gap_s:
        return None
    return v0 + (v1 - v0) * (t - t0) / (t1 - t0) if t1 > t0 else v1


class TreeSampler:
    """Background sampler of a process tree: peak RSS and PSS sums, CPU time, every process seen."""

    def __init__(self, pid: int, interval_s: float = 0.05, pss_budget: float = 0.05,
                 relist_s: float = 0.5, forked: bool = False, listing: Path | None = None,
                 cpu: bool = True) -> None:
        self.pid = pid
        # forked: the root was forked from a pre-started interpreter, its ranks maybe from its
        # copy, listed in ``listing`` (core.rankfork): PSS as if fresh, the copy left out
        self.forked, self.listing = forked, listing
        self._zygotes: set[int] = set()
        self._family: set[int] | None = {pid} if forked else None
        self.interval_s = interval_s
        self.pss_budget = pss_budget  # the share of wall time PSS reading may take
        self.relist_s = relist_s  # how often the tree is listed again (new processes)
        self._procs: list[psutil.Process] = []
        self._watch = Stopwatch()  # paces the listing and the PSS reads
        self._next_list = 0.0
        self.peak_bytes = 0
        self.peak_pss: TreeMemory | None = None  # the PSS pass with the largest sum
        self._next_pss = 0.0
        self._seen: dict[int, float] = {}
        self._cpu: dict[tuple[int, float], float] = {}  # (pid, created) -> own CPU seconds
        self._cpu_at: list[tuple[float, float]] = []  # (host clock, the tree's CPU seconds)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="parabench-sampler", daemon=True)
        # cpu False: memory only, no CPU points (a rank reading its own peak inside training
        # wakes no second thread there)
        self._cpu_thread = threading.Thread(target=self._run_cpu, name="parabench-cpu-sampler",
                                            daemon=True) if cpu else None

    @property
    def peak_rss_mb(self) -> float:
        return self.peak_bytes / 2**20

    @property
    def peak_pss_mb(self) -> float | None:
        """The PSS peak; None when no PSS could be read (then RSS is the only figure)."""
        peak = self.peak_pss
        if peak is None or pss_source(peak.pss_read, peak.rss_fallback) == "rss":
            return None
        return peak.case_bytes / 2**20

    @property
    def pss_source(self) -> str:
        peak = self.peak_pss
        return "rss" if peak is None else pss_source(peak.pss_read, peak.rss_fallback)

    @property
    def pss_counts(self) -> dict[str, int]:
        peak = self.peak_pss or TreeMemory()
        return {"pss": peak.pss_read, "rss": peak.rss_fallback}

    @property
    def seen(self) -> dict[int, float]:
        """Every process of the tree seen so far, as pid -> create time (to spot pid reuse)."""
        with self._lock:
            return dict(self._seen)

    @property
    def cpu_s(self) -> float:
        """CPU seconds of every process seen, as last sampled (misses each one's last tick)."""
        with self._lock:
            return sum(self._cpu.values())

    def cores_over(self, span: list[float] | None, max_gap_s: float = 0.5) -> float | None:
        """The tree's CPU seconds per wall second between ``span``'s two host-clock times, as
        sampled from here (each end interpolated between the samples around it); None when
        the samples do not bracket both ends within ``max_gap_s``."""
        with self._lock:
            points = list(self._cpu_at)
        if not span or span[1] <= span[0]:
            return None
        ends = [_interpolated(points, t, max_gap_s) for t in span]
        if ends[0] is None or ends[1] is None:
            return None
        return round((ends[1] - ends[0]) / (span[1] - span[0]), 3)

    def _tree(self) -> list[psutil.Process]:
        """The tree, listed again every ``relist_s``: listing reads every process's
        ``/proc/PID/stat`` (milliseconds of CPU for 100 processes), reading a known one's
        memory a few microseconds, and the runner shares the cores with the case it measures.
        """
        if self._watch.seconds() >= self._next_list:
            self._procs = tree(self.pid)
            if self.forked:
                from parabench.core.rankfork import read_record

                listed = read_record(self.listing)
                self._zygotes, self._family = listed["zygote"], {self.pid, *listed["rank"]}
            self._next_list = self._watch.seconds() + self.relist_s
        return self._procs

    def sample(self) -> None:
        """One pass of both readings: the tree's CPU seconds (a point for
        :meth:`cores_over`), its RSS, and its PSS when the budget allows. Inside ``with``,
        two threads take them apart (:meth:`_run_cpu`, :meth:`_run`)."""
        procs = self._tree()
        self._read_cpu(procs)
        self._read_memory(procs)

    def _read_cpu(self, procs: list[psutil.Process]) -> None:
        """Each process's CPU seconds so far, and their sum as a point at this instant."""
        with self._lock:
            for p in procs:
                try:
                    created = self._seen.setdefault(p.pid, p.create_time())
                    t = p.cpu_times()
                    self._cpu[(p.pid, created)] = t.user + t.system
                except psutil.Error:
                    pass
            self._cpu_at.append((self._watch.t0 + self._watch.seconds(),
                                 sum(self._cpu.values())))

    def _read_memory(self, procs: list[psutil.Process]) -> None:
        held = [p for p in procs if p.pid not in self._zygotes]  # a zygote is the case's copy
        self.peak_bytes = max(self.peak_bytes, tree_rss_bytes(held))
        start = self._watch.seconds()
        if start >= self._next_pss:
            memory = tree_memory(held, self._family)
            if self.peak_pss is None or memory.case_bytes > self.peak_pss.case_bytes:
                self.peak_pss = memory
            self.peak_bytes = max(self.peak_bytes, memory.rss)
            end = self._watch.seconds()
            self._next_pss = end + (end - start) / self.pss_budget

    def memory_fields(self, self_peak_mb: float = 0.0) -> dict[str, Any]:
        """The result's memory figures: RSS peak (never below ``self_peak_mb``), PSS and source."""
        pss = self.peak_pss_mb
        return {
            "peak_rss_mb": round(max(self.peak_rss_mb, self_peak_mb), 1),
            "peak_pss_mb": None if pss is None else round(pss, 1),
            "extra": {"peak_pss_source": self.pss_source, "peak_pss_processes": self.pss_counts,
                      "peak_pss_file_mb": round((self.peak_pss or TreeMemory()).pss_file / 2**20,
                                                1)},
        }

    def _run(self) -> None:
        """The tree and its memory: a listing, and a PSS read over many processes, can take
        a few hundred ms on a busy machine."""
        while not self._stop.is_set():
            self._read_memory(self._tree())
            self._stop.wait(self.interval_s)

    def _run_cpu(self) -> None:
        """The CPU points, in a thread of their own: a slow listing or PSS read in
        :meth:`_run` would leave gaps between them wider than ``cores_over``'s ``max_gap_s``,
        and a span of speed windows the runner cannot read (the reads wait on ``/proc``,
        not on the interpreter)."""
        while not self._stop.is_set():
            self._read_cpu(self._procs)
            self._stop.wait(self.interval_s)

    def __enter__(self) -> TreeSampler:
        self._procs = self._tree()  # the CPU thread's first points count the tree
        self._thread.start()
        if self._cpu_thread is not None:
            self._cpu_thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        if self._cpu_thread is not None:
            self._cpu_thread.join()
