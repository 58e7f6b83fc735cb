"""MFU of serial CPU training of ``cnn`` and ``mlp`` against the measured fp32 matmul peak.

    pytest tests/benchmarks/test_mfu.py --benchmark-only

Each case starts a serial session (quick profile, every core), warms up one epoch and the
warm-up speed window, times steady windows (each round one window of N steps, as ``parabench
run`` measures speed: :mod:`parabench.case.lifecycle`), and records in ``extra_info``: FLOPs
per sample (``torch.utils.flop_counter``, forward + backward), the median window throughput,
achieved FLOP/s = FLOPs per sample x samples/s, the measured matmul peak at the same thread
count (:func:`parabench.case.peak.matmul_peak_flops`), and MFU = achieved / peak.
"""

from __future__ import annotations

import os
import statistics
from typing import Any

import pytest

from parabench.case.lifecycle import StartedCase
from parabench.case.peak import matmul_peak_flops
from parabench.config import RunConfig, available_cores

pytestmark = [pytest.mark.cpu, pytest.mark.torch]


@pytest.mark.parametrize("workload", ["cnn", "mlp"])
def test_serial_cpu_window_mfu(benchmark: Any, workload: str) -> None:
    profile = os.environ.get("PARABENCH_BENCH_PROFILE") or ("tiny" if benchmark.disabled
                                                           else "quick")
    threads = available_cores()
    config = RunConfig(workload=workload, method="serial", profile=profile, epochs=1,
                       threads_per_worker=threads)
    with StartedCase(config) as started:
        benchmark.pedantic(started.step, rounds=1 if benchmark.disabled else 5, iterations=1)
        assert started.session is not None
        flops = started.session.flops_per_sample
        rate = statistics.median(s.samples / s.seconds for s in started.windows)
        steps = started.window_steps
    peak = matmul_peak_flops("cpu", threads=threads)
    achieved = flops * rate
    benchmark.extra_info.update(
        profile=profile, threads=threads, flops_per_sample=flops, samples_per_s=rate,
        window_steps=steps, achieved_gflops=achieved / 1e9, peak_gflops=peak / 1e9,
        mfu=achieved / peak,
    )
    print(f"\n{workload}: {flops / 1e6:.2f} MFLOP/sample, {achieved / 1e9:.2f} GFLOP/s "
          f"of {peak / 1e9:.1f} peak -> MFU {achieved / peak:.3f}")
    assert flops > 0 and 0 < achieved / peak < 1.5  # above the peak would mean a bad count
