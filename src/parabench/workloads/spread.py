"""The measured seed-to-seed spread of serial's held-out quality, per workload and profile.

Usage::

    from parabench.workloads.spread import seed_spread
    entry = seed_spread("mlp", "tiny", epochs=1)   # SpreadEntry(std=...) or None if unmeasured
    entry.std, entry.source      # 0.018, "seed_spread.json: <command> (<date>), 1 epoch(s)"

Statistical parity (:mod:`parabench.analysis.parity`) accepts a method within
``SPREAD_FACTOR x std`` of serial. The figures are *measured*, never guessed: they live in
``seed_spread.json`` beside this module (shipped as package data), written by
``scripts/seed_spread.py``, which runs serial over several seeds through the real harness and
records, for every entry, the seeds, the per-seed qualities, the epochs, and the command and
date that produced it. Entries are per workload, profile *and epochs* (``entries[workload]
[profile][str(epochs)]``): after one tiny epoch densenet121 is at 0.09-0.28 over seeds
(std 0.078), after three at 0.99-1.0 (std 0.0035), which would flag a sound 1-epoch run.
A run at epochs nobody measured gets the nearest measured entry, and its source says so. A
workload that is not in the table (a plugin's) may declare its own measured
``Workload.seed_spread``; where neither has the profile, :func:`seed_spread` returns None and
parity says so in the result instead of silently using a default.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

TABLE = Path(__file__).with_name("seed_spread.json")
SCRIPT = "scripts/seed_spread.py"


@dataclass(frozen=True)
class SpreadEntry:
    """One measured spread: the sample std of serial's quality over ``seeds``, and its mean."""

    std: float
    source: str
    mean: float | None = None

    def relative(self) -> float:
        """std / |mean|: the spread of a lower-is-better metric, whose tolerance is relative."""
        return self.std / abs(self.mean) if self.mean else self.std


@cache
def table(path: Path = TABLE) -> dict[str, dict[str, dict[str, dict[str, Any]]]]:
    """workload -> profile -> epochs (str) -> entry (``std``, ``mean``, ``values``, ``seeds``,
    ``epochs``, ``command``, ``date``)."""
    return entries(path)


def entries(path: Path) -> dict[str, Any]:
    """The ``entries`` of a shipped table written by a measuring script ({} if absent):
    this one and :mod:`parabench.workloads.quality_targets`' read theirs through it."""
    if not path.exists():
        return {}
    return json.loads(path.read_text())["entries"]


def seed_spread(workload: str, profile: str, epochs: int | None = None) -> SpreadEntry | None:
    """The measured spread for ``workload`` at ``profile`` after ``epochs`` (None: the most
    epochs measured), the nearest epochs measured when those were not; None when nobody
    measured the profile."""
    by_epochs = table().get(workload, {}).get(profile, {})
    if by_epochs:
        measured = sorted(int(e) for e in by_epochs)
        want = measured[-1] if epochs is None else epochs
        near = min(measured, key=lambda e: (abs(e - want), -e))
        entry = by_epochs[str(near)]
        source = f"{TABLE.name}: {entry['command']} ({entry['date']}), {near} epoch(s)"
        if near != want:
            source += f"; none measured at {want}, the nearest"
        return SpreadEntry(float(entry["std"]), source,
                           float(entry["mean"]) if "mean" in entry else None)
    from parabench.registry import workloads  # late: the registry imports every workload

    declared = workloads.get(workload).seed_spread if workload in workloads else {}
    if profile in declared:
        return SpreadEntry(float(declared[profile]), f"{workload}.seed_spread (declared)")
    return None


def missing_reason(workload: str, profile: str) -> str:
    """What parity says when :func:`seed_spread` has nothing."""
    return f"no measured seed spread for {workload} at {profile}: run {SCRIPT}"
