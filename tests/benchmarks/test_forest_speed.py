"""Random-forest speed: harness overhead of ``rf_threads``, and each forest method's speedup.

    pytest tests/benchmarks/test_forest_speed.py --benchmark-only     # measure (quick profile)
    pytest tests/benchmarks/test_forest_speed.py                      # smoke: each body once

(a) ``rf_threads`` against calling scikit-learn directly with the same ``n_jobs``, in the same
run: every round first fits the forest directly (timed here, in the untimed ``setup`` of
``benchmark.pedantic``), then runs one harness epoch (timed by pytest-benchmark), so both see
the same machine noise. Target: the harness's throughput >= 0.98 x the direct call's, i.e.
harness median epoch <= direct median fit / 0.98. Asserted only when measuring.

(b) every forest method at 2 workers against ``serial`` in the same run: the median of the
session's own fit times (``EpochStats.seconds``, what a result reports) after start-up and one
warm-up epoch. Speedup, efficiency, start-up and quality go in ``benchmark.extra_info``; no
target is asserted (a 2-core machine shared with other jobs says little about scaling).

The profile is ``$PARABENCH_BENCH_PROFILE``, default ``quick`` when measuring and ``tiny`` in
smoke mode.
"""

from __future__ import annotations

import os
import statistics
import time
from typing import Any

import pytest

from parabench.analysis.ratios import BASELINE_METHOD as BASELINE
from parabench.analysis.ratios import efficiency, speedup
from parabench.case.lifecycle import StartedCase
from parabench.registry import methods, workloads
from parabench.sweep.plan import BenchCase

pytestmark = pytest.mark.cpu

WORKLOAD = "random_forest"
WORKERS = 2
TARGET_THROUGHPUT = 0.98
OVERHEAD_ROUNDS = 9
ROUNDS = 5
SLOW_ROUNDS = 2  # spark: a quick-profile fit takes minutes on a busy 2-core machine
BASELINE_STEPS = 3
# Engines that start processes or a JVM are `slow` (seconds of start-up even in smoke mode;
# tests/benchmarks/test_methods.py smoke-runs every method's case once anyway).
SLOW = pytest.mark.slow
#: smoke mode leaves out what this body would only repeat: a Spark case at tiny starts a JVM
#: cluster (~30 s of a 2-core run) to fit once, as these default tests already do
SMOKED_ELSEWHERE = {
    "rf_spark": "smoke: rf_spark's tiny case runs in test_methods.py::test_window["
                "random_forest-rf_spark-cpu-w2] and test_forest_engines.py::"
                "test_spark_forest_reaches_serial_quality_on_loopback; this benchmark "
                "measures it with --benchmark-only",
}
METHODS = [
    pytest.param("rf_threads", ROUNDS),
    pytest.param("rf_processes", ROUNDS, marks=SLOW),
    pytest.param("rf_dask", ROUNDS, marks=[pytest.mark.dask, SLOW]),
    pytest.param("rf_dask+threads", ROUNDS, marks=[pytest.mark.dask, SLOW]),
    pytest.param("rf_mpi", ROUNDS, marks=[pytest.mark.mpi, SLOW]),
    # three quick-profile Spark fits outlast pytest-timeout's 600 s default here
    pytest.param("rf_spark", SLOW_ROUNDS,
                 marks=[pytest.mark.spark, SLOW, pytest.mark.timeout(3600)]),
]


@pytest.fixture
def profile(benchmark: Any) -> str:
    return os.environ.get("PARABENCH_BENCH_PROFILE") or ("tiny" if benchmark.disabled else "quick")


@pytest.fixture(scope="module")
def serial_cache() -> dict[str, tuple[float, float]]:
    """profile -> (serial median fit seconds, serial quality), measured once per module."""
    return {}


def _serial(profile: str, cache: dict[str, tuple[float, float]], steps: int) -> tuple[float, float]:
    if profile not in cache:
        case = BenchCase(workload=WORKLOAD, method=BASELINE, device="cpu", workers=1)
        with StartedCase(case.config(profile)) as started:
            times = [started.step().seconds for _ in range(steps)]
            cache[profile] = (statistics.median(times), started.quality())
    return cache[profile]


def test_threads_fit_overhead_vs_direct_sklearn(benchmark: Any, profile: str) -> None:
    config = BenchCase(workload=WORKLOAD, method="rf_threads", device="cpu",
                       workers=WORKERS).config(profile)
    workload = workloads.get(WORKLOAD)
    session = methods.get("rf_threads").session(workload, config)
    session.start()
    try:
        data = session.data  # type: ignore[attr-defined]
        direct_s: list[float] = []
        reported_s: list[float] = []

        def direct_fit() -> None:
            est = workload.build_estimator(profile, config.seed, n_jobs=WORKERS)
            t0 = time.perf_counter()
            est.fit(data.x_train, data.y_train)
            direct_s.append(time.perf_counter() - t0)

        epochs = iter(range(10_000))

        def harness_epoch() -> None:
            reported_s.append(session.train_epoch(next(epochs)).seconds)

        benchmark.pedantic(harness_epoch, setup=direct_fit, rounds=OVERHEAD_ROUNDS,
                           warmup_rounds=1, iterations=1)
        if benchmark.disabled:
            return  # smoke mode: the body ran once
        harness = benchmark.stats.stats.median  # the whole epoch: fit + the per-epoch loss
        direct = statistics.median(direct_s[1:])  # the warm-up round's setup dropped
        reported = statistics.median(reported_s[1:])
        throughput = direct / harness
        benchmark.extra_info.update(
            direct_median_s=direct, harness_median_s=harness, reported_fit_median_s=reported,
            throughput_ratio=throughput, reported_throughput_ratio=direct / reported,
            n_jobs=WORKERS, profile=profile, rounds=OVERHEAD_ROUNDS,
        )
        print(f"\nthreads harness {harness:.3f}s (reported fit {reported:.3f}s), direct "
              f"sklearn {direct:.3f}s, throughput ratio {throughput:.4f}")
        assert throughput >= TARGET_THROUGHPUT, f"harness at {throughput:.3f}x direct sklearn"
    finally:
        session.close()


@pytest.mark.parametrize(("method", "rounds"), METHODS)
def test_forest_method_speedup_over_serial(
    method: str, rounds: int, benchmark: Any, profile: str,
    serial_cache: dict[str, tuple[float, float]],
) -> None:
    if benchmark.disabled and method in SMOKED_ELSEWHERE:
        pytest.skip(SMOKED_ELSEWHERE[method])
    steps = 1 if benchmark.disabled else BASELINE_STEPS
    serial_s, serial_quality = _serial(profile, serial_cache, steps)
    case = BenchCase(workload=WORKLOAD, method=method, device="cpu", workers=WORKERS)
    fit_s: list[float] = []
    with StartedCase(case.config(profile)) as started:
        benchmark.pedantic(lambda: fit_s.append(started.step().seconds), rounds=rounds,
                           iterations=1)
        quality = started.quality()
        startup = started.startup_s
    if benchmark.disabled:
        return
    fit = statistics.median(fit_s)
    times_faster = speedup(serial_s, fit)
    benchmark.extra_info.update(
        method=method, workers=WORKERS, profile=profile, fit_median_s=fit,
        serial_fit_median_s=serial_s, speedup=times_faster,
        efficiency=efficiency(times_faster, WORKERS),
        startup_s=startup, quality=quality, serial_quality=serial_quality,
        parity=methods.get(method).parity, rounds=rounds,
    )
    print(f"\n{method}: fit {fit:.3f}s vs serial {serial_s:.3f}s -> speedup {times_faster:.2f}x "
          f"(start-up {startup:.1f}s, accuracy {quality:.4f} vs {serial_quality:.4f})")
