"""``parabench calibrate``'s parts without training: the plateau budget, the store and its
lookup order, and resuming from the finished seeds (a fake serial run per seed)."""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

import pytest

from parabench.sweep.calibrate import measure, partial_key, plateau_budget, summarize
from parabench.workloads import quality_targets
from parabench.workloads.quality_targets import missing_reason, quality_target
from parabench.workloads.targetstore import (
    ENV,
    current_libraries,
    current_version,
    data_fingerprint,
    lookup,
    read_store,
    user_store,
    write_entry,
)

pytestmark = pytest.mark.cpu


# --- the epoch budget ------------------------------------------------------------------------

def test_a_curve_still_rising_gets_the_maximum() -> None:
    curves = [[0.5, 0.6, 0.7, 0.8, 0.9], [0.52, 0.61, 0.71, 0.79, 0.91], [0.5, 0.6, 0.7, 0.8, 0.9]]
    budget, rule = plateau_budget(curves, higher_is_better=True)
    assert budget == 5 and "still rising" in rule


def test_a_curve_flat_from_epoch_3_gets_3() -> None:
    curves = [[0.5, 0.8, 0.90, 0.91, 0.90, 0.91], [0.6, 0.82, 0.92, 0.90, 0.92, 0.92],
              [0.55, 0.81, 0.91, 0.92, 0.91, 0.90]]
    budget, rule = plateau_budget(curves, higher_is_better=True)
    assert budget == 3 and "within one seed std" in rule and "still rising" not in rule


def test_a_slow_seed_still_rising_holds_the_budget_until_the_target_s_tail_levels_off(
        ) -> None:
    """Nine seeds level off at epoch 3, a tenth climbs until epoch 6: the median is flat from
    3, but the 10th percentile (where the target is taken) rises past the seed noise until
    the slow seed arrives, so the budget waits for it (and the spread at the budget is the
    plateau's, not the climb's)."""
    fast = [[0.50, 0.80, 0.90 + 0.002 * i, 0.90 + 0.002 * i, 0.90 + 0.002 * i,
             0.90 + 0.002 * i, 0.90 + 0.002 * i] for i in range(9)]
    slow = [0.40, 0.60, 0.70, 0.75, 0.80, 0.897, 0.898]
    budget, rule = plateau_budget([*fast, slow], higher_is_better=True)
    assert budget == 6 and "median and 10th percentile" in rule
    # the same slow seed mirrored for a lower-is-better metric: the 90th percentile holds it
    mirror = [[1 - q for q in c] for c in [*fast, slow]]
    assert plateau_budget(mirror, higher_is_better=False) == (6, rule.replace("10th", "90th"))
    # and without it, the nine level off at 3
    assert plateau_budget(fast, higher_is_better=True)[0] == 3


def test_a_lower_is_better_curve_is_mirrored() -> None:
    falling = [[1.0, 0.5, 0.20, 0.20, 0.21], [1.1, 0.6, 0.21, 0.20, 0.20],
               [0.9, 0.5, 0.20, 0.21, 0.21]]
    assert plateau_budget(falling, higher_is_better=False)[0] == 3
    # read as higher-is-better the same curves "plateau" at once: the mirror matters
    assert plateau_budget(falling, higher_is_better=True)[0] == 1
    still_falling = [[1.0, 0.8, 0.6, 0.4], [1.0, 0.79, 0.61, 0.41]]
    assert plateau_budget(still_falling, higher_is_better=False)[0] == 4


def test_one_seed_has_no_noise_to_judge_by_and_says_so() -> None:
    budget, rule = plateau_budget([[0.5, 0.9, 0.9, 0.9]])
    assert budget == 4 and rule.startswith("1 seed")


def test_the_entry_takes_the_target_and_samples_at_the_budget() -> None:
    runs = [{"final": 0.9, "curve": [0.5, 0.9, 0.9], "samples_per_epoch": 100,
             "evals": [[50, 0.3], [100, 0.5], [150, 0.88], [200, 0.9], [300, 0.9]]},
            {"final": 0.91, "curve": [0.6, 0.91, 0.91], "samples_per_epoch": 100,
             "evals": [[100, 0.6], [200, 0.91], [300, 0.91]]}]
    entry = summarize(runs, [0, 1], 3, higher=True, plateau=True)
    assert entry["epochs"] == 2 and entry["values"] == [0.9, 0.91]
    assert entry["curves"] == [[0.5, 0.9], [0.6, 0.91]] and entry["max_epochs"] == 3
    assert entry["target"] == pytest.approx(0.901)  # p10 of the qualities at epoch 2
    assert entry["samples_to_target"] == [None, 200]  # seed 0 stayed at 0.9 < 0.901


# --- the store -------------------------------------------------------------------------------

def _entry(target: float, **keys: Any) -> dict[str, Any]:
    return {"target": target, "percentile": 10, "values": [target, target + 0.01],
            "curves": [[target], [target + 0.01]], "seeds": [0, 1], "epochs": 1,
            "command": "parabench calibrate --workload mlp", "date": "2026-11-29",
            "higher_is_better": True, "workload_version": current_version("mlp"),
            "data": None, "device": "cpu", **keys}


def test_an_entry_for_this_code_data_and_device_is_found(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    store = tmp_path / "T.json"
    monkeypatch.setenv(ENV, str(store))
    write_entry(store, "mlp", "tiny", _entry(0.5))
    found = lookup("mlp", "tiny", device="cpu")
    assert found.entry is not None and found.entry["target"] == 0.5
    assert found.source == str(store)
    assert lookup("mlp", "tiny", device="cuda").entry is None  # another device
    entry = quality_target("mlp", "tiny")
    assert entry is not None and entry.value == 0.5 and entry.source.startswith(str(store))


def test_a_stale_entry_is_not_used_and_said_so(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    store = tmp_path / "T.json"
    monkeypatch.setenv(ENV, str(store))
    write_entry(store, "mlp", "tiny", _entry(0.5, workload_version="0123456789ab"))
    found = lookup("mlp", "tiny")
    assert found.entry is None and found.stale is not None and "stale" in found.stale
    shipped = quality_targets.table()["mlp"]["tiny"]
    entry = quality_target("mlp", "tiny")  # the shipped table, not the stale entry
    assert entry is not None and entry.value == shipped["target"]
    assert entry.source.startswith("quality_targets.json")
    monkeypatch.setattr(quality_targets, "table", lambda: {})
    assert "0123456789ab" in missing_reason("mlp", "tiny")


def test_an_entry_is_for_its_data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    mine, other = tmp_path / "mine", tmp_path / "other"
    for folder, text in ((mine, "a"), (other, "b")):
        folder.mkdir()
        (folder / "x.txt").write_text(text)
    assert data_fingerprint(mine) != data_fingerprint(other) and data_fingerprint(None) is None
    store = tmp_path / "T.json"
    monkeypatch.setenv(ENV, str(store))
    write_entry(store, "mlp", "tiny", _entry(0.7, data=data_fingerprint(mine)))
    assert quality_target("mlp", "tiny", data_dir=str(mine)).value == 0.7
    assert quality_target("mlp", "tiny", data_dir=str(other)) is None  # nor the shipped one
    assert quality_target("mlp", "tiny").value != 0.7  # synthetic data: the shipped table
    (mine / "x.txt").write_text("edited")  # the same folder, other contents: another data set
    assert quality_target("mlp", "tiny", data_dir=str(mine)) is None


def test_writing_replaces_the_matching_entry_atomically(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    store = tmp_path / "T.json"
    write_entry(store, "mlp", "tiny", _entry(0.5))
    write_entry(store, "mlp", "tiny", _entry(0.6))  # the same code, data, device: replaced
    write_entry(store, "mlp", "tiny", _entry(0.4, device="cuda"))  # another device: kept
    assert [e["target"] for e in read_store(store)["mlp"]["tiny"]] == [0.6, 0.4]
    before = store.read_text()

    def broken(*args: Any, **kwargs: Any) -> str:
        raise OSError("disk full")

    monkeypatch.setattr(json, "dumps", broken)
    with pytest.raises(OSError):
        write_entry(store, "mlp", "tiny", _entry(0.9))
    assert store.read_text() == before  # the old file whole, no temporary left
    assert sorted(p.name for p in tmp_path.iterdir()) == ["T.json"]


def test_the_lookup_order_is_targets_then_user_store_then_shipped(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PARABENCH_CACHE_DIR", str(tmp_path / "cache"))
    named = tmp_path / "T.json"
    user = user_store()
    assert user is not None
    shipped = quality_targets.table()["mlp"]["tiny"]["target"]
    assert quality_target("mlp", "tiny").value == shipped
    write_entry(user, "mlp", "tiny", _entry(0.6))
    assert quality_target("mlp", "tiny").value == 0.6
    monkeypatch.setenv(ENV, str(named))
    assert quality_target("mlp", "tiny").value == 0.6  # the named store has none: on to the next
    write_entry(named, "mlp", "tiny", _entry(0.5))
    entry = quality_target("mlp", "tiny")
    assert entry is not None and entry.value == 0.5 and str(named) in entry.source


# --- resuming --------------------------------------------------------------------------------

def test_an_interrupted_calibration_keeps_its_seeds_and_resumes(tmp_path: Path) -> None:
    partial = tmp_path / "T.json.partial.json"
    ran: list[int] = []
    interrupted: list[int] = []

    def fake(workload: str, profile: str, seed: int, epochs: int, *rest: Any) -> dict:
        if seed == 1 and not interrupted:
            ran.append(seed)
            interrupted.append(seed)
            raise KeyboardInterrupt  # Ctrl-C during seed 1, the first time
        ran.append(seed)
        q = 0.8 + 0.01 * seed
        return {"final": q, "curve": [q - 0.2, q, q], "evals": [[100, q]],
                "samples_per_epoch": 100}

    lines: list[str] = []
    with pytest.raises(KeyboardInterrupt):
        measure("mlp", "tiny", [0, 1, 2], 3, partial=partial, say=lines.append, run_seed=fake)
    assert ran == [0, 1] and "1 of 3 run(s) finished, kept in" in lines[-1]
    key = partial_key("mlp", "tiny", None, "cpu", 3)
    assert list(read_store(partial)[key]) == ["0"]
    ran.clear()
    entry = measure("mlp", "tiny", [0, 1, 2], 3, partial=partial, say=lines.append,
                    run_seed=fake)
    assert ran == [1, 2]  # seed 0 came from the partial file
    assert entry["seeds"] == [0, 1, 2] and len(entry["values"]) == 3
    assert any("ETA" in line for line in lines)
    # the code it was made by, and the libraries apart (a later library is not new code)
    assert entry["workload_version"] == current_version("mlp")
    assert entry["libraries"] == current_libraries("mlp") and "sklearn" in entry["libraries"]


def test_a_train_seed_offset_trains_seed_s_data_with_training_seed_s_plus_k(
        tmp_path: Path) -> None:
    from parabench.sweep.calibrate import _grid

    partial = tmp_path / "T.json.partial.json"
    ran: list[tuple[int, int | None]] = []

    def fake(workload: str, profile: str, seed: int, epochs: int, timeout_s: float,
             data_dir: str | None, device: str, train_seed: int | None) -> dict:
        ran.append((seed, train_seed))
        q = 0.8 + 0.01 * seed
        return {"final": q, "curve": [q, q], "evals": [[100, q]], "samples_per_epoch": 100}

    paired = measure("mlp", "tiny", [0, 1], 2, partial=partial, say=lambda _: None,
                     run_seed=fake, train_offset=1000)
    plain = measure("mlp", "tiny", [0, 1], 2, partial=partial, say=lambda _: None,
                    run_seed=fake)  # another key: the offset's seeds are not resumed
    assert ran == [(0, 1000), (1, 1001), (0, None), (1, None)]
    assert paired["train_seed_offset"] == 1000 and "train_seed_offset" not in plain
    assert partial_key("mlp", "tiny", None, "cpu", 2, 1000) != partial_key(
        "mlp", "tiny", None, "cpu", 2)
    config = _grid("mlp", "tiny", 3, 2, 60.0, None, "cpu", 1003).config(
        workload="mlp", method="serial", device="cpu", workers=1)
    assert (config.seed, config.train_seed, config.training_seed) == (3, 1003, 1003)


def test_paired_runs_every_seed_at_two_training_seeds_and_keeps_their_spread(
        tmp_path: Path) -> None:
    """``--paired``: seed s at training seeds s and s + 1000, both resumable; the block holds
    the second runs' qualities at the budget and the sd of the differences, worked by hand."""
    from parabench.sweep.calibrate import PAIR_OFFSET, planned_cases

    partial = tmp_path / "T.json.partial.json"
    ran: list[tuple[int, int | None]] = []
    interrupted: list[int] = []
    levels, gaps = [0.80, 0.90, 0.85], [0.01, -0.02, 0.0]

    def fake(workload: str, profile: str, seed: int, epochs: int, timeout_s: float,
             data_dir: str | None, device: str, train_seed: int | None) -> dict:
        if train_seed == 1 + PAIR_OFFSET and not interrupted:
            interrupted.append(seed)
            raise KeyboardInterrupt  # Ctrl-C in seed 1's second run, the first time
        ran.append((seed, train_seed))
        q = levels[seed] - (gaps[seed] if train_seed else 0.0)
        return {"final": q, "curve": [q - 0.1, q], "evals": [[100, q]], "samples_per_epoch": 100}

    lines: list[str] = []
    with pytest.raises(KeyboardInterrupt):
        measure("mlp", "tiny", [0, 1, 2], 2, partial=partial, say=lines.append, run_seed=fake,
                paired=True)
    assert "3 of 6 run(s) finished" in lines[-1]
    ran.clear()
    entry = measure("mlp", "tiny", [0, 1, 2], 2, partial=partial, say=lines.append,
                    run_seed=fake, paired=True)
    assert ran == [(1, 1001), (2, None), (2, 1002)]  # the finished three were kept
    assert "seed 2 train seed 1002 (6/6)" in lines[-1]
    assert entry["values"] == pytest.approx(levels)  # offset 0 is the entry itself
    block = entry["paired"]
    assert block["train_seed_offset"] == PAIR_OFFSET and block["pairs"] == 3
    assert block["epoch"] == entry["epochs"]
    assert block["values"] == pytest.approx([q - g for q, g in zip(levels, gaps, strict=True)])
    assert block["sd"] == pytest.approx(statistics.stdev(gaps))
    assert "paired" not in measure("mlp", "tiny", [0, 1, 2], 2, partial=partial,
                                   say=lines.append, run_seed=fake)
    cases = planned_cases("mlp", "tiny", [0, 1], 2, paired=True)  # the dry run: twice
    assert [(c.config.seed, c.config.train_seed) for c in cases] == [
        (0, None), (0, 1000), (1, None), (1, 1001)]


# --- shipping a calibrated entry (scripts/quality_targets.py --from-store) ---------------------

def test_the_script_ships_the_current_calibrated_entry_and_nothing_else(tmp_path: Path) -> None:
    from script_module import load_script

    script = load_script("quality_targets")
    store, table = tmp_path / "T.json", tmp_path / "table.json"
    write_entry(store, "mlp", "quick", _entry(0.7, command="parabench calibrate A", min=0.7,
                                               median=0.705, max=0.71))
    write_entry(store, "mlp", "quick", _entry(0.1, workload_version="0123456789ab"))  # stale
    write_entry(store, "mlp", "quick", _entry(0.2, device="cuda"))  # another device
    write_entry(store, "mlp", "quick", _entry(0.3, data="1 file(s), sha256 ab"))  # user data
    args = ["--profile", "quick", "--workload", "mlp", "--from-store", str(store),
            "--table", str(table)]
    assert script.main(args) == 0
    shipped = json.loads(table.read_text())["entries"]["mlp"]["quick"]
    assert shipped["target"] == 0.7 and shipped["command"] == "parabench calibrate A"
    assert shipped["shipped_by"].startswith("python scripts/quality_targets.py --profile quick")
    with pytest.raises(SystemExit, match="parabench calibrate --workload cnn --profile quick"):
        script.main(["--profile", "quick", "--workload", "cnn", "--from-store", str(store),
                     "--table", str(table)])
    assert list(json.loads(table.read_text())["entries"]) == ["mlp"]  # nothing else written


def test_the_script_previews_partial_files_as_the_finished_calibration_would(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from script_module import load_script

    script = load_script("quality_targets")

    def fake(workload: str, profile: str, seed: int, epochs: int, *rest: Any) -> dict:
        q = 0.8 + 0.01 * seed
        return {"final": q, "curve": [q - 0.3, q - 0.01, q, q], "evals": [[100, q]],
                "samples_per_epoch": 100}

    # two processes, each with its own partial file, as a calibration split in halves runs
    halves = [tmp_path / "a.partial.json", tmp_path / "b.partial.json"]
    for seeds, partial in zip([[0, 1], [2, 3, 4]], halves, strict=True):
        measure("mlp", "tiny", seeds, 4, partial=partial, say=lambda _: None, run_seed=fake)
    whole = measure("mlp", "tiny", [0, 1, 2, 3, 4], 4, say=lambda _: None, run_seed=fake)
    args = ["--profile", "tiny", "--workload", "mlp", "--preview", *map(str, halves)]
    assert script.main(args) == 0
    out = capsys.readouterr().out
    assert f"budget {whole['epochs']} of 4" in out and f"target {whole['target']:.4g}" in out
    assert "5 seed(s) (0, 1, 2, 3, 4)" in out and "power with 5 seeds" in out
    finals = [0.8 + 0.01 * s for s in range(5)]
    assert f"    4  {statistics.median(finals):.4f}  {statistics.stdev(finals):.4f}" in out
    # a half from another maximum is refused; a file without the workload's seeds says so
    measure("mlp", "tiny", [5], 3, partial=halves[1], say=lambda _: None, run_seed=fake)
    with pytest.raises(SystemExit, match="different maximum epochs"):
        script.main(args)
    with pytest.raises(SystemExit, match="no finished seed of cnn at tiny"):
        script.main(["--profile", "tiny", "--workload", "cnn", "--preview", str(halves[0])])
