"""Where a case's wall time went (``Result.wall_parts``, :mod:`parabench.analysis.wall`).

The parts are checked against figures timed by other code (the lifecycle's clock: start-up,
epochs, windows; the runner's: the whole wall), and planted waits
(``tests/plugins/wall_plants.py``: a slow data build, close, evaluation) must land in their own
part, through the real CLI, whose summary line must add up to the rows' wall times.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest

from parabench.analysis.wall import PARTS, summed, wall_lines, wall_table
from parabench.case.execute import wall_split
from parabench.method import EpochStats
from sweepdata import case

pytestmark = [pytest.mark.cpu]
PLUGINS = Path(__file__).parents[1] / "plugins"
PLANT_S, EVAL_PLANT_S = 0.8, 0.8  # wall_plants' (not imported here: it registers methods)


def _stats(seconds: float) -> EpochStats:
    return EpochStats(seconds=seconds, loss=0.0, samples=64)


def test_training_and_windows_split_into_what_the_clock_timed_and_the_rest() -> None:
    lifecycle = SimpleNamespace(history=[_stats(1.0), _stats(0.5)],
                                windows=[_stats(0.25), _stats(0.25)], windows_from_training=0)
    tracker = SimpleNamespace(eval_s=[0.2, 0.3])
    parts = wall_split({"start": 2.0, "train": 2.25, "windows": 0.6, "evaluate": 0.01},
                       lifecycle, tracker, launch_s=0.4)
    assert parts == {"launch": 0.4, "start": 2.0, "evaluate": 0.51, "train": 1.5,
                     "windows": 0.5, "bookkeeping": 0.35}
    # the first window a part trained for quality (fedavg's round): in train, not windows
    lifecycle.windows_from_training = 1
    parts = wall_split({"start": 2.0, "train": 2.25, "windows": 0.35, "evaluate": 0.01},
                       lifecycle, tracker, launch_s=0.4)
    assert parts["train"] == 1.5 and parts["windows"] == 0.25
    assert parts["bookkeeping"] == pytest.approx(0.35)
    # no tracker, no launch: nothing invented
    assert "launch" not in wall_split({"train": 1.5}, lifecycle, None, None)
    assert wall_split({"train": 1.5}, lifecycle, None, None)["evaluate"] == 0.0


def test_the_sweep_sum_keeps_the_parts_order_and_names_results_without_a_split() -> None:
    a = replace(case("mlp", "serial", 1), wall_s=10.0,
                wall_parts={"exit": 1.0, "start": 3.0, "train": 6.0})
    b = replace(case("mlp", "ddp", 2), wall_s=5.0, wall_parts={"start": 4.0, "launch": 1.0})
    old = replace(case("mlp", "ddp", 1), wall_s=7.0)  # written before the split was recorded
    parts, n = summed([a, b, old])
    assert n == 2 and list(parts) == ["launch", "start", "train", "exit"]
    assert parts == {"launch": 1.0, "start": 7.0, "train": 6.0, "exit": 1.0}
    assert list(parts) == [p for p in PARTS if p in parts]
    table = wall_table([a, b])
    assert [(name, seconds) for name, _, seconds, _ in table] == list(parts.items())
    assert sum(share for *_, share in table) == pytest.approx(1.0)
    (line,) = wall_lines([a, b, old])
    assert line.startswith("where the 2 case(s)' 15.0 s went: start 7.0 s (47%), train 6.0 s")
    assert line.endswith("; 1 case(s) without a split")
    assert wall_lines([old]) == []


def _plants(tmp_path: Path) -> tuple[subprocess.CompletedProcess, dict[str, dict]]:
    out = tmp_path / "results.jsonl"
    path = os.pathsep.join(p for p in (str(PLUGINS), os.environ.get("PYTHONPATH")) if p)
    env = os.environ | {"PYTHONPATH": path, "PARABENCH_PLUGINS": "wall_plants"}
    cmd = [sys.executable, "-m", "parabench", "run", "--workload", "mlp_slowdata", "--method",
           "serial,serial_slowclose,serial_slowcheck,serial_sloweval", "--threads", "1",
           "--profile", "tiny",
           "--epochs", "1", "--windows", "2", "--out", str(out)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600,
                          cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    return proc, {r["method"]: r for r in map(json.loads, out.read_text().splitlines())}


@pytest.mark.slow
@pytest.mark.torch
def test_planted_waits_land_in_their_own_part_and_the_parts_add_up(tmp_path: Path) -> None:
    proc, rows = _plants(tmp_path)
    for method, r in rows.items():
        parts = r["wall_parts"]
        assert sum(parts.values()) == pytest.approx(r["wall_s"], abs=0.01), method
        assert all(v >= -0.01 for v in parts.values()), (method, parts)
        assert 0 < parts["launch"] < r["wall_s"], (method, parts)
        # against the lifecycle's clock: the session's start, the epochs, the windows
        started = parts["start"] + parts.get("data", 0) + parts.get("model", 0)
        assert started == pytest.approx(r["startup_s"], abs=0.05), (method, parts)
        assert parts["train"] == pytest.approx(sum(r["epoch_s"]), abs=0.01), method
        assert parts["windows"] == pytest.approx(sum(r["window_s"]), abs=0.01), method
    serial, close, evals = rows["serial"], rows["serial_slowclose"], rows["serial_sloweval"]
    check = rows["serial_slowcheck"]  # before the session starts: in no other part
    assert check["wall_parts"]["check"] >= PLANT_S > serial["wall_parts"]["check"] + PLANT_S / 2
    assert check["wall_parts"]["exit"] < serial["wall_parts"]["exit"] + PLANT_S / 2
    # the data is built once, by the first case (the others read the sweep's cache)
    assert serial["wall_parts"]["data"] >= PLANT_S
    assert close["wall_parts"]["data"] < PLANT_S / 2 and evals["wall_parts"]["data"] < PLANT_S / 2
    assert close["wall_parts"]["close"] >= PLANT_S > serial["wall_parts"]["close"] + PLANT_S / 2
    # not where the close's wait went
    assert close["wall_parts"]["exit"] < serial["wall_parts"]["exit"] + PLANT_S / 2
    # the evaluation's sleep (one evaluation: --epochs 1, no target) is in ``evaluate`` and in
    # no other part; not read against serial's own evaluation, whose seconds vary by tens of ms
    assert evals["wall_parts"]["evaluate"] >= EVAL_PLANT_S > serial["wall_parts"]["evaluate"]
    for part in ("bookkeeping", "exit", "close"):
        assert evals["wall_parts"][part] < serial["wall_parts"][part] + EVAL_PLANT_S / 2, part
    # the CLI's line sums the rows' wall times
    line = " ".join(proc.stdout.split())
    total = float(re.search(r"where the 4 case\(s\)' ([0-9.]+) s went", line).group(1))
    assert total == pytest.approx(sum(r["wall_s"] for r in rows.values()), abs=0.15)
