"""``scripts/regret_harness.py``: the answer from seed 0 judged against every seed's measured
time to target; the regret, and whether the answer lies within the best's interval, both ways.

Run: ``pytest tests/analysis/test_regret_harness.py`` (``-m long`` adds a real two-seed
scenario run).
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

from script_module import load_script
from test_to_target import STATISTICAL, TRAJECTORY, result

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.cpu


def _harness():  # noqa: ANN202
    return load_script("regret_harness")


def _write(path: Path, results: list) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(r.to_json() + "\n" for r in results))
    path.with_suffix(".done").write_text(json.dumps(
        {"load_before": "0.10 0.10 0.10", "load_after": "0.90 0.50 0.20",
         "date": "2026-11-26T00:00:00+00:00"}))
    return path


def _seed(seed: int, fedavg_samples: int, fedavg_rate: float) -> list:
    return [dataclasses.replace(r, seed=seed) for r in (
        result("serial", 1, 2000.0, 1408),
        result("ddp", 2, 1900.0, 1408, parity=TRAJECTORY),
        result("fedavg", 2, fedavg_rate, fedavg_samples, parity=STATISTICAL))]


def test_an_answer_that_matches_the_truth_has_no_regret(tmp_path: Path) -> None:
    h = _harness()
    files = [_write(tmp_path / f"seed{s}.jsonl", _seed(s, 2880 + 64 * s, 2320.0))
             for s in range(3)]
    row = h.judge("cnn-2", files)
    assert row["answer"] == row["best"] == "serial 1x2"
    assert row["regret"] == 0 and row["within_ci"]


def test_an_answer_the_other_seeds_contradict_has_its_regret_measured(tmp_path: Path) -> None:
    """Seed 0's fedavg needed few samples, so the answer picks it; in the other seeds it needed
    far more: the truth is serial, and the answer's regret is fedavg's median over serial's."""
    h = _harness()
    files = [_write(tmp_path / "seed0.jsonl", _seed(0, 1000, 4000.0)),
             *(_write(tmp_path / f"seed{s}.jsonl", _seed(s, 6000, 4000.0)) for s in (1, 2))]
    row = h.judge("cnn-2", files)
    assert row["answer"] == "fedavg 2x1" and row["best"] == "serial 1x2"
    assert row["regret"] == pytest.approx((6000 / 4000) / (1408 / 2000) - 1)
    assert not row["within_ci"]
    text = h.table([row], "python scripts/regret_harness.py")
    assert "| cnn-2 | 3 | fedavg 2x1 |" in text and "within the best's 95 % CI in 0/1" in text


def test_a_parallel_best_is_named_and_the_profile_is_the_scenarios_own(tmp_path: Path) -> None:
    """Where ddp reaches the target soonest in every seed, the answer and the best are ddp and
    the table names the scenario among those a parallel configuration wins; a scenario's own
    --profile replaces tiny."""
    h = _harness()
    fast_ddp = [[dataclasses.replace(result("ddp", 2, 5000.0, 1408, parity=TRAJECTORY), seed=s)
                 if r.method == "ddp" else r for r in _seed(s, 6000, 2320.0)] for s in range(3)]
    files = [_write(tmp_path / f"seed{s}.jsonl", rs) for s, rs in enumerate(fast_ddp)]
    row = h.judge("nbow-quick-2", files)
    assert row["best"] == row["answer"] == "ddp 2x1" and row["within_ci"]
    serial = h.judge("cnn-2", [_write(tmp_path / "s" / f"seed{s}.jsonl", _seed(s, 6000, 2320.0))
                               for s in range(3)])
    text = h.table([serial, row], "python scripts/regret_harness.py")
    assert "The best is serial in 1 of 2; a parallel configuration in nbow-quick-2." in text
    assert [h.is_parallel(x) for x in ("ddp 2x1", "rf_threads 1x1", "serial 1x2")] == [
        True, False, False]  # one worker of a parallel method is not a parallel configuration
    quick = h.scenario_args("nbow-quick-2")
    assert quick.count("--profile") == 1 and quick[quick.index("--profile") + 1] == "quick"
    assert h.scenario_args("cnn-2")[-3:] == ["--profile", "tiny", "--target-quality"]


def test_bad_arguments_exit_2() -> None:
    for args in (["--scenario", "nope"], ["--seeds", "1"]):
        done = subprocess.run([sys.executable, str(ROOT / "scripts" / "regret_harness.py"),
                               *args], capture_output=True, text=True)
        assert done.returncode == 2 and "error" in done.stderr


@pytest.mark.long
def test_a_real_scenario_over_two_seeds_writes_its_row(tmp_path: Path) -> None:
    """Minutes: mlp at one worker (serial, ddp, fedavg), seeds 0 and 1, to the target."""
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "regret_harness.py"),
                           "--scenario", "mlp-1", "--seeds", "2", "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stdout + done.stderr
    [row] = json.loads((tmp_path / "regret_records.json").read_text())
    assert row["seeds"] == 2 and row["answer"] != "none" and row["regret"] >= 0
    assert "| mlp-1 | 2 |" in (tmp_path / "regret_table.md").read_text()
