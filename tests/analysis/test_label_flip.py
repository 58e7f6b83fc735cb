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
