"""The recommendation logic on crafted results: parity gates it, noise is not a difference."""

from __future__ import annotations

import statistics

import pytest

from parabench.analysis.recommend import describe, recommend
from parabench.analysis.stats import amdahl_fit, can_be_significant, ratio_ci
from parabench.case.result import QualityValue, Result

pytestmark = pytest.mark.cpu

SAMPLES = 1000


def result(method: str, workers: int, epoch_s: list[float], *, parity: str | None = "ok",
           gap: float = 0.0, repeat: int = 0, workload: str = "cnn", batch: int = 64,
           rss: float = 500.0, threads: int | None = None) -> Result:
    """On 2 cores: serial with 2 threads, 2 workers x 1 thread (same total cores)."""
    median = statistics.median(epoch_s[1:])
    par = None
    if method == "serial":
        par = {"status": "not-applicable", "kind": "baseline"}
    elif parity is not None:
        par = {"status": parity, "gap": gap, "tolerance": 0.015, "baseline": "serial/cpu"}
    return Result(workload=workload, method=method, device="cpu", workers=workers,
                  threads_per_worker=threads or max(1, 2 // workers), batch_size=batch,
                  epochs=len(epoch_s), profile="tiny", seed=0, repeat=repeat, status="ok",
                  epoch_s=epoch_s, samples_per_epoch=SAMPLES, samples_per_s=SAMPLES / median,
                  quality=QualityValue(name="accuracy", value=0.9, higher_is_better=True),
                  parity=par, peak_rss_mb=rss)


def epochs(seconds: float, n: int = 8, jitter: float = 0.01) -> list[float]:
    """A warm-up epoch, then n steady epochs alternating around ``seconds``."""
    return [seconds * 3] + [seconds * (1 + jitter * (-1) ** i * (i % 3)) for i in range(n)]


def test_the_fastest_method_that_failed_parity_is_listed_never_recommended() -> None:
    results = [result("serial", 1, epochs(10.0)),
               result("fedavg", 2, epochs(2.0), parity="failed", gap=-0.69),
               result("ddp", 2, epochs(5.0), rss=900.0)]
    [rec] = recommend(results)
    assert rec.best is not None and rec.best.method == "ddp"
    assert [c.method for c in rec.failed_faster] == ["fedavg"]
    assert rec.speedup == pytest.approx(2.0, rel=0.02)
    text = "\n".join(describe(rec))
    assert text.splitlines()[0].startswith("cnn on cpu (tiny): use ddp with 2 workers")
    assert "900 MB RAM" in text.splitlines()[0]
    assert "FAILED parity, not recommended: fedavg" in text and "-0.690" in text


def test_two_methods_within_noise_are_not_a_significant_difference() -> None:
    results = [result("serial", 1, epochs(10.0)),
               result("ddp", 2, epochs(5.00, jitter=0.05)),
               result("fsdp", 2, epochs(5.02, jitter=0.05))]
    [rec] = recommend(results)
    assert {rec.best.method, rec.runner_up.method} == {"ddp", "fsdp"}
    assert rec.testable and not rec.significant and rec.runner_up_p > 0.05
    assert "difference not significant" in describe(rec)[1]


def test_a_clear_gap_with_enough_samples_is_significant() -> None:
    results = [result("serial", 1, epochs(10.0)), result("ddp", 2, epochs(5.0)),
               result("fsdp", 2, epochs(7.0))]
    [rec] = recommend(results)
    assert rec.best.method == "ddp" and rec.runner_up.method == "fsdp"
    assert rec.significant and rec.runner_up_p < 0.01
    assert "difference significant" in describe(rec)[1]


def test_two_epochs_per_side_can_never_be_significant_and_the_text_says_so() -> None:
    results = [result("serial", 1, [30.0, 10.0, 10.1]), result("ddp", 2, [9.0, 5.0, 5.1]),
               result("fsdp", 2, [9.0, 7.0, 7.1])]
    [rec] = recommend(results)
    assert not rec.testable and not rec.significant
    assert "can never reach p < 0.05" in describe(rec)[1]
    assert not can_be_significant(2, 2) and can_be_significant(4, 4)


def test_repeats_give_a_ci_of_the_speedup_from_per_repeat_samples() -> None:
    results = []
    for rep, (s, d) in enumerate([(10.0, 5.0), (10.4, 4.9), (9.8, 5.2), (10.1, 5.1)]):
        results += [result("serial", 1, [s * 3, s, s], repeat=rep),
                    result("ddp", 2, [d * 3, d, d], repeat=rep)]
    [rec] = recommend(results)
    assert rec.best.samples.unit == "repeat" and len(rec.best.samples.values) == 4
    lo, hi = rec.speedup_ci
    assert lo <= rec.speedup <= hi and 1.8 < lo and hi < 2.2
    assert "95% CI" in describe(rec)[0] and "4 repeats" in describe(rec)[0]


def test_unchecked_parity_blocks_a_recommendation_and_says_how_to_fix_it() -> None:
    [rec] = recommend([result("ddp", 2, epochs(5.0), parity=None)])
    assert rec.best is None and [c.method for c in rec.unchecked_faster] == ["ddp"]
    assert "add --method serial" in describe(rec)[0]


def test_serial_from_an_earlier_file_is_the_baseline_for_speedup() -> None:
    [rec] = recommend([result("ddp", 2, epochs(5.0))], baselines=[result("serial", 1,
                                                                         epochs(10.0))])
    assert rec.best.method == "ddp" and rec.baseline.method == "serial"
    assert rec.speedup == pytest.approx(2.0, rel=0.02)


def test_serial_fastest_is_recommended_as_itself() -> None:
    [rec] = recommend([result("serial", 1, epochs(4.0)), result("ddp", 2, epochs(5.0))])
    assert rec.best.method == "serial" and "serial is the fastest" in describe(rec)[0]


def test_amdahl_fit_recovers_the_serial_fraction_and_needs_three_counts() -> None:
    t1, f = 12.0, 0.2
    fit = amdahl_fit({n: t1 * (f + (1 - f) / n) for n in (1, 2, 4)})
    assert fit.serial_fraction == pytest.approx(f) and fit.predict_workers == 8
    assert t1 / fit.time(8) == pytest.approx(1 / (f + (1 - f) / 8))
    assert amdahl_fit({1: 10.0, 2: 6.0}) is None


def test_ratio_ci_is_reproducible_and_brackets_the_ratio() -> None:
    a, b = [2.0, 2.1, 1.9, 2.05], [1.0, 1.02, 0.98, 1.01]
    assert ratio_ci(a, b) == ratio_ci(a, b)
    lo, hi = ratio_ci(a, b)
    assert lo < 2.0 < hi


def test_a_recommendation_measured_only_on_a_busy_machine_says_so() -> None:
    import dataclasses

    busy = {"busy": True, "load_before": 6.0, "load_after": 5.0}
    results = [result("serial", 1, epochs(10.0)), result("ddp", 2, epochs(5.0))]
    assert "busy" not in "\n".join(describe(recommend(results)[0]))
    results[1] = dataclasses.replace(results[1], machine=busy)
    [rec] = recommend(results)
    assert rec.best.method == "ddp" and rec.best.busy
    assert "measured only on a busy machine" in describe(rec)[1]


def test_speedup_needs_serial_with_the_same_total_cores() -> None:
    [rec] = recommend([result("serial", 1, epochs(10.0), threads=1),
                       result("ddp", 2, epochs(5.0))])
    assert rec.best.method == "ddp" and rec.speedup is None and rec.baseline is None
    assert "add --method serial --threads 2" in describe(rec)[0]


def test_a_forest_recommendation_gets_its_speedup_over_the_one_thread_serial_fit() -> None:
    """Serial fits a forest with n_jobs=1 whatever it is given, so its 1-thread run is the
    serial 'with the same total cores' for the recommendation as for the table: with crafted
    results where threads 2x1 is fastest, the answer used to say 'speedup unknown' and ask
    for a serial run at 2 threads, which cannot help."""
    results = [result("serial", 1, epochs(10.0), workload="random_forest", threads=1),
               result("rf_threads", 2, epochs(5.5), workload="random_forest", threads=1)]
    [rec] = recommend(results)
    assert rec.best is not None and rec.best.method == "rf_threads"
    assert rec.speedup == pytest.approx(10.0 / 5.5, rel=0.02)
    text = "\n".join(describe(rec))
    assert "speedup unknown" not in text and "1.82x serial's throughput" in text
    # a torch workload keeps the same-total-cores rule: serial at 1 thread is no baseline
    torch = [result("serial", 1, epochs(10.0), threads=1), result("ddp", 2, epochs(5.5))]
    [rec] = recommend(torch)
    assert rec.speedup is None
    assert "add --method serial --threads 2" in "\n".join(describe(rec))
