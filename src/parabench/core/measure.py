"""Measuring a case's processes from the outside: peak memory (RSS and PSS) and CPU time.

Usage::

    with TreeSampler(pid) as sampler:      # samples every 50 ms in a daemon thread
        proc.wait()
    sampler.peak_rss_mb, sampler.peak_pss_mb, sampler.pss_source, sampler.seen, sampler.cpu_s
    sampler.cores_over([start, end])       # the tree's CPU s per wall s between two host-clock
                                           # times (None when the samples do not bracket them)

**Memory.** The peak is the largest *sum* over the root and all its descendants at one instant,
so a multi-process method's memory is counted across every worker. Two sums are kept:

* RSS (every tick, ``/proc/PID/statm``: microseconds): it counts a page shared by N
  processes N times, so libtorch, copy-on-write pages after a fork and shared tensors make a
  multi-process method look heavier than it is. ``peak_rss_mb``, kept for history.
* PSS (``memory_full_info().pss``: each shared page split between the processes that map it,
  so the sum counts it once). A process whose PSS is unreadable counts with its RSS, and the
  source says so: ``"pss"``, ``"rss"`` (none readable) or ``"mixed"`` with the counts.
  Caveat: PSS splits a page between *every* process that maps it, also processes outside the
  case. Shared libraries (libtorch: a few hundred MB of file-backed pages) are split with any
  other torch process on the machine, so the same case reads lower next to other jobs
  (docs/measurements.md). The file-backed part at the peak is recorded
  (``extra.peak_pss_file_mb``). So ``peak_pss_mb``
  counts file-backed pages once *within the case* instead: the anonymous and shared-memory
  PSS (shared only within the case as a rule) summed, plus the largest process's file-backed
  RSS (``RssFile`` in ``/proc/PID/status``: the libraries every rank maps, counted once and
  whole, whatever runs beside the case). Where the kernel reports no split, plain PSS.
  Reading PSS is not cheap: ``/proc/PID/smaps_rollup`` walks the page tables, milliseconds of
  CPU per read of one torch process, growing with its size (docs/measurements.md). At every
  50 ms tick that would take a large share of a core away from the case it measures, so PSS is
  read at most ``pss_budget`` (5 %) of the time: after a pass that took ``c`` seconds the next
  waits ``c / pss_budget`` (small trees: every tick; 3 x 800 MB: about every 0.5 s). A memory
  spike shorter than that can be missed by the PSS peak; the RSS peak still sees it.
  A case forked from a pre-started interpreter (``forked``), with ranks forked from its copy,
  reads as it would have started fresh (:func:`_as_fresh`; the copy itself is left out).

**CPU.** Every tick also records the tree's CPU seconds at that instant on the host clock,
so the runner can read the cores a case kept busy over a span the case names (its steady speed
windows) from outside the case: the independent figure :mod:`parabench.case.audit` holds the
case's own ``window_cores`` against.

Sampling can miss a spike shorter than the interval; the worker also reports its own
``ru_maxrss`` (exact for itself) and the runner takes the larger for RSS.

The machine around the case (load, other processes' CPU, thread settings, ``busy``) is
:mod:`parabench.case.machine`.
"""

from __future__ import annotations

import bisect
import math
import os
import resource
import sys
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from parabench.core.clock import Stopwatch


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


@dataclass(frozen=True)
class TreeMemory:
    """One instant's memory of a process tree: RSS sum, PSS sum (RSS where PSS was unreadable)."""

    rss: int = 0
    pss: int = 0
    pss_read: int = 0  # processes whose PSS was read
    rss_fallback: int = 0  # processes counted with their RSS instead
    pss_file: int = 0  # the file-backed part of ``pss`` where the kernel reports it
    file_rss_max: int = 0  # the largest process's file-backed RSS (0: not reported)

    @property
    def case_bytes(self) -> int:
        """PSS with file-backed pages counted once in the case, not split with neighbours."""
        if not (self.pss_file and self.file_rss_max):
            return self.pss
        return self.pss - self.pss_file + self.file_rss_max


def _pss(p: psutil.Process, family: set[int] | None = None) -> tuple[int, int, int]:
    """(PSS, its file-backed part, file-backed RSS) in bytes: ``smaps_rollup`` and ``status``
    read once, else psutil's PSS alone. ``family``: a forked case's members (:func:`_as_fresh`)."""
    kib = _rollup(p.pid)
    if "Pss" not in kib:  # no rollup (old kernel, other OS): psutil's way
        return p.memory_full_info().pss, 0, 0
    pss = kib["Pss"]
    if family is not None and "Pss_Anon" in kib:
        pss += _as_fresh(kib, p.pid in family)
    return pss, kib.get("Pss_File", 0), _file_rss(p.pid)


def _as_fresh(kib: dict[str, int], member: bool) -> int:
    """What to add to a process's PSS so that a forked case (:mod:`parabench.core.prestart`)
    and its forked ranks (:mod:`parabench.core.rankfork`) read as if started fresh. A *member*
    (the case, a rank) would hold its own copy of each anonymous page it shares through those
    forks: all count (``Anonymous``, not ``Pss_Anon``). Another process (a DataLoader worker,
    forked in a fresh run too) shares with a member that counts them in full: its private
    pages only, so each shared page counts once, as its two shares would in a fresh run."""
    if member:
        return max(0, kib.get("Anonymous", 0) - kib["Pss_Anon"])
    return -_shared_part(kib)


def _shared_part(kib: dict[str, int]) -> int:
    """The part of ``Pss_Anon`` in pages still shared: less the private dirty pages, which no
    other process holds any more (one that wrote a page has its own copy)."""
    return max(0, kib["Pss_Anon"] - kib.get("Private_Dirty", 0))


def _rollup(pid: int) -> dict[str, int]:
    """``/proc/PID/smaps_rollup``'s fields in bytes (empty when unreadable)."""
    try:
        text = Path(f"/proc/{pid}/smaps_rollup").read_text()
    except OSError:
        return {}
    fields = (line.split(":", 1) for line in text.splitlines()[1:] if ":" in line)
    return {k: int(v.split()[0]) * 1024 for k, v in fields if v.split()}


def _file_rss(pid: int) -> int:
    """``RssFile`` of ``/proc/PID/status`` in bytes (0 when unreadable)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("RssFile:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def tree_memory(procs: Iterable[psutil.Process], family: set[int] | None = None) -> TreeMemory:
    """RSS and PSS sums over ``procs`` (one gone before its RSS is read is skipped; ``_pss``)."""
    rss = pss = read = fallback = pss_file = file_rss = 0
    for p in procs:
        try:
            p_rss = p.memory_info().rss
        except psutil.Error:
            continue
        try:
            p_pss, p_file, p_file_rss = _pss(p, family)
            pss, pss_file, read = pss + p_pss, pss_file + p_file, read + 1
            file_rss = max(file_rss, p_file_rss)
            # the PSS files are read after the RSS: a process growing in between (a training
            # case does) would otherwise show more PSS than RSS; RSS is at least what it holds
            p_rss = max(p_rss, p_pss - p_file + p_file_rss)
        except (psutil.Error, AttributeError):  # no permission, gone, or no PSS on this OS
            pss += p_rss
            fallback += 1
        rss += p_rss
    return TreeMemory(rss, pss, read, fallback, pss_file, file_rss)


def pss_source(pss_read: int, rss_fallback: int) -> str:
    """What a PSS sum is made of: ``pss``, ``rss`` or ``mixed``."""
    if rss_fallback == 0 and pss_read > 0:
        return "pss"
    return "rss" if pss_read == 0 else "mixed"


def tree_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of the live tree (children already reaped count in their parent).

    For this process itself ``getrusage`` is used: microsecond resolution, where psutil's
    per-process figures move in clock ticks (10 ms) and would make short epochs look odd.
    """
    total = 0.0
    procs = tree(pid)
    if pid == os.getpid() and procs:
        for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
            total += _rusage_cpu_s(who)
        procs = procs[1:]
    for p in procs:
        try:
            t = p.cpu_times()
            total += t.user + t.system + getattr(t, "children_user", 0.0)
            total += getattr(t, "children_system", 0.0)
        except psutil.Error:
            pass
    return total


class CpuRate:
    """``with CpuRate(pid) as rate: ...``; then ``rate.cores``: the CPU seconds the tree of
    ``pid`` used per wall second inside the block (None: no wall time), the cores it really
    kept busy (a "parallel" case near 1.0 ran serially), ``rate.cpu_s``: those CPU seconds,
    and ``rate.span``: [start, end] of the block on the host clock
    (:func:`parabench.core.clock.now`, shared by every process)."""

    def __init__(self, pid: int) -> None:
        self.pid, self.cores, self.cpu_s = pid, None, 0.0
        self.span: list[float] | None = None
        self._cpu0, self._watch = 0.0, Stopwatch()

    def __enter__(self) -> CpuRate:
        self._cpu0, self._watch = tree_cpu_seconds(self.pid), Stopwatch()
        return self

    def __exit__(self, *exc: object) -> None:
        wall = self._watch.seconds()
        self.cpu_s = cpu = tree_cpu_seconds(self.pid) - self._cpu0
        self.cores = round(cpu / wall, 3) if wall > 0 else None
        self.span = [self._watch.t0, self._watch.t0 + wall]


def _rusage_cpu_s(who: int) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


def self_max_rss_mb() -> float:
    """Peak RSS of this process so far (``ru_maxrss``: KiB on Linux, bytes on macOS)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (2**20 if sys.platform == "darwin" else 2**10)


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
                 relist_s: float = 0.5, forked: bool = False, listing: Path | None = None
                 ) -> None:
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
        self._cpu_thread = threading.Thread(target=self._run_cpu, name="parabench-cpu-sampler",
                                            daemon=True)

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
        self._cpu_thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._cpu_thread.join()
