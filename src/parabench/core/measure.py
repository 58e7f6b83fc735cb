"""Measuring a case's processes from the outside: peak memory (RSS and PSS) and CPU time.

Usage::

    memory = tree_memory(tree(pid))        # one instant's RSS and PSS sums over the tree
    memory.case_bytes, pss_source(memory.pss_read, memory.rss_fallback)
    tree_cpu_seconds(pid)                  # the live tree's CPU seconds so far
    with CpuRate(pid) as rate: ...         # then rate.cores, rate.cpu_s, rate.span

:class:`parabench.core.sampler.TreeSampler` takes these readings in the background, every
50 ms, for the runner (peaks, the processes seen, the cores over a span).

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

The machine around the case (load, other processes' CPU, thread settings, ``busy``) is
:mod:`parabench.case.machine`.
"""

from __future__ import annotations

import os
import resource
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

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
