"""Where the cases' wall time went: their ``wall_parts`` summed over a sweep.

Usage::

    rows = wall_table(results)    # [("launch", "process start and imports", 41.2, 0.18), ...]
    print("\\n".join(wall_lines(results)))   # "where the cases' 232.1 s went: ..." (wrapped)

A case's wall time (``Result.wall_s``, the runner's clock from starting its process to reading
its result) is split by :func:`parabench.case.execute.wall_split` and the runner into the parts
:data:`PARTS` names, which sum to it. Results without a split (written before it was recorded,
skipped, or resumed from an older file) count in no part and are named apart.
"""

from __future__ import annotations

from collections.abc import Iterable

from parabench.case.result import Result

#: the parts in the order a case passes through them, and what each holds
PARTS: dict[str, str] = {
    "launch": "process start and imports (runner to the case's first line)",
    "check": "the method's check that the case can run here (its imports, if it needs torch)",
    "start": "session start: its imports (torch), ranks, rendezvous (less data and model)",
    "data": "data: built, or read from the sweep's cache (in the case's process)",
    "model": "model build, FLOPs count, batch size (in the case's process)",
    "train": "training epochs (the case's clock)",
    "evaluate": "held-out evaluations, with their parity digests",
    "windows": "speed windows, the warm-up one included (the case's clock)",
    "bookkeeping": "between epochs' parts and windows: energy reads, trace, progress",
    "close": "closing the session and its ranks",
    "peak": "measuring the machine's matmul peak (once per sweep and arithmetic)",
    "exit": "the result: assembling, writing, the process's exit, the runner's read",
}


def summed(results: Iterable[Result]) -> tuple[dict[str, float], int]:
    """(seconds per part over the results that have a split, in :data:`PARTS` order then any
    other part, the number of those results)."""
    total: dict[str, float] = {}
    n = 0
    for r in results:
        if not r.wall_parts:
            continue
        n += 1
        for name, seconds in r.wall_parts.items():
            total[name] = total.get(name, 0.0) + seconds
    order = [*PARTS, *sorted(set(total) - set(PARTS))]
    return {name: total[name] for name in order if name in total}, n


def wall_table(results: Iterable[Result]) -> list[tuple[str, str, float, float]]:
    """(part, what it holds, seconds, share of the split cases' wall time) for each part."""
    parts, _ = summed(results)
    whole = sum(parts.values())
    return [(name, PARTS.get(name, ""), seconds, seconds / whole if whole > 0 else 0.0)
            for name, seconds in parts.items()]


def wall_lines(results: Iterable[Result]) -> list[str]:
    """One line (the caller wraps it): each part's seconds and share, the largest first;
    empty when no result has a split."""
    results = list(results)
    parts, n = summed(results)
    whole = sum(parts.values())
    if not n or whole <= 0:
        return []
    ranked = sorted(parts.items(), key=lambda kv: -kv[1])
    shown = ", ".join(f"{name} {seconds:.1f} s ({seconds / whole:.0%})"
                      for name, seconds in ranked if seconds / whole >= 0.005)
    ran = sum(1 for r in results if r.wall_s is not None)
    unsplit = f"; {ran - n} case(s) without a split" if ran > n else ""
    return [f"where the {n} case(s)' {whole:.1f} s went: {shown}{unsplit}"]
