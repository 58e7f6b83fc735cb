"""The statistical verdict against the sweep's own serial at the same seed (the same data),
paired: where the calibrated entry holds the spread of two trainings of the same data at the
run's epochs (an estimator: any, every epoch is the same fit), the gap is judged within 3 x
that spread, when that sees a smaller loss than the seed-to-seed spread. Both directions, an
estimator in time-to-target mode, and where pairing does not apply."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from parabench.analysis.parity import assess
from parabench.analysis.parity_text import blind_text, parity_text
from parabench.analysis.ratios import POWER_Z
from parabench.case.result import QualityValue, Result
from parabench.workloads.targetstore import ENV, current_version, write_entry

pytestmark = pytest.mark.cpu

SERIAL_Q = 0.83


def _store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sd: float | None = 0.003) -> None:
    tmp_path.mkdir(exist_ok=True)
    store = tmp_path / "T.json"
    entry = {"target": 0.82, "percentile": 10, "values": [0.83, 0.82, 0.84],
             "curves": [[0.83], [0.82], [0.84]], "seeds": [0, 1, 2], "epochs": 1,
             "command": "parabench calibrate --workload random_forest --paired",
             "date": "2026-12-01", "higher_is_better": True,
             "workload_version": current_version("random_forest"), "data": None,
             "device": "cpu", "paired": {"sd": sd, "pairs": 3, "epoch": 1, "how": "test",
                                         "train_seed_offset": 1000, "values": [0.83] * 3}}
    write_entry(store, "random_forest", "quick", entry)
    monkeypatch.setenv(ENV, str(store))


def run(method: str, q: float, seed: int = 0, ttt: dict[str, Any] | None = None,
        workload: str = "random_forest", epochs: int = 1) -> Result:
    return Result(workload=workload, method=method, device="cpu", workers=2 if method != "serial"
                  else 1, threads_per_worker=1, batch_size="-", epochs=epochs, profile="quick",
                  seed=seed, repeat=0, status="ok", epoch_s=[1.0], samples_per_epoch=16000,
                  samples_per_s=1000.0, time_to_target=ttt,
                  quality=QualityValue(name="accuracy", value=q, higher_is_better=True))


def test_a_forest_within_the_paired_spread_passes_stating_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _store(tmp_path, monkeypatch)
    parity = assess(run("xgboost", SERIAL_Q - 0.005), [run("serial", SERIAL_Q)])
    assert parity is not None and parity.status == "ok" and parity.basis == "quality"
    assert parity.tolerance == pytest.approx(0.01)  # 3 x 0.003 is under the 0.01 floor
    assert parity.detectable_loss == pytest.approx(0.01 + POWER_Z * 0.003)
    assert parity_text(parity) == (f"ok, blind <{blind_text(parity.detectable_loss)} "
                                   "(paired by seed)")
    assert "two trainings of the same data" in (parity.spread_source or "")
    assert parity.reason is None  # not the seed spread's "none measured"


def test_a_forest_losing_0_02_fails_paired_and_passed_unpaired(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lossy, serial = run("xgboost", SERIAL_Q - 0.02), run("serial", SERIAL_Q)
    _store(tmp_path / "a", monkeypatch, sd=None)  # an entry without the paired spread
    unpaired = assess(lossy, [serial])  # the seed spread's wider tolerance
    assert unpaired is not None and unpaired.status == "ok" and unpaired.power_note is None
    _store(tmp_path, monkeypatch)
    parity = assess(lossy, [serial])
    assert parity is not None and parity.status == "failed"
    assert parity_text(parity) == "FAILED -0.020"
    assert "0.02 below serial's 0.83 at the same seed" in (parity.reason or "")


def test_a_paired_spread_wider_than_the_seed_spread_is_not_used(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _store(tmp_path, monkeypatch, sd=0.05)
    parity = assess(run("xgboost", SERIAL_Q - 0.02), [run("serial", SERIAL_Q)])
    assert parity is not None and parity.power_note is None and parity.status == "ok"


def test_an_estimator_in_time_to_target_mode_is_judged_paired_not_by_reaching(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One fit is its converged quality: reaching serial's target says less than the paired
    gap, so the paired verdict decides (both reached here; the lossy one is caught)."""
    _store(tmp_path, monkeypatch)

    def ttt(q: float) -> dict[str, Any]:
        return {"target": 0.81, "reached": True, "samples_to_target": 16000, "epochs_run": 1,
                "max_epochs": 8, "best_quality": q, "reason": ""}

    serial = run("serial", SERIAL_Q, ttt=ttt(SERIAL_Q))
    lossy = assess(run("xgboost", SERIAL_Q - 0.015, ttt=ttt(SERIAL_Q - 0.015)), [serial])
    assert lossy is not None and lossy.status == "failed" and lossy.basis == "quality"
    sound = assess(run("xgboost", SERIAL_Q, ttt=ttt(SERIAL_Q)), [serial])
    assert sound is not None and sound.status == "ok" and sound.power_note == "paired by seed"


def test_a_network_is_paired_only_at_the_epochs_the_spread_was_measured() -> None:
    """cnn quick's shipped pairing is at epoch 5: a fixed 5-epoch fedavg run is judged
    paired against the sweep's serial, a 3-epoch one is not."""
    def pair(epochs: int, loss: float) -> Any:
        return assess(run("fedavg", 0.93 - loss, workload="cnn", epochs=epochs),
                      [run("serial", 0.93, workload="cnn", epochs=epochs)])

    five, three = pair(5, 0.015), pair(3, 0.015)
    assert five is not None and five.status == "failed" and five.power_note == "paired by seed"
    assert three is not None and three.status == "ok" and three.power_note is None
    sound = pair(5, 0.0)
    assert sound is not None and sound.status == "ok" and sound.detectable_loss < 0.02


def test_a_network_stopped_at_a_target_is_not_judged_on_its_gap_there() -> None:
    """In time-to-target mode a network's quality at the stop is just past the target, not
    at the epochs the spread was measured: where neither the converged nor the reaching
    verdict applies (serial did not reach it), the unpaired gap decides, as before."""
    ttt = {"target": 0.99, "reached": False, "samples_to_target": None, "epochs_run": 5,
           "max_epochs": 5, "best_quality": 0.915, "reason": "not reached"}
    parity = assess(run("fedavg", 0.915, workload="cnn", epochs=5, ttt=ttt),
                    [run("serial", 0.93, workload="cnn", epochs=5, ttt=ttt)])
    assert parity is not None and parity.power_note is None and parity.basis == "quality"
