"""``scripts/paired_spread.py --stores``: the paired spread of two calibrations of the same
seeds (#41 item 3's measurement) is the sd of the per-seed differences, at one epoch and over
the last evaluated epochs; checked against figures worked out by hand."""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest

from parabench.workloads.targetstore import write_entry
from script_module import load_script

pytestmark = pytest.mark.cpu


def _entry(curves: list[list[float | None]], offset: int = 0) -> dict:
    entry = {"target": 0.5, "percentile": 10, "values": [c[-1] for c in curves],
             "curves": curves, "curves_run": curves, "seeds": list(range(len(curves))),
             "epochs": 3, "higher_is_better": True, "workload_version": "x", "data": None,
             "device": "cpu", "command": "parabench calibrate", "date": "2026-11-30"}
    return entry | ({"train_seed_offset": offset} if offset else {})


def test_the_paired_spread_is_the_sd_of_each_seed_s_difference(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    script = load_script("paired_spread")
    levels = [0.80, 0.90, 0.85, 0.95]  # the seeds differ by level; each pair by little
    gaps = [0.010, -0.010, 0.0, 0.020]
    a = [[q - 0.1, None, q] for q in levels]  # epoch 2 not evaluated
    b = [[q - 0.1 + g, q + 3 * g, q - g] for q, g in zip(levels, gaps, strict=True)]
    write_entry(tmp_path / "A.json", "cnn", "quick", _entry(a))
    write_entry(tmp_path / "B.json", "cnn", "quick", _entry(b, offset=1000))
    script.from_stores([str(tmp_path / "A.json"), str(tmp_path / "B.json")], "cnn", "quick",
                       None, 2)
    out = capsys.readouterr().out
    assert "4 seeds, epoch 3; training seeds +0 (A) and +1000 (B)" in out
    at_epoch = statistics.stdev(gaps)  # A - B at epoch 3 = +g
    assert f"seed-to-seed sd {statistics.stdev(levels):.4f}" in out
    assert f"paired-difference sd {at_epoch:.4f}" in out
    assert f"blind below {4.645 * at_epoch:.3f}" in out
    # the last 2 evaluated epochs: A's 1 and 3 (2 was not evaluated), B's 2 and 3
    last2 = [(q - 0.1 + q) / 2 - (q + 3 * g + q - g) / 2
             for q, g in zip(levels, gaps, strict=True)]  # -0.05 - g: sd = the gaps' sd
    assert "mean of the last 2 epochs: seed-to-seed sd" in out
    assert statistics.stdev(last2) == pytest.approx(at_epoch)
    assert out.count(f"paired-difference sd {at_epoch:.4f}") == 2


def test_into_writes_the_pairing_as_the_table_entry_s_paired_block(tmp_path: Path) -> None:
    """``--into``: B's qualities at the epoch and the sd of A - B go into the table's entry,
    where the converged check then finds them (paired at one of its seeds)."""
    import json

    from parabench.workloads.quality_targets import entry_converged

    script = load_script("paired_spread")
    levels, gaps = [0.80, 0.90, 0.85, 0.95], [0.010, -0.010, 0.0, 0.020]
    write_entry(tmp_path / "A.json", "cnn", "quick", _entry([[q - 0.1, q, q] for q in levels]))
    write_entry(tmp_path / "B.json", "cnn", "quick", _entry(
        [[q, q - g, q] for q, g in zip(levels, gaps, strict=True)], offset=1000))
    shipped = _entry([[q + 0.001] * 2 for q in levels]) | {"epochs": 2}  # another machine's
    table = tmp_path / "table.json"
    table.write_text(json.dumps({"about": "x", "entries": {"cnn": {"quick": shipped}}}))
    stores = [str(tmp_path / "A.json"), str(tmp_path / "B.json")]
    block = script.write_into(table, stores, "cnn", "quick", 2)
    entry = json.loads(table.read_text())["entries"]["cnn"]["quick"]
    assert entry["paired"] == block and block["train_seed_offset"] == 1000
    assert block["values"] == pytest.approx([q - g for q, g in zip(levels, gaps, strict=True)])
    assert block["sd"] == pytest.approx(statistics.stdev(gaps)) and block["pairs"] == 4
    assert "A.json" in block["how"] and "B.json" in block["how"]
    ref = entry_converged(entry, "table.json", seed=3)
    assert ref is not None and ref.paired and ref.median == pytest.approx(0.951)
    assert ref.std == pytest.approx(statistics.stdev(gaps))
    with pytest.raises(SystemExit, match="budget is 2 epoch"):  # the entry's budget only
        script.write_into(table, stores, "cnn", "quick", 3)
