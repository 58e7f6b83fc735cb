"""One pytest-benchmark case per (workload, method, device, workers) in the registry.

    pytest -m cpu --benchmark-only --benchmark-json=cpu.json      # measure (quick profile)
    pytest -m cuda --benchmark-only                               # GPU: the cuda selection
    PARABENCH_BENCH_ALL=1 pytest -m cuda --benchmark-only         # GPU: every cuda case
    pytest tests/benchmarks                                       # smoke: each case once, tiny

Cases come from the planner (:func:`parabench.sweep.plan.bench_cases`), so a new method brings
its own cases with the markers it needs. The timed function is one steady-state speed *window*
(:meth:`~parabench.case.lifecycle.StartedCase.step`: N global mini-batch steps over
:func:`~parabench.torch.loop.window_order`, or one fit / round / epoch per ``window_unit``) of a
session started, warmed up by one epoch and calibrated by a warm-up window outside the timed
region: the same window as ``parabench run``'s. Each round is one window. Windows of two methods
may hold different numbers of steps (each calibrates its own N), so every figure is per sample:
``samples_per_s`` is the median of the rounds' samples/s with its 95 % bootstrap interval
``samples_per_s_ci`` (:func:`parabench.analysis.stats.median_ci`), and the ratios compare seconds
per sample (equal work). ``benchmark.extra_info`` also holds ``window_steps``, ``window_unit``,
``window_s_median``, ``epoch_s_equivalent`` (an epoch's samples at the median rate, as
:attr:`parabench.case.result.Result.median_epoch_s`), ``speedup`` (vs serial with the same
total cores, workers x threads) and ``scaling_efficiency`` (vs serial at the threads per
worker, / workers), each with its named baseline (``speedup_baseline``, ``scaling_baseline``),
start-up, peak memory, quality and the quality gap to serial, so ``--benchmark-json`` is a
full record. A serial run a ratio needs that the selection did not time is measured here,
untimed, from windows too.
The baselines to measure and the figures come from :mod:`parabench.analysis.ratios`
(:func:`~parabench.analysis.ratios.baseline_keys`, :func:`~parabench.analysis.ratios.ratios`,
as in ``parabench run``'s table); ``quality_gap_vs_serial`` is its ``quality_shortfall``
(positive: worse than serial). Cases are grouped by workload (``benchmark.group``), and their
``params`` are JSON (a BenchCase is a named tuple), so ``pytest-benchmark compare`` compares
like with like.

The profile is ``$PARABENCH_BENCH_PROFILE``, default ``quick`` when measuring and ``tiny`` in
smoke mode; a case of the cuda selection (tests/benchmarks/conftest.py) runs as its
:class:`~parabench.sweep.bench.BenchRun` says (``full`` and bf16 for the torch methods, no
warm-up epoch where a window is itself an epoch, fewer rounds), at
``$PARABENCH_BENCH_PROFILE`` where that is set.
"""

from __future__ import annotations

import dataclasses
import os
import statistics
from typing import Any

import pytest

from parabench.analysis.ratios import (
    CaseKey,
    baseline_keys,
    is_baseline,
    quality_shortfall,
    ratios,
)
from parabench.analysis.stats import median_ci
from parabench.case.lifecycle import StartedCase
from parabench.core.sampler import TreeSampler
from parabench.registry import workloads
from parabench.sweep.bench import BASELINE_WINDOWS, BenchRun, timed_rounds
from parabench.sweep.plan import BenchCase, bench_cases, skip_reason


@pytest.fixture(autouse=True)
def smoke_windows(benchmark: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Smoke mode proves each case's body works, not its speed: windows calibrated to about
    0.05 s, as every test outside tests/benchmarks gets (tests/conftest.py), not 0.5 s."""
    if benchmark.disabled:
        monkeypatch.setenv("PARABENCH_WINDOW_S", "0.05")


#: methods whose engine takes many seconds to start (a JVM; a TensorFlow cluster): in the slow set
SLOW_START = ("rf_spark", "tf_multiworker")


def _param(case: BenchCase) -> Any:
    marks = [getattr(pytest.mark, m) for m in sorted(case.markers)]
    return pytest.param(case, id=case.id,
                        marks=marks + ([pytest.mark.slow] if case.method in SLOW_START else []))


@pytest.fixture(scope="module")
def baselines() -> dict[CaseKey, tuple[float, float]]:
    """A baseline run's key -> (its seconds per sample, its quality)."""
    return {}


@pytest.fixture
def run(benchmark: Any, request: pytest.FixtureRequest) -> BenchRun:
    """How this case runs: the cuda selection's BenchRun (its ``bench_run`` marker), else the
    profile alone; ``$PARABENCH_BENCH_PROFILE`` overrides either's profile."""
    mark = request.node.get_closest_marker("bench_run")
    run = mark.args[0] if mark else BenchRun(profile="tiny" if benchmark.disabled else "quick")
    return dataclasses.replace(run, profile=os.environ.get("PARABENCH_BENCH_PROFILE")
                               or run.profile)


def window_figures(started: StartedCase) -> dict[str, Any]:
    """The speed figures of ``started``'s steady windows (the warm-up window left out).

    Per sample, so two cases whose windows hold different step counts compare at equal work.
    """
    windows = started.windows
    rates = [s.samples / s.seconds for s in windows if s.seconds > 0]
    assert rates and len(rates) == len(windows), f"windows without time or samples: {windows}"
    rate = statistics.median(rates)
    ci = median_ci(rates)
    samples = started.samples_per_epoch
    return {
        "samples_per_s": rate,
        "samples_per_s_ci": list(ci) if ci else None,
        "seconds_per_sample": 1.0 / rate,
        "epoch_s_equivalent": samples / rate if samples else None,
        "window_s_median": statistics.median(s.seconds for s in windows),
        "window_steps": started.window_steps,
        "window_unit": started.session.window_unit if started.session else None,
        "windows": len(windows),
    }


def _warmup_window_s(started: StartedCase) -> float:
    """Seconds of the warm-up window: what one timed round will about take."""
    lifecycle = started.lifecycle
    assert lifecycle is not None and lifecycle.warmup_windows, "no warm-up window ran"
    return sum(s.seconds for s in lifecycle.windows[: lifecycle.warmup_windows])


def _baseline(case: BenchCase, run: BenchRun, key: CaseKey, cache: dict,
              windows: int) -> tuple[float, float] | str:
    """The baseline run ``key`` (one of :func:`~parabench.analysis.ratios.baseline_keys`):
    timed already, or measured here (``windows`` steady windows, untimed by pytest-benchmark);
    why not, when it cannot run here (serial trains no forest on a GPU)."""
    serial = BenchCase(workload=case.workload, method=key.method, device=case.device, workers=1)
    if key not in cache:
        config = run.config(serial).replace(threads_per_worker=key.threads)
        if (reason := skip_reason(config)) is not None:
            return f"no baseline: {reason}"
        with StartedCase(config) as started:
            for _ in range(windows):
                started.step()
            cache[key] = (window_figures(started)["seconds_per_sample"], started.quality())
    return cache[key]


def _utilisation(config: Any, flops: float | None, rate: float) -> dict[str, Any]:
    """``mfu`` and the ``peak`` it is against (:func:`parabench.case.peak.case_peak`: measured
    once per session in the shared sweep folder), for a case with a FLOP count; else nothing."""
    if not flops:
        return {}
    from parabench.case.peak import case_peak, mfu

    peak = case_peak(config)
    return {"mfu": mfu(flops_per_sample=flops, samples_per_s=rate, peak=peak),
            "peak": peak.to_dict()}


@pytest.mark.parametrize("case", [_param(c) for c in bench_cases()])
def test_window(benchmark: Any, case: BenchCase, run: BenchRun, baselines: dict) -> None:
    config = run.config(case)
    if (reason := skip_reason(config)) is not None:
        pytest.skip(reason)
    benchmark.group = case.workload  # compare like with like
    with (TreeSampler(os.getpid()) as memory,
          StartedCase(config, warmup_epochs=run.warmup_epochs) as started):
        rounds = timed_rounds(_warmup_window_s(started), run.round_budget_s)
        if benchmark.disabled:
            rounds = 1
        benchmark.pedantic(started.step, rounds=rounds, iterations=1, warmup_rounds=0)
        speed = window_figures(started)  # pedantic's rounds are exactly the steady windows
        quality = started.quality()
        peak_gpu = started.session.peak_gpu_mb() if started.session else None
        flops = started.session.flops_per_sample if started.session else None
        samples = started.samples_per_epoch

    threads = config.threads
    key = config.key().group
    if is_baseline(case.method):  # serial, and tf_serial for the tf_* methods
        baselines[key] = (speed["seconds_per_sample"], quality)
    windows = 1 if benchmark.disabled else BASELINE_WINDOWS  # smoke: prove it works, quickly
    speed_base, scaling_base = baseline_keys(key)  # equal cores; threads per worker
    base = _baseline(case, run, speed_base, baselines, windows)
    base_quality = base[1] if isinstance(base, tuple) else None
    _baseline(case, run, scaling_base, baselines, windows)
    per_sample = {k: t for k, (t, _) in baselines.items()}
    figures = ratios(key, {**per_sample, key: speed["seconds_per_sample"]})
    higher_is_better = workloads.get(case.workload).quality.higher_is_better
    benchmark.extra_info.update(
        workload=case.workload, method=case.method, device=case.device,
        threads_per_worker=threads,
        profile=run.profile,
        options=dict(run.options),
        samples_per_epoch=samples,
        **speed,
        **figures.as_dict(),
        startup_s=started.startup_s,
        peak_rss_mb=round(memory.peak_rss_mb, 1),
        peak_gpu_mb=peak_gpu,
        quality=quality,
        quality_name=workloads.get(case.workload).quality.name,
        quality_gap_vs_serial=(None if base_quality is None else
                               quality_shortfall(quality, base_quality, higher_is_better)),
        workers=case.workers,
        rounds=rounds,
        **_utilisation(config, flops, speed["samples_per_s"]),
    )
    if isinstance(base, str):  # a GPU forest: nothing to divide by, and it says why
        benchmark.extra_info["speedup_note"] = base
    else:
        assert figures.speedup.value is not None and figures.scaling_efficiency.value is not None
    assert speed["windows"] == rounds, (speed["windows"], rounds)  # one window per round
    assert samples > 0 and speed["samples_per_s"] > 0
    assert quality == quality, "quality is NaN"  # a NaN would poison every comparison
