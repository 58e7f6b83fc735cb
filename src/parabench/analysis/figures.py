"""Figures read from results: the one place a case's group, its time per sample, its busy
flag and its peak memory are read, for the table, the answer, the site and TensorBoard.

Usage::

    times = median_times(results)           # {CaseKey: median seconds per training sample}
    mb, is_rss = peak_memory(results)       # PSS sum, else RSS (marked)
    print(memory_cell(mb, is_rss))
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterable

from parabench.case.result import Result
from parabench.identity import CaseId, CaseKey
from parabench.identity import options_label as _label

__all__ = ["BUSY_WARNING", "RSS_MARK", "group_key", "median_times", "memory_cell",
           "options_label", "peak_memory", "recorded_busy", "seconds_per_sample"]


def options_label(r: Result) -> str:
    """The options column of ``r``'s row (:func:`parabench.identity.options_label`)."""
    return _label((r.config or {}).get("options", {}))


def group_key(r: Result) -> CaseKey:
    """(workload, method, device, workers, batch, profile, options, threads): repeats share it
    (:attr:`parabench.identity.CaseId.group` of the case as it ran)."""
    return CaseId.recorded(r).group


def median_times(results: Iterable[Result]) -> dict[CaseKey, float]:
    """Median steady seconds per training sample per configuration (:func:`group_key`), ok
    results only: the times :func:`parabench.analysis.ratios.ratios` divides. Per sample, not
    per epoch, so ratios compare equal work: a fedavg epoch is every client processing
    serial's samples (2x the samples at 2 clients), and its speedup is the throughput ratio
    the report's scaling plot draws. A result that does not know its epoch's samples has no
    time here (no ratio), never an epoch time among per-sample ones."""
    times: dict[CaseKey, list[float]] = defaultdict(list)
    for r in results:
        if (t := seconds_per_sample(r)) is not None:
            times[group_key(r)].append(t)
    return {k: statistics.median(v) for k, v in times.items()}


def seconds_per_sample(r: Result) -> float | None:
    """An ok result's steady seconds per training sample (None: not ok, or unknown)."""
    if r.status != "ok" or (t := r.median_epoch_s) is None or not r.samples_per_epoch:
        return None
    return t / r.samples_per_epoch


#: how a recommendation from busy-only measurements is qualified
BUSY_WARNING = "measured only on a busy machine (other processes took cores the case needed)"


def recorded_busy(r: Result) -> bool:
    """Whether ``r`` says it was measured on a busy machine (``Result.machine.busy``, as
    :func:`parabench.case.machine.is_busy` judged it around the case)."""
    return bool(r.machine and r.machine.busy)


def machine_type(r: Result) -> str | None:
    """What kind of machine ``r`` ran on, as its ``env`` says: CPU model, cores and GPUs
    (None: not recorded). Rows of different types are not compared: a cluster's sweep may
    place serial on one kind of node and a method on another."""
    env = r.env or {}
    if not env.get("cpu"):
        return None
    text = f"{env['cpu']} x{env.get('cores') or '?'}"
    return text + (f", {' + '.join(map(str, gpus))}" if (gpus := env.get("gpus")) else "")


#: how a memory figure that is an RSS sum (no PSS: unreadable, or an older result) is marked
RSS_MARK = " rss"


def peak_memory(rs: Iterable[Result]) -> tuple[float | None, bool]:
    """The median peak memory of ``rs`` (:attr:`Result.peak_mb`: the PSS sum, else the RSS
    sum) and whether any of them is RSS only (shared pages counted once per process). The
    one place the table, recommend, the site and TensorBoard read memory from."""
    rs = [r for r in rs if r.peak_mb is not None]
    if not rs:
        return None, False
    return (statistics.median(r.peak_mb for r in rs),  # type: ignore[type-var]
            any(r.peak_pss_mb is None for r in rs))


def memory_cell(mb: float | None, is_rss: bool) -> str:
    """``1,234`` (PSS) or ``1,234 rss``; ``-`` when not recorded."""
    return "-" if mb is None else f"{mb:,.0f}" + (RSS_MARK if is_rss else "")
