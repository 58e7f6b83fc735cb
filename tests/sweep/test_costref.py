"""The dry run's reference table: a first run estimated from another run's recorded costs,
scaled to this machine by the cases it has recorded, this machine's own rows first, and the
shipped table covering the default grid.

Run: ``pytest tests/sweep/test_costref.py`` (crafted rows; one CLI dry run; nothing trains).
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from parabench.case.result import append_result
from parabench.case.windows import rule_id, window_target_s
from parabench.config import RunConfig
from parabench.sweep.costmodel import CostModel, Plan
from parabench.sweep.costref import Reference, reference_rows
from parabench.sweep.dryrun import describe_plan
from parabench.sweep.plan import Case
from sweepdata import case

pytestmark = pytest.mark.cpu
M = "Test CPU | 2 cores | no gpu"
REF = "Reference CPU | 2 cores | no gpu"
ROOT = Path(__file__).parents[2]


@pytest.fixture(autouse=True)
def _default_window_length(monkeypatch: pytest.MonkeyPatch) -> None:
    """Rows of today's default window rule, of cases started plainly."""
    monkeypatch.delenv("PARABENCH_WINDOW_S", raising=False)
    monkeypatch.setenv("PARABENCH_PRESTART", "0")


def row(method: str = "serial", workers: int = 1, threads: int = 2, *, speed: float = 1.0,
        machine: str = REF, workload: str = "cnn", t: str = "2026-01-01T00:00:00"
        ) -> dict[str, Any]:
    """A history row: start-up 4 s, 2 epochs of 1 s, one 0.5 s evaluation, 5 s of windows,
    each ``speed`` times as long."""
    parts = {"start": 4.0 * speed, "train": 2.0 * speed, "evaluate": 0.5 * speed,
             "windows": 5.0 * speed}
    return {"t": t, "machine": machine, "cores": 2, "workload": workload,
            "method": method, "device": "cpu", "workers": workers, "threads": threads,
            "profile": "tiny", "batch": None, "epochs": 3, "seed": 0, "target": None,
            "math": [], "wall_s": sum(parts.values()), "parts": parts, "trained": 2.0,
            "evals": 1, "per_epoch": None, "mid_from": 0, "reach": None, "held": None,
            "status": "ok", "window_rule": rule_id(window_target_s(), None)}


def plan(method: str = "serial", workers: int = 1, threads: int = 2) -> Plan:
    return Plan(workload="cnn", method=method, workers=workers, threads=threads,
                profile="tiny", epochs=2, cores=2, declared=(70.0, 30.0))


def _cases() -> list[Case]:
    cfg = RunConfig(workload="cnn", method="serial", profile="tiny", epochs=2,
                    threads_per_worker=2)
    return [Case(config=cfg)]


def test_a_first_run_is_estimated_from_the_table_and_says_so() -> None:
    """No row of this machine: the table's own times, unscaled, named on the line and in
    the total; not the declared guesses (70 s start-up here)."""
    text = describe_plan(_cases(), previous=[], history=[], machine=M, reference=[row()])
    line, total = text.splitlines()[1], text.splitlines()[-1]
    assert line.endswith("~0m11s* (model: 0 case(s) of this machine; reference table: "
                         "start-up, epochs, evaluations, windows)")  # 4 + 2 + 0.5 + 5
    assert "1 partly from the reference table (marked *: Reference CPU | 2 cores | no gpu, " \
           "2026-01-01; not scaled" in total
    assert "guessed" not in text


@pytest.mark.parametrize("speed", [0.5, 2.0])
def test_the_table_is_scaled_by_the_cases_this_machine_recorded(speed: float) -> None:
    """This machine ran ddp at ``speed`` times the table's ddp: serial, which only the table
    holds, is estimated at ``speed`` times the table's serial, part by part, both ways."""
    table = [row(), row("ddp", 2, 1)]
    own = [row("ddp", 2, 1, speed=speed, machine=M)]
    model = CostModel.fit(own, M, reference=table)
    assert model.reference is not None and model.reference.matched == 1
    assert model.reference.factors == pytest.approx(
        {"fixed": speed, "train": speed, "evaluate": speed, "windows": speed})
    est = model.estimate(plan())
    assert est.referenced == ["fixed", "train", "evaluate", "windows"]
    assert est.parts == pytest.approx({"fixed": 4.0 * speed, "train": 2.0 * speed,
                                       "evaluate": 0.5 * speed, "windows": 5.0 * speed})
    unscaled = CostModel.fit([], M, reference=table).estimate(plan())
    assert est.seconds == pytest.approx(unscaled.seconds * speed)


def test_the_factor_is_this_machine_s_speed_now_not_a_busy_hour_s() -> None:
    """Older rows recorded 3x slower (a busy machine, older code) and the newest
    FACTOR_ROWS at the table's speed: the factor is 1."""
    old = [row("ddp", 2, 1, speed=3.0, machine=M, t=f"2026-01-01T00:{i:02d}:00")
           for i in range(40)]
    new = [row("ddp", 2, 1, machine=M, t=f"2026-01-02T00:{i:02d}:00") for i in range(20)]
    ref = Reference.fit([row("ddp", 2, 1)], new + old)
    assert ref is not None and ref.matched == 60
    assert ref.factors == pytest.approx({"fixed": 1, "train": 1, "evaluate": 1, "windows": 1})


def test_this_machine_s_own_rows_come_before_the_table() -> None:
    """A case this machine recorded is estimated from its rows alone."""
    model = CostModel.fit([row(speed=3.0, machine=M)], M, reference=[row()])
    est = model.estimate(plan())
    assert est.referenced == [] and est.levels["fixed"] == "case"
    assert est.seconds == pytest.approx(3.0 * 11.5)


def test_a_missing_or_torn_table_reads_as_none(tmp_path: Path) -> None:
    assert reference_rows(tmp_path / "absent.jsonl") == []
    torn = tmp_path / "t.jsonl"
    torn.write_text('{"machine": "x", "workl\nnot json\n')
    assert reference_rows(torn) == []
    assert Reference.fit([], []) is None


def test_the_script_writes_a_table_the_model_reads(tmp_path: Path) -> None:
    """Each ok result with a wall-time split becomes a row the model reads with the
    result's wall time; a failed one, or one without the split, none; a missing results file
    is a usage error."""
    results, out = tmp_path / "r.jsonl", tmp_path / "ref.jsonl"
    parts = {"launch": 0.3, "start": 2.0, "train": 2.0, "evaluate": 0.2, "windows": 1.5}
    ok = dataclasses.replace(case("mlp", "serial", 1, epochs=2), wall_s=6.0, wall_parts=parts)
    for r in (ok, dataclasses.replace(ok, method="ddp", workers=2, wall_s=7.0),
              dataclasses.replace(ok, status="failed"), dataclasses.replace(ok, wall_parts={})):
        append_result(results, r)
    script = ROOT / "scripts" / "reference_costs.py"
    done = subprocess.run([sys.executable, str(script), str(results), "--out", str(out)],
                          capture_output=True, text=True, check=True)
    assert "2 row(s) of 1 machine(s)" in done.stdout
    rows = reference_rows(out)
    assert [(r["method"], r["wall_s"]) for r in rows] == [("serial", 6.0), ("ddp", 7.0)]
    bad = subprocess.run([sys.executable, str(script), str(tmp_path / "none.jsonl")],
                         capture_output=True, text=True)
    assert bad.returncode == 2 and "no such results file" in bad.stderr


def test_the_shipped_table_covers_the_default_grid_on_a_cpu(tmp_path: Path) -> None:
    """``parabench run --dry-run`` on a machine with no history: every case it would run is
    estimated from the shipped table, none from a declared guess (a method added to the
    default grid fails here until scripts/reference_costs.py is run again)."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PARABENCH_WINDOW_S", "PARABENCH_PRESTART")}
    env.update(PARABENCH_CACHE_DIR=str(tmp_path / "cache"), CUDA_VISIBLE_DEVICES="")
    done = subprocess.run([sys.executable, "-m", "parabench", "run", "--dry-run", "--out",
                           str(tmp_path / "r.jsonl")], capture_output=True, text=True,
                          env=env, check=True)
    runs = [ln for ln in done.stdout.splitlines() if ln.startswith("  run ")]
    assert len(runs) >= 40
    assert [ln for ln in runs if "?" in ln] == []
    assert all("*" in ln for ln in runs)
    assert "not scaled: this machine has recorded none of its cases" in done.stdout
