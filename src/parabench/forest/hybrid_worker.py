"""The Dask worker side of ``rf_torch+dask`` and ``rf_dask+threads+torch``: grow a block of trees.

Usage (what :class:`parabench.forest.hybrid.DaskTorchSession` submits, one task per worker)::

    forest, info = worker_task(prepared, params, [0, 1, 2], index=0, device="cpu",
                               threads=2, inner=1, backend=TorchKernel)
    info["grow_s"], info["peak_gpu_mb"]

The worker keeps its kernels (one per driving thread, ``inner`` of them) and its thread pool
for the life of the process, so only the first (warm-up) task pays for them. ``grow_s`` is
timed by the worker's own clock: the session cannot see inside the task.
"""

from __future__ import annotations

import functools
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from parabench.core.clock import Clock
from parabench.forest.grow import ForestParams, Prepared
from parabench.forest.hist import warm_up_prepared
from parabench.forest.kernel import Kernel
from parabench.forest.threaded import grow_threaded, kernel_for, peak_gpu_mb, reset_peaks
from parabench.forest.trees import Forest


def worker_task(prepared: Prepared, params: ForestParams, tree_ids: list[int], index: int,
                device: str, threads: int, inner: int, warm: bool = False, *,
                backend: type[Kernel]) -> tuple[Forest, dict[str, float]]:
    """Runs on a Dask worker: grow ``tree_ids`` with ``inner`` threads of ``backend`` kernels."""
    backend.set_threads(threads)
    device = backend.place(device, index)
    kernels = [kernel_for(backend, device, i) for i in range(inner)]
    pool = _worker_pool(inner) if inner > 1 else None
    if warm:
        for k in kernels:
            with k.on_stream():
                warm_up_prepared(k, prepared, params)
        reset_peaks(kernels)
    forest, grow_s = Clock().time(lambda: grow_threaded(prepared, params, tree_ids, kernels, pool))
    info: dict[str, Any] = {"grow_s": grow_s, "peak_gpu_mb": peak_gpu_mb(kernels) or 0.0}
    return forest, info


@functools.cache
def _worker_pool(threads: int) -> ThreadPoolExecutor:
    """The worker process's own thread pool for rf_dask+threads+torch, kept across epochs."""
    return ThreadPoolExecutor(threads, thread_name_prefix="forest")
