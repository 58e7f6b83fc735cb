"""The converged check paired by seed: where the calibrated entry holds serial's quality at the
case's own data seed and the spread of two sound trainings of the same data (its ``paired``
block, ``parabench calibrate --paired``), a statistical run is judged against serial's value
at its seed within 3 x that spread, not against the median over seeds within 3 x the seeds'
spread. Both directions, the shipped cnn quick entry's figures, and where pairing does not
apply (a seed the entry did not measure, a block at another budget)."""

from __future__ import annotations

import dataclasses
import json
import statistics

import pytest

from parabench.analysis.parity import assess
from parabench.analysis.parity_text import blind_text, parity_text
from parabench.analysis.ratios import POWER_Z, SPREAD_FACTOR
from parabench.analysis.target_parity import converged_bounds
from parabench.case.result import QualityValue, Result
from parabench.workloads.quality_targets import TABLE, converged_reference, entry_converged

pytestmark = pytest.mark.cpu

SHIPPED = json.loads(TABLE.read_text())["entries"]["cnn"]["quick"]
PAIR = SHIPPED["paired"]


def run(method: str, seed: int, converged: float | None = None, workers: int = 2) -> Result:
    target = SHIPPED["target"]
    ttt = {"target": target, "reached": True, "samples_to_target": 9000, "epochs_run": 5,
           "max_epochs": 10, "best_quality": 0.95, "reason": "",
           "converged_epochs": None if converged is None else SHIPPED["epochs"],
           "converged_quality": converged}
    return Result(workload="cnn", method=method, device="cpu", workers=workers,
                  threads_per_worker=1, batch_size=64, epochs=10, profile="quick", seed=seed,
                  repeat=0, status="ok", epoch_s=[1.0], samples_per_epoch=3000,
                  samples_per_s=1000.0, time_to_target=ttt,
                  quality=QualityValue(name="accuracy", value=0.95, higher_is_better=True))


def serial_at(seed: int) -> float:
    return SHIPPED["values"][SHIPPED["seeds"].index(seed)]


def test_the_shipped_cnn_quick_entry_pairs_at_its_budget() -> None:
    assert PAIR["epoch"] == SHIPPED["epochs"] == 5 and PAIR["pairs"] == len(SHIPPED["seeds"])
    assert PAIR["train_seed_offset"] == 1000 and len(PAIR["values"]) == PAIR["pairs"]
    ref = converged_reference("cnn", "quick", seed=3)
    assert ref is not None and ref.paired and ref.median == serial_at(3)
    assert ref.std == PAIR["sd"] and ref.seeds == PAIR["pairs"]
    # the data draw's share is out: the pairs differ far less than the seeds do
    assert PAIR["sd"] < statistics.stdev(SHIPPED["values"]) / 3


def test_a_run_at_serial_s_value_for_its_seed_passes_stating_the_paired_power() -> None:
    parity = assess(run("fedavg", 3, converged=serial_at(3)), [run("serial", 3, workers=1)])
    assert parity is not None and parity.status == "ok" and parity.basis == "target"
    tol = max(SPREAD_FACTOR * PAIR["sd"], 0.01)
    assert parity.tolerance == pytest.approx(tol)
    assert parity.detectable_loss == pytest.approx(tol + POWER_Z * PAIR["sd"])
    assert parity.detectable_loss < 0.02  # #41's bar, met for cnn at quick
    blind = blind_text(parity.detectable_loss)
    assert parity_text(parity) == f"ok, blind <{blind} (paired by seed)"
    assert "serial's at seed 3 (paired" in (parity.power_source or "")


def test_a_run_losing_0_02_at_its_seed_fails_where_the_median_check_passes_it() -> None:
    lossy = serial_at(3) - 0.02
    parity = assess(run("fedavg", 3, converged=lossy), [run("serial", 3, workers=1)])
    assert parity is not None and parity.status == "failed"
    assert parity.differs == "converged -0.020" and parity_text(parity).startswith("FAILED")
    assert f"below serial's {serial_at(3):.4g} at seed 3" in (parity.reason or "")
    unpaired = converged_reference("cnn", "quick")  # what the same run met before pairing
    assert unpaired is not None and not unpaired.paired
    gap, tol = lossy - unpaired.median, converged_bounds(unpaired, True)[1]
    assert gap > -tol  # the median check passes this loss: it is inside its blind spot


def test_a_seed_whose_data_is_easy_is_held_to_its_own_level() -> None:
    """Seed 0's data trains to serial's best quality: a run at the seeds' median there lost
    what seed 0's data gives, which the median check cannot see and the paired one flags."""
    high = max(SHIPPED["seeds"], key=serial_at)
    median = statistics.median(SHIPPED["values"])
    assert serial_at(high) - median > 3 * PAIR["sd"] + 0.005
    parity = assess(run("fedavg", high, converged=median), [run("serial", high, workers=1)])
    assert parity is not None and parity.status == "failed"


def test_a_seed_the_entry_did_not_measure_is_judged_unpaired_and_says_its_power() -> None:
    parity = assess(run("fedavg", 42, converged=serial_at(3) - 0.02),
                    [run("serial", 42, workers=1)])
    unpaired = converged_reference("cnn", "quick", seed=42)
    assert unpaired is not None and not unpaired.paired
    assert parity is not None and parity.status == "ok"
    assert parity.detectable_loss == pytest.approx(converged_bounds(unpaired, True)[2])
    assert parity_text(parity) == f"ok, blind <{blind_text(parity.detectable_loss)}"


def _entry(**paired: object) -> dict:
    block = {"sd": 0.5, "pairs": 3, "epoch": 4, "how": "test"} | paired
    return {"values": [10.0, 12.0, 14.0], "seeds": [0, 1, 2], "epochs": 4,
            "command": "parabench calibrate", "date": "2026-12-01", "paired": block}


def test_pairing_needs_the_seed_and_a_block_at_the_entry_s_budget() -> None:
    assert entry_converged(_entry(), "T", seed=1).paired
    assert not entry_converged(_entry(), "T", seed=None).paired
    assert not entry_converged(_entry(), "T", seed=7).paired
    assert not entry_converged(_entry(epoch=3), "T", seed=1).paired  # another budget
    assert not entry_converged(_entry(sd=None), "T", seed=1).paired


def test_a_lower_is_better_metric_is_paired_relative_to_serial_s_value() -> None:
    ref = entry_converged(_entry(), "T", seed=1)  # perplexity 12.0, paired sd 0.5
    assert ref is not None and ref.median == 12.0
    spread, tol, loss = converged_bounds(ref, higher_is_better=False)
    assert spread == pytest.approx(0.5 / 12.0)
    assert tol == pytest.approx(SPREAD_FACTOR * 0.5)  # relative, times serial's value
    assert loss == pytest.approx(tol + POWER_Z * 0.5)  # one gap's sd: no sqrt(1 + 1/N)


def test_the_table_row_says_paired_and_its_legend_says_what_that_means() -> None:
    from parabench.analysis.summary import summarize
    from parabench.sweep.table import legend

    def judged(seed: int, converged: float) -> list:
        serial, fedavg = run("serial", seed, workers=1), run("fedavg", seed, converged=converged)
        return summarize([serial, dataclasses.replace(fedavg, parity=assess(fedavg, [serial]))])

    rows = judged(3, serial_at(3))
    fedavg = next(r for r in rows if r.method == "fedavg")
    assert fedavg.parity.startswith("ok, blind <") and fedavg.parity.endswith("(paired by seed)")
    assert any(line.startswith("(paired by seed): judged against serial's quality at the "
                               "run's own seed") for line in legend(rows))
    assert not any("paired" in line for line in legend(judged(42, 0.93)))
