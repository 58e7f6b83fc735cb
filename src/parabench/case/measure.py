"""Measuring a case's processes from the outside: peak memory and CPU time of a process tree.

Usage::

    with TreeSampler(pid) as sampler:      # samples every 50 ms in a daemon thread
        proc.wait()
    sampler.peak_rss_mb, sampler.seen       # seen: {pid: create_time} of every process

The peak is the largest *sum* of RSS over the root and all its descendants at one instant,
so a multi-process method's memory is counted across every worker. Sampling can miss a spike
shorter than the interval; the worker also reports its own ``ru_maxrss`` (exact for the
process itself) and the runner takes the larger of the two.
"""

from __future__ import annotations

import os
import resource
import sys
import threading
from collections.abc import Iterable

import psutil


def tree(pid: int) -> list[psutil.Process]:
    """The process and all its live descendants (empty when it is gone)."""
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.Error:
        return []


def tree_rss_bytes(procs: Iterable[psutil.Process]) -> int:
    total = 0
    for p in procs:
        try:
            total += p.memory_info().rss
        except psutil.Error:
            pass  # exited between listing and reading
    return total


def tree_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of the live tree (children already reaped count in their parent).

    For this process itself ``getrusage`` is used: microsecond resolution, where psutil's
    per-process figures move in clock ticks (10 ms) and would make short epochs look odd.
    """
    total = 0.0
    procs = tree(pid)
    if pid == os.getpid() and procs:
        for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
            usage = resource.getrusage(who)
            total += usage.ru_utime + usage.ru_stime
        procs = procs[1:]
    for p in procs:
        try:
            t = p.cpu_times()
            total += t.user + t.system + getattr(t, "children_user", 0.0)
            total += getattr(t, "children_system", 0.0)
        except psutil.Error:
            pass
    return total


def self_max_rss_mb() -> float:
    """Peak RSS of this process so far (``ru_maxrss``: KiB on Linux, bytes on macOS)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (2**20 if sys.platform == "darwin" else 2**10)


class TreeSampler:
    """Background sampler of a process tree's summed RSS; remembers every process it saw."""

    def __init__(self, pid: int, interval_s: float = 0.05) -> None:
        self.pid = pid
        self.interval_s = interval_s
        self.peak_bytes = 0
        self._seen: dict[int, float] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="parabench-sampler", daemon=True)

    @property
    def peak_rss_mb(self) -> float:
        return self.peak_bytes / 2**20

    @property
    def seen(self) -> dict[int, float]:
        """Every process of the tree seen so far, as pid -> create time (to spot pid reuse)."""
        with self._lock:
            return dict(self._seen)

    def sample(self) -> None:
        procs = tree(self.pid)
        with self._lock:
            for p in procs:
                try:
                    self._seen.setdefault(p.pid, p.create_time())
                except psutil.Error:
                    pass
        self.peak_bytes = max(self.peak_bytes, tree_rss_bytes(procs))

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval_s)

    def __enter__(self) -> TreeSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
