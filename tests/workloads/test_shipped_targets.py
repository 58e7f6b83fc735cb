"""The shipped quality table (``quality_targets.json``) names the code it ships with: every
entry that records a workload version (those ``parabench calibrate`` measured) hashes to it
from today's code with the libraries it recorded. An edit of a workload's model or data code
without re-shipping its entries fails here, naming the commands that re-make them; a newer
scikit-learn or torchvision from PyPI does not (the table is read regardless of version)."""

from __future__ import annotations

import json
from typing import Any

import pytest

import parabench.workloads  # noqa: F401  (registers the workloads)
from parabench.registry import workloads
from parabench.workloads.quality_targets import TABLE
from parabench.workloads.version import workload_version

pytestmark = pytest.mark.cpu


def _versioned() -> list[tuple[str, str, dict[str, Any]]]:
    entries = json.loads(TABLE.read_text())["entries"]
    return [(w, p, e) for w, profiles in sorted(entries.items())
            for p, e in sorted(profiles.items()) if e.get("workload_version")]


def test_the_calibrated_entries_are_versioned() -> None:
    found = {(w, p) for w, p, _ in _versioned()}
    assert {(w, "quick") for w in ("cnn", "mlp", "nbow", "gpt", "seq2seq",
                                   "random_forest")} <= found


@pytest.mark.parametrize("workload,profile,entry", _versioned(),
                         ids=[f"{w}-{p}" for w, p, _ in _versioned()])
def test_a_shipped_entry_is_for_the_code_it_ships_with(workload: str, profile: str,
                                                        entry: dict[str, Any]) -> None:
    assert "libraries" in entry, (f"{workload} {profile}: the entry records no libraries, so "
                                  "a changed library cannot be told from changed code; "
                                  "re-ship it from a calibration made by this code")
    now = workload_version(workloads.get(workload), libs=entry["libraries"])
    assert now == entry["workload_version"], (
        f"{workload} {profile}: shipped for code version {entry['workload_version']}, but "
        f"the code now hashes to {now} (with the libraries the entry recorded): the model "
        f"or data code changed since it was calibrated. Re-make it: {entry.get('command')}, "
        f"then {entry.get('shipped_by') or 'python scripts/quality_targets.py ...'}")
