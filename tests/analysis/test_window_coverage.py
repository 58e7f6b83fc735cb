"""``scripts/window_coverage.py``: the window rule replayed on recorded series, its CI checked
against the series' later windows and against a re-run, in both directions.

Run: ``pytest tests/analysis/test_window_coverage.py``.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from parabench.core.records import Window
from script_module import load_script
from sweepdata import case

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.cpu


def _harness():  # noqa: ANN202
    return load_script("window_coverage")


def _series(path: Path, rates_by_repeat: list[list[float]]) -> Path:
    """One configuration's repeats, each a warm-up window then windows at these rates."""
    lines = []
    for repeat, rates in enumerate(rates_by_repeat):
        r = dataclasses.replace(case("cnn", "ddp", 2, repeat=repeat),
                                window=Window(unit="steps", steps=4, warmup=1),
                                window_s=[0.3] + [0.25] * len(rates),
                                window_samples=[75] + [round(0.25 * x) for x in rates])
        lines.append(r.to_json())
    path.write_text("\n".join(lines) + "\n")
    return path


def test_steady_windows_are_covered_and_a_shift_is_not(tmp_path: Path) -> None:
    wc = _harness()
    wobble = [1000.0 + 8 * ((i * 7) % 5 - 2) for i in range(40)]  # +-1.6 %, stationary
    steady = wc.load([_series(tmp_path / "a.jsonl", [wobble, wobble])], 24)
    assert len(steady) == 2 and all(len(s.seconds) == 40 for s in steady)
    row = wc.replay(steady, merge=1, wanted=5)
    assert row["trials"] == 2 and row["within"] == 1.0 and row["rerun"] == 1.0
    assert row["mean_windows"] == 5  # narrow at once: the CI stops them at wanted
    assert row["x95"] <= 1.0  # no interval had to be wider
    # the speed drops 20 % after the windows the rule uses: no CI of theirs holds it
    shifted = [x if i < 16 else 0.8 * x for i, x in enumerate(wobble)]
    moved = wc.load([_series(tmp_path / "b.jsonl", [shifted, [0.7 * x for x in wobble]])], 24)
    row = wc.replay(moved, merge=1, wanted=5)
    assert row["within"] == 0.5 and row["rerun"] == 0.0  # the 0.7x repeat shifts from its start
    assert row["x95"] > 2  # the shifted one's interval would have to be far wider
    merged = wc.replay(steady, merge=2, wanted=4)  # two windows make one: 20 of them
    assert merged["mean_seconds"] == pytest.approx(5 * 0.5)  # 4 steady and the warm-up one


def test_too_short_series_are_refused_with_what_to_record(tmp_path: Path,
                                                          capsys: pytest.CaptureFixture) -> None:
    wc = _harness()
    path = _series(tmp_path / "short.jsonl", [[1000.0] * 8])
    assert wc.main([str(path)]) == 2
    assert "--windows 40" in capsys.readouterr().err
