"""A forest's trees grown in contiguous blocks by several kernels at once (one thread each).

Usage::

    kernels = [kernel_for(TorchKernel, "cpu", i) for i in range(2)]   # or "cuda:0"; per process
    forest = grow_threaded(prepared, params, list(range(100)), kernels, pool)
    peak = peak_gpu_mb(kernels)          # per device, summed over devices; None on the host

Tree ``t`` draws from its own seed stream, so the merged forest is the very forest one kernel
grows from the same ids. Used by the hybrid sessions (:mod:`parabench.forest.hybrid`) and by
their Dask worker side (:mod:`parabench.forest.hybrid_worker`).
"""

from __future__ import annotations

import functools
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from parabench.forest.grow import ForestParams, Prepared, grow_trees
from parabench.forest.kernel import Kernel
from parabench.forest.trees import Forest


def blocks(n_trees: int, parts: int) -> list[list[int]]:
    """Contiguous, balanced blocks of tree ids (empty blocks dropped)."""
    return [b.tolist() for b in np.array_split(np.arange(n_trees), parts) if len(b)]


@functools.cache
def kernel_for(backend: type[Kernel], device: str, slot: int) -> Kernel:
    """One kernel (and device stream) per (backend, device, thread slot), kept for the process."""
    return backend(device)


def grow_threaded(prepared: Prepared, params: ForestParams, tree_ids: list[int],
                  kernels: list[Kernel], pool: ThreadPoolExecutor | None) -> Forest:
    """Grow ``tree_ids`` split over ``kernels`` (one thread each); the merged forest."""

    def one(kernel: Kernel, ids: list[int]) -> Forest:
        with kernel.on_stream():
            return grow_trees(kernel, prepared, params, ids)

    parts = [(kernels[i], ids) for i, ids in enumerate(_split(tree_ids, len(kernels)))]
    if pool is None or len(parts) == 1:
        forests = [one(k, ids) for k, ids in parts]
    else:
        forests = [f.result() for f in [pool.submit(one, k, ids) for k, ids in parts]]
    return Forest.concat(forests)


def _split(ids: list[int], parts: int) -> list[list[int]]:
    return [[ids[i] for i in b] for b in blocks(len(ids), parts)]


def _per_device(kernels: list[Kernel]) -> list[Kernel]:
    """One kernel per device: kernels on one GPU share its peak."""
    return list({k.device_key: k for k in kernels}.values())


def reset_peaks(kernels: list[Kernel]) -> None:
    for kernel in _per_device(kernels):
        kernel.reset_peak()


def peak_gpu_mb(kernels: list[Kernel]) -> float | None:
    peaks = [p for k in _per_device(kernels) if (p := k.peak_gpu_mb()) is not None]
    return sum(peaks) if peaks else None
