"""The comparison arithmetic and its one sign convention (parabench.analysis.ratios).

Crafted inputs: a change of a formula or of the gap's sign fails here, before any report
shows a figure with the wrong meaning.
"""

from __future__ import annotations

import math

import pytest

from parabench.analysis import ratios as compare
from parabench.case.result import Result
from parabench.sweep.table import format_table, summarize

pytestmark = pytest.mark.cpu


def test_speedup_is_baseline_time_over_method_time() -> None:
    assert compare.speedup(baseline_s=2.0, method_s=0.5) == 4.0
    assert compare.slowdown(baseline_s=2.0, method_s=0.5) == 0.25
    assert compare.throughput_speedup(method_rate=300.0, baseline_rate=100.0) == 3.0
    assert compare.efficiency(speedup=4.0, workers=8) == 0.5


@pytest.mark.parametrize(("quality", "baseline", "higher", "gap"), [
    (0.90, 0.92, True, -0.02),    # lower accuracy: worse, negative
    (0.95, 0.92, True, 0.03),     # higher accuracy: better, positive
    (0.30, 0.20, False, -0.10),   # higher loss: worse, negative
    (0.10, 0.20, False, 0.10),    # lower loss: better, positive
])
def test_gap_is_negative_when_the_method_is_worse(quality: float, baseline: float,
                                                  higher: bool, gap: float) -> None:
    assert compare.quality_gap(quality, baseline, higher) == pytest.approx(gap)
    assert compare.quality_shortfall(quality, baseline, higher) == pytest.approx(-gap)


def test_equal_quality_gives_positive_zero_both_ways() -> None:
    for higher in (True, False):
        assert math.copysign(1.0, compare.quality_gap(0.5, 0.5, higher)) == 1.0
        assert math.copysign(1.0, compare.quality_shortfall(0.5, 0.5, higher)) == 1.0


def test_parity_tolerance_and_verdict() -> None:
    assert compare.parity_tolerance("exact", 0.9, True, spread=0.5) == compare.EXACT_TOLERANCE
    assert compare.parity_tolerance("exact", 2.0, False, spread=0.5) == pytest.approx(0.03)
    assert compare.parity_tolerance("statistical", 0.9, True, spread=0.01) == pytest.approx(0.03)
    assert compare.parity_tolerance("statistical", 0.9, True, spread=0.0) == 0.01  # the floor
    assert compare.parity_tolerance("statistical", 4.0, False, spread=0.01) == pytest.approx(0.12)
    assert compare.parity_holds(-0.015, 0.015) and compare.parity_holds(0.2, 0.015)
    assert not compare.parity_holds(-0.016, 0.015)


def test_the_baseline_of_a_method() -> None:
    assert compare.baseline_of("ddp") == "serial" and compare.baseline_of("serial") == "serial"
    assert compare.baseline_of("tf_multiworker") == "tf_serial"
    assert compare.is_baseline("serial") and compare.is_baseline("tf_serial")
    assert not compare.is_baseline("ddp") and not compare.is_baseline("tf_mirrored")
    assert compare.baseline_of("not_registered") == "serial"


# --- the two ratios and the choice of their baseline runs ----------------------------------

def key(method: str, workers: int, threads: int, batch: str = "64", options: str = "-",
        workload: str = "mlp") -> compare.CaseKey:
    return compare.CaseKey(workload, method, "cpu", workers, batch, "tiny", options, threads)


#: serial at 1, 2 and 4 threads (Amdahl-ish), a DDP 2 x 1 and 2 x 2, a serial at another batch
TIMES = {key("serial", 1, 1): 8.0, key("serial", 1, 2): 5.0, key("serial", 1, 4): 3.0,
         key("ddp", 2, 1): 4.0, key("ddp", 2, 2): 2.0, key("serial", 1, 1, batch="32"): 1.0}


def test_speedup_is_against_serial_with_the_same_total_cores() -> None:
    r = compare.ratios(key("ddp", 2, 1), TIMES)
    assert r.speedup.value == 5.0 / 4.0  # serial at 2 x 1 = 2 threads, not at 1 or 4
    assert r.speedup.baseline == "serial/cpu t=2 bs=64" and r.speedup.missing is None
    r = compare.ratios(key("ddp", 2, 2), TIMES)
    assert r.speedup.value == 3.0 / 2.0 and r.speedup.baseline == "serial/cpu t=4 bs=64"


def test_scaling_efficiency_is_against_serial_at_threads_per_worker_over_workers() -> None:
    r = compare.ratios(key("ddp", 2, 1), TIMES)
    assert r.scaling_efficiency.value == (8.0 / 4.0) / 2  # serial t=1 -> 2x, over 2 workers
    assert r.scaling_efficiency.baseline == "serial/cpu t=1 bs=64"
    r = compare.ratios(key("ddp", 2, 2), TIMES)
    assert r.scaling_efficiency.value == (5.0 / 2.0) / 2
    assert compare.scaling_efficiency(baseline_s=8.0, method_s=4.0, workers=2) == 1.0
    assert compare.total_cores(workers=3, threads_per_worker=2) == 6


def test_serial_is_its_own_baseline() -> None:
    r = compare.ratios(key("serial", 1, 2), TIMES)
    assert r.speedup.value == 1.0 and r.scaling_efficiency.value == 1.0


def test_a_missing_baseline_is_named_never_replaced_by_another_batch_or_thread_count() -> None:
    times = {k: v for k, v in TIMES.items() if k != key("serial", 1, 1)}
    r = compare.ratios(key("ddp", 2, 1), times)
    assert r.speedup.value == 5.0 / 4.0
    assert r.scaling_efficiency.value is None  # the batch-32 serial at 1 thread is not used
    assert r.scaling_efficiency.missing == ("no serial at 1 thread and batch 64: add --method "
                                            "serial --threads 1 --batch-size 64")
    assert r.as_dict()["missing"] == [r.scaling_efficiency.missing]
    assert r.scaling_efficiency.cell(".2f") == "- (no t=1)"
    r = compare.ratios(key("ddp", 2, 1, batch="-"), {key("ddp", 2, 1, batch="-"): 1.0})
    assert r.speedup.missing == "no serial at 2 threads: add --method serial --threads 2"


def test_the_baseline_shares_data_options_and_is_the_methods_baseline_method() -> None:
    mine = key("ddp", 2, 1, options="bucket_cap_mb=5 precision=bf16")
    times = {mine: 1.0, key("serial", 1, 2): 4.0,
             key("serial", 1, 2, options="precision=bf16"): 3.0}
    assert compare.ratios(mine, times).speedup.value == 3.0  # same precision; other knobs free
    tf = compare.CaseKey("mlp", "tf_multiworker", "cpu", 2, "64", "tiny", "-", 1)
    times = {tf: 2.0, key("serial", 1, 2): 1.0,
             compare.CaseKey("mlp", "tf_serial", "cpu", 1, "64", "tiny", "-", 2): 6.0}
    assert compare.ratios(tf, times).speedup.value == 3.0


def test_an_estimators_serial_baseline_is_its_one_thread_run() -> None:
    """serial fits scikit-learn with n_jobs=1: at 2 total cores its baseline is the t=1 run
    (the planner runs it once), and a torch workload still needs serial at 2 threads."""
    forest = key("rf_threads", 2, 1, batch="-", workload="random_forest")
    times = {forest: 2.0, key("serial", 1, 1, batch="-", workload="random_forest"): 3.0}
    r = compare.ratios(forest, times)
    assert r.speedup.value == 1.5 and r.speedup.baseline == "serial/cpu t=1 bs=-"
    assert r.scaling_efficiency.value == 0.75
    assert compare.baseline_threads("random_forest", "serial", 2) == 1
    assert compare.baseline_threads("mlp", "serial", 2) == 2
    assert compare.baseline_threads("random_forest", "tf_serial", 2) == 2


def test_the_plan_runs_an_estimators_serial_baseline_once_at_one_thread() -> None:
    from parabench.sweep.plan import Grid, plan

    cases = plan(Grid(workloads=("random_forest",), methods=("serial", "rf_threads"),
                      workers=(2,), threads_per_worker=1, profile="tiny"))
    serial = [c.config for c in cases if c.config.method == "serial"]
    assert [c.threads for c in serial] == [1]


# --- the steady-state time and the slowest-rank fold ---------------------------------------

def _result(epoch_s: list[float]) -> Result:
    return Result(workload="mlp", method="serial", device="cpu", workers=1,
                  threads_per_worker=1, batch_size=64, epochs=len(epoch_s), profile="tiny",
                  seed=0, repeat=0, status="ok", epoch_s=epoch_s)


def test_steady_state_drops_the_warm_up_epoch_and_one_epoch_is_flagged() -> None:
    assert _result([9.0, 2.0, 4.0, 3.0]).median_epoch_s == 3.0  # 9.0 (warm-up) dropped
    assert _result([9.0, 2.0]).median_epoch_s == 2.0
    one = summarize([_result([9.0])])[0]
    assert one.epoch_s == 9.0 and not one.steady  # the warm-up is all there is: say so
    table = format_table([one], wide=True)  # the epoch column is --wide's
    assert "9.000 (0.000) ~" in table and "~ one epoch only" in table
    many = summarize([_result([9.0, 2.0])])[0]
    assert many.steady and "~" not in format_table([many])


def test_a_distributed_epoch_is_the_slowest_ranks() -> None:
    from parabench.method import EpochStats
    from parabench.torch.session import fold_epochs

    fast = EpochStats(seconds=1.0, loss=2.0, samples=30,
                      components={"forward": 0.5, "communication": 0.1})
    slow = EpochStats(seconds=3.0, loss=1.0, samples=10, components={"forward": 0.2})
    folded = fold_epochs([fast, slow])
    assert folded.seconds == 3.0 and folded.samples == 40
    assert folded.loss == pytest.approx((2.0 * 30 + 1.0 * 10) / 40)  # sample-weighted
    assert folded.components == {"forward": 0.2}  # the slowest rank's: they add up to it
    with pytest.raises(ValueError):
        fold_epochs([])
