"""The measured default time-to-quality target of each workload and profile.

Usage::

    from parabench.workloads.targets import quality_target
    entry = quality_target("cnn", "tiny")   # TargetEntry, or None where nobody measured it
    entry.value, entry.source   # the target; "quality_targets.json: <command> (<date>), ..."

``parabench run --target-quality`` (no value) trains each case until serial's reliable
quality for its workload and profile: the 10th percentile over seeds (the 90th for a
lower-is-better metric) of serial's held-out quality after the last epoch of a stated epoch
budget (:mod:`parabench.case.target` reads it). The figures are measured, never guessed: they
live in ``quality_targets.json`` beside this module (shipped as package data), written by
``scripts/quality_targets.py``, which records for every entry the per-seed figures and
curves, the seeds, the epochs, the percentile and how it was computed, and the command and
date that produced it (the figures themselves: ``docs/measurements.md``).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from parabench.workloads.spread import entries

TABLE = Path(__file__).with_name("quality_targets.json")
SCRIPT = "scripts/quality_targets.py"


@dataclass(frozen=True)
class TargetEntry:
    """One measured target: ``value``, and where it came from (``source``)."""

    value: float
    source: str
    epochs: int
    seeds: int


@cache
def table(path: Path = TABLE) -> dict[str, dict[str, dict[str, Any]]]:
    """workload -> profile -> entry (``target``, ``values``, ``curves``, ``seeds``,
    ``epochs``, ``percentile``, ``command``, ``date``, ...)."""
    return entries(path)


def quality_target(workload: str, profile: str) -> TargetEntry | None:
    """The measured target of ``workload`` at ``profile``; None when nobody measured it."""
    entry = table().get(workload, {}).get(profile)
    if entry is None:
        return None
    seeds, epochs = len(entry["seeds"]), int(entry["epochs"])
    source = (f"{TABLE.name}: p{entry['percentile']} of serial's quality after {epochs} "
              f"epoch(s) over {seeds} seeds; {entry['command']} ({entry['date']})")
    return TargetEntry(float(entry["target"]), source, epochs, seeds)


def missing_reason(workload: str, profile: str) -> str:
    """What a default target says when :func:`quality_target` has nothing."""
    return f"no measured target for {workload} at {profile} (run {SCRIPT})"
