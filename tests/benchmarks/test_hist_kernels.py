"""Histogram-forest kernels on the CPU: numba and torch against the NumPy ``bincount`` reference.

    pytest tests/benchmarks/test_hist_kernels.py --benchmark-only     # measure
    pytest tests/benchmarks/test_hist_kernels.py                      # smoke: each body once

The inputs are one level of the ``quick`` profile's forest: 16,000 training rows, 40
features binned into 32 bins, 5 classes, a batch of 8 trees' bootstrap rows (128,000) spread
over 256 frontier nodes, ``int(sqrt(40)) = 6`` sampled features per node, rows grouped by
node as routing leaves them (numba's fast path; NumPy and torch do not care). Every round first
runs the reference (timed in the untimed ``setup`` of ``benchmark.pedantic``) and then the
kernel (timed by pytest-benchmark), so both see the same machine noise in the same run.
``extra_info`` holds both medians, ``speedup`` (reference / kernel) and the thread counts:
NumPy's ``bincount`` is single-threaded; numba and torch get every core here. The outputs are
checked equal to the reference's, exactly, in both modes.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import numpy as np
import pytest

from parabench.config import available_cores
from parabench.forest import KERNELS, make_kernel

pytestmark = pytest.mark.cpu
ROUNDS = 15
WARMUP = 2
SHAPE = {"n": 16_000, "features": 40, "bins": 32, "classes": 5, "rows": 128_000,
         "nodes": 256, "slots": 6}


def _level(seed: int = 0) -> dict[str, Any]:
    s, rng = SHAPE, np.random.default_rng(seed)
    return {
        "xbin": rng.integers(0, s["bins"], (s["n"], s["features"])).astype(np.uint8),
        "y": rng.integers(0, s["classes"], s["n"]).astype(np.int64),
        "rows": rng.integers(0, s["n"], s["rows"]).astype(np.int64),
        "node": np.sort(rng.integers(0, s["nodes"], s["rows"])).astype(np.int64),
        "feats": np.stack([rng.permutation(s["features"])[: s["slots"]]
                           for _ in range(s["nodes"])]),
    }


def _op(kernel: Any, op: str, level: dict[str, Any]) -> Any:
    """The call to time, with its inputs already on the kernel's side."""
    k, s = kernel, SHAPE
    args = [k.put(level[name]) for name in ("xbin", "y", "rows", "node", "feats")]
    hist_args = (*args, 0, s["nodes"], s["bins"], s["classes"])
    if op == "histograms":
        return lambda: k.histograms(*hist_args, n_nodes=s["nodes"])
    hist = k.histograms(*hist_args, n_nodes=s["nodes"])
    return lambda: k.best_splits(hist, 1)


def _host(kernel: Any, out: Any) -> list[np.ndarray]:
    return [kernel.get(a) for a in (out if isinstance(out, tuple) else (out,))]


def _threads(backend: str) -> int:
    return KERNELS[backend].set_threads(available_cores())


@pytest.mark.parametrize("op", ["histograms", "best_splits"])
@pytest.mark.parametrize("backend", [pytest.param("numba", marks=pytest.mark.numba),
                                     pytest.param("torch", marks=pytest.mark.torch)])
def test_cpu_kernel_against_numpy_reference(benchmark: Any, backend: str, op: str) -> None:
    level = _level()
    ref_kernel, kernel = make_kernel("numpy"), make_kernel(backend)
    if hasattr(kernel, "warm_up"):
        kernel.warm_up()  # JIT compilation is start-up, not kernel time
    threads = _threads(backend)
    reference, target = _op(ref_kernel, op, level), _op(kernel, op, level)
    expected = _host(ref_kernel, reference())
    for e, g in zip(expected, _host(kernel, target()), strict=True):
        np.testing.assert_array_equal(g, e)

    ref_times: list[float] = []

    def timed_reference() -> None:
        t0 = time.perf_counter()
        reference()
        ref_times.append(time.perf_counter() - t0)

    benchmark.pedantic(target, setup=timed_reference, rounds=ROUNDS, warmup_rounds=WARMUP,
                       iterations=1)
    if benchmark.disabled:
        return  # smoke mode: the body ran once
    ref = statistics.median(ref_times[WARMUP:])
    kern = benchmark.stats.stats.median
    benchmark.extra_info.update(
        reference="numpy bincount" if op == "histograms" else "numpy vectorised",
        reference_median_s=ref, kernel_median_s=kern, speedup=ref / kern,
        kernel_threads=threads, reference_threads=1, rounds=ROUNDS, **SHAPE,
    )
    print(f"\n{backend} {op}: {kern * 1e3:.2f} ms, numpy {ref * 1e3:.2f} ms, "
          f"speedup {ref / kern:.2f}x ({threads} threads)")
