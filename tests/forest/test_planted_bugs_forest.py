"""Planted forest and fedavg bugs are caught by ``parabench run`` itself (issue #15, point 5).

Usage::

    pytest tests/forest/test_planted_bugs_forest.py -q

The broken methods live in ``tests/plugins/forest_bugs.py`` (loaded via ``PARABENCH_PLUGINS``):
a threads forest with another ``random_state``, an MPI forest whose rank 0 gathers only its
own trees, and fedavg keeping client 0's weights. One real CLI run (a subprocess) trains all
three next to serial; each must be recorded with parity ``failed`` and print ``FAILED`` in
its table row. Seed-exact forests fail on the predictions digest; fedavg fails statistical
parity: on 4 non-IID clients client 0's model is ~0.3 accuracy behind serial, against a
margin of 3 x mlp tiny's measured seed spread (~0.05), while correct fedavg at equal work is
within it.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

PLUGIN_DIR = Path(__file__).parents[1] / "plugins"
HAVE_MPI = importlib.util.find_spec("mpi4py") is not None and (
    shutil.which("mpiexec") is not None or shutil.which("mpirun") is not None)

pytestmark = [pytest.mark.cpu]


def _gathered() -> tuple[list[tuple[object, float, None]], int]:
    """Two ranks' slices of a small forest, as rank 0 gathers them, and the forest's size."""
    from sklearn.ensemble import RandomForestClassifier

    from parabench.forest.split import grow_slice, slices

    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(60, 4)).astype(np.float32), rng.integers(0, 2, 60)
    est = RandomForestClassifier(n_estimators=6, random_state=0, n_jobs=1)
    return [(grow_slice(est, x, y, lo, hi), 0.1, None) for lo, hi in slices(6, 2)], 6


def test_rank_zero_gathering_only_its_own_trees_returns_half_a_forest(
    monkeypatch: pytest.MonkeyPatch
) -> None:
    """The gather logic without MPI: the real reply merges every rank's slice, the bug not."""
    monkeypatch.syspath_prepend(str(PLUGIN_DIR))
    from forest_bugs import RankZeroOnly

    from parabench.forest.mpi_rank import Rank

    gathered, trees = _gathered()
    good = Rank.reply(object.__new__(Rank), gathered)
    bad = RankZeroOnly.reply(object.__new__(RankZeroOnly), gathered)
    assert good[0] == bad[0] == "fitted"
    assert len(good[1].estimators_) == trees and len(bad[1].estimators_) == trees // 2


@pytest.mark.torch
@pytest.mark.slow
def test_parabench_run_flags_every_planted_forest_and_fedavg_bug(tmp_path: Path) -> None:
    out = tmp_path / "bugs.jsonl"
    broken = ["threads_seed1", "fedavg_client0", *(["mpi_rank0"] if HAVE_MPI else [])]
    cmd = [sys.executable, "-m", "parabench", "run", "--workload", "random_forest,mlp",
           "--method", ",".join(["serial", *broken]), "--workers", "2", "--threads", "1",
           "--clients", "4", "--split", "noniid", "--profile", "tiny", "--epochs", "1",
           "--out", str(out)]
    env = os.environ | {"PYTHONPATH": str(PLUGIN_DIR), "PARABENCH_PLUGINS": "forest_bugs"}
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = {r["method"]: r for r in map(json.loads, out.read_text().splitlines())
            if r["status"] == "ok"}
    for method in broken:
        parity = rows[method]["parity"]
        assert parity["status"] == "failed", (method, parity)
        (line,) = [ln for ln in proc.stdout.splitlines() if f" {method} " in ln]
        assert "FAILED" in line, line
    assert rows["threads_seed1"]["parity"]["basis"] == "predictions"
    fed = rows["fedavg_client0"]["parity"]
    assert fed["kind"] == "statistical" and fed["spread_source"] != "fallback"
    assert fed["gap"] < -fed["tolerance"]
    if not HAVE_MPI:
        pytest.skip("mpi_rank0's CLI part needs mpi4py and mpiexec/mpirun, not installed here")
