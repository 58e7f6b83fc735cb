"""One pytest-benchmark case per (workload, method, device, workers) in the registry.

    pytest -m cpu --benchmark-only --benchmark-json=cpu.json      # measure (quick profile)
    pytest -m cuda --benchmark-only                               # GPU runners; skips elsewhere
    pytest tests/benchmarks                                       # smoke: each case once, tiny

Cases come from the planner (:func:`parabench.sweep.plan.bench_cases`), so a new method brings
its own cases with the markers it needs. The timed function is one steady-state epoch of a
session started (and warmed up by one epoch) outside the timed region.
``benchmark.extra_info`` holds samples/s, ``speedup`` (vs serial with the same total cores,
workers x threads) and ``scaling_efficiency`` (vs serial at the threads per worker, / workers),
each with its named baseline (``speedup_baseline``, ``scaling_baseline``), start-up, peak
memory, quality and the quality gap to serial, so ``--benchmark-json`` is a full record.
A serial run a ratio needs that the selection did not time is measured here, untimed.
The figures come from :mod:`parabench.sweep.compare` (:func:`~parabench.sweep.compare.ratios`,
as in ``parabench run``'s table); ``quality_gap_vs_serial`` is its ``quality_shortfall``
(positive: worse than serial). Cases are grouped by workload (``benchmark.group``), and their
``params`` are JSON (a BenchCase is a named tuple), so ``pytest-benchmark compare`` compares
like with like.

The profile is ``$PARABENCH_BENCH_PROFILE``, default ``quick`` when measuring and ``tiny`` in
smoke mode.
"""

from __future__ import annotations

import os
import statistics
from typing import Any

import pytest

from parabench.case.lifecycle import StartedCase
from parabench.case.measure import TreeSampler
from parabench.registry import workloads
from parabench.sweep.compare import CaseKey, baseline_of, is_baseline, quality_shortfall, ratios
from parabench.sweep.plan import BenchCase, bench_cases

ROUNDS = 10  # fewer (down to MIN_ROUNDS) when an epoch is slow, to stay near ROUND_BUDGET_S
MIN_ROUNDS = 5
ROUND_BUDGET_S = 30.0
BASELINE_STEPS = 3


def _param(case: BenchCase) -> Any:
    return pytest.param(case, id=case.id, marks=[getattr(pytest.mark, m) for m in
                                                 sorted(case.markers)])


@pytest.fixture(scope="module")
def baselines() -> dict[CaseKey, tuple[float, float]]:
    """A baseline run's key -> (its median epoch s, its quality)."""
    return {}


@pytest.fixture
def profile(benchmark: Any) -> str:
    return os.environ.get("PARABENCH_BENCH_PROFILE") or ("tiny" if benchmark.disabled else "quick")


def _key(case: BenchCase, profile: str, threads: int) -> CaseKey:
    """The case's key as :func:`parabench.sweep.compare.ratios` reads it."""
    return CaseKey(case.workload, case.method, case.device, case.workers, "-", profile, "-",
                   threads)


def _baseline(case: BenchCase, profile: str, threads: int, cache: dict,
              steps: int) -> tuple[float, float]:
    """The baseline at ``threads`` threads: timed already, or measured here, untimed."""
    serial = BenchCase(workload=case.workload, method=baseline_of(case.method),
                       device=case.device, workers=1)
    key = _key(serial, profile, threads)
    if key not in cache:
        config = serial.config(profile).replace(threads_per_worker=threads)
        with StartedCase(config) as started:
            times = [started.step().seconds for _ in range(steps)]
            cache[key] = (statistics.median(times), started.quality())
    return cache[key]


@pytest.mark.parametrize("case", [_param(c) for c in bench_cases()])
def test_epoch(benchmark: Any, case: BenchCase, profile: str, baselines: dict) -> None:
    if (reason := case.skip_reason(profile)) is not None:
        pytest.skip(reason)
    benchmark.group = case.workload  # compare like with like
    with TreeSampler(os.getpid()) as memory, StartedCase(case.config(profile)) as started:
        rounds = max(MIN_ROUNDS, min(ROUNDS, int(ROUND_BUDGET_S / max(started.warmup_s, 1e-9))))
        if benchmark.disabled:
            rounds = 1
        benchmark.pedantic(started.step, rounds=rounds, iterations=1, warmup_rounds=0)
        quality = started.quality()
        peak_gpu = started.session.peak_gpu_mb() if started.session else None
        epoch_times = [s.seconds for s in started.history]
        samples = started.samples_per_epoch

    median = statistics.median(epoch_times)
    threads = case.config(profile).threads
    key = _key(case, profile, threads)
    if is_baseline(case.method):  # serial, and tf_serial for the tf_* methods
        baselines[key] = (median, quality)
    steps = 1 if benchmark.disabled else BASELINE_STEPS  # smoke: prove it works, quickly
    for n in (case.workers * threads, threads):  # equal cores; threads per worker
        _baseline(case, profile, n, baselines, steps)
    base_quality = _baseline(case, profile, case.workers * threads, baselines, steps)[1]
    figures = ratios(key, {**{k: t for k, (t, _) in baselines.items()}, key: median})
    higher_is_better = workloads.get(case.workload).quality.higher_is_better
    benchmark.extra_info.update(
        workload=case.workload, method=case.method, device=case.device,
        threads_per_worker=threads,
        profile=profile,
        samples_per_epoch=samples,
        samples_per_s=samples / median,
        epoch_s_median=median,
        **figures.as_dict(),
        startup_s=started.startup_s,
        peak_rss_mb=round(memory.peak_rss_mb, 1),
        peak_gpu_mb=peak_gpu,
        quality=quality,
        quality_name=workloads.get(case.workload).quality.name,
        quality_gap_vs_serial=quality_shortfall(quality, base_quality, higher_is_better),
        workers=case.workers,
        rounds=rounds,
    )
    assert figures.speedup.value is not None and figures.scaling_efficiency.value is not None
    assert samples > 0 and all(t > 0 for t in epoch_times)
    assert quality == quality, "quality is NaN"  # a NaN would poison every comparison
