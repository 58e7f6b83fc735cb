"""The statistical verdict against real degraded training (``tests/plugins/label_flip.py``):
a method with no labels flipped passes and states its power; one trained on mostly wrong
labels fails, in ``parabench run`` itself.

Run: ``pytest tests/analysis/test_label_flip.py`` (about a minute: two real CLI runs of mlp tiny).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from parabench.analysis.parity_text import blind_text

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.cpu, pytest.mark.slow]


def run(tmp_path: Path, fraction: float) -> tuple[dict, dict, str]:
    out = tmp_path / f"flip-{fraction}.jsonl"
    env = {**os.environ, "PARABENCH_PLUGINS": "label_flip", "PARABENCH_FLIP_FRACTION":
           str(fraction), "PARABENCH_WINDOWS": "2", "PARABENCH_WINDOW_S": "0.05",
           "PYTHONPATH": os.pathsep.join([str(ROOT / "tests" / "plugins"), str(ROOT / "src")])}
    done = subprocess.run([sys.executable, "-m", "parabench", "run", "--workload", "mlp",
                           "--method", "serial,serial_flip", "--profile", "tiny", "--epochs",
                           "3", "--threads", "1", "--out", str(out)], env=env,
                          capture_output=True, text=True, timeout=600)
    rows = {r["method"]: r for r in map(json.loads, out.read_text().splitlines())}
    assert set(rows) == {"serial", "serial_flip"}, done.stdout + done.stderr
    return rows["serial"], rows["serial_flip"], done.stdout


def test_no_flipped_labels_pass_and_mostly_wrong_labels_fail_in_the_cli(tmp_path: Path) -> None:
    serial, clean, table = run(tmp_path, 0.0)
    assert clean["status"] == "ok" and clean["extra"]["flipped_labels"] == 0
    parity = clean["parity"]
    assert parity["kind"] == "statistical" and parity["status"] == "ok"
    assert clean["quality"]["value"] == serial["quality"]["value"]  # the same training
    blind = parity["detectable_loss"]
    assert blind > parity["tolerance"] and f"ok, blind <{blind_text(blind)}" in table

    serial, wrong, table = run(tmp_path, 0.9)
    samples = wrong["samples_per_epoch"]  # one epoch is every training sample once
    assert wrong["extra"]["flipped_labels"] == round(0.9 * samples)
    gap = wrong["quality"]["value"] - serial["quality"]["value"]
    assert wrong["parity"]["status"] == "failed" and gap < -wrong["parity"]["tolerance"]
    assert f"FAILED {gap:+.3f}" in table


def test_a_forest_is_judged_paired_by_seed_in_the_cli_both_ways(tmp_path: Path) -> None:
    """random_forest at quick, whose shipped entry holds the paired spread: another sound
    forest of the same data passes, stating the paired power; one fitted on 35 % wrong labels
    (about 0.05 lost) fails, in ``parabench run`` itself."""
    def forest(fraction: float) -> tuple[dict, dict, str]:
        out = tmp_path / f"forest-{fraction}.jsonl"
        env = {**os.environ, "PARABENCH_PLUGINS": "label_flip",
               "PARABENCH_FLIP_FRACTION": str(fraction), "PARABENCH_WINDOWS": "2",
               "PARABENCH_WINDOW_S": "0.05", "PYTHONPATH": os.pathsep.join(
                   [str(ROOT / "tests" / "plugins"), str(ROOT / "src")])}
        done = subprocess.run([sys.executable, "-m", "parabench", "run", "--workload",
                               "random_forest", "--method", "serial,forest_flip", "--profile",
                               "quick", "--target-quality", "--seed", "1", "--out", str(out)],
                              env=env, capture_output=True, text=True, timeout=600)
        rows = {r["method"]: r for r in map(json.loads, out.read_text().splitlines())}
        assert set(rows) == {"serial", "forest_flip"}, done.stdout + done.stderr
        return rows["serial"], rows["forest_flip"], done.stdout

    serial, sound, table = forest(0.0)
    assert sound["extra"]["flipped_labels"] == 0
    assert sound["quality"]["value"] != serial["quality"]["value"]  # another forest
    parity = sound["parity"]
    assert parity["status"] == "ok" and parity["power_note"] == "paired by seed"
    assert parity["detectable_loss"] < 0.02
    assert f"ok, blind <{blind_text(parity['detectable_loss'])} (paired by seed)" in table
    serial, lossy, table = forest(0.35)
    gap = lossy["quality"]["value"] - serial["quality"]["value"]
    assert lossy["parity"]["status"] == "failed" and gap < -0.03
    assert f"FAILED {gap:+.3f}" in table
