"""The histogram-forest kernel as ``@njit(parallel=True)`` loops on the CPU.

Usage::

    kernel = NumbaKernel("cpu")
    kernel.warm_up()                       # JIT-compile every loop (start-up, not fit time)
    model = HistForestClassifier(params, kernel).fit(x, y)

Histograms: ``route`` returns the rows grouped by node (a stable counting sort), so one
parallel task per (node, sampled-feature slot) counts that node's contiguous rows into its
own block: no races, no per-thread copies to merge, and cache-friendly writes. Rows in any
other order fall back to one task per slot, each scanning every row. The split
search runs one parallel task per node, a single pass over bins that keeps running per-class
counts; it computes the same float64 score as the other kernels and keeps the first maximum.
Routing is a parallel pass, then the serial O(rows) grouping.

The loops are compiled with ``cache=True``: the first process on a machine compiles them
(seconds) and writes numba's cache beside this file; later processes load it in ``warm_up``.
Either way it is start-up, never fit time.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from parabench.forest.kernel import Kernel
from parabench.forest.numba_cuda_kernel import NumbaCudaKernel


class NumbaKernel(Kernel):
    name: ClassVar[str] = "numba"

    def __init__(self, device: str = "cpu") -> None:
        if device != "cpu":
            raise ValueError(
                f"the numba kernel runs on cpu (numba-cuda is the GPU one), not {device}"
            )
        from parabench.forest import numba_loops

        super().__init__(device)
        self.loops = numba_loops

    @classmethod
    def set_threads(cls, threads: int) -> int:
        import numba

        numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
        return numba.get_num_threads()

    @classmethod
    def for_device(cls, device: str) -> type[Kernel]:
        return NumbaCudaKernel if device == "cuda" else cls

    @classmethod
    def unavailable(cls, device: str) -> str | None:
        if device != "cuda":
            return None
        from numba import cuda

        if not cuda.is_available():
            return "numba sees no CUDA GPU; pip install numba-cuda (numba >= 0.61 moved it)"
        return None

    def warm_up(self) -> None:
        """Run each loop once on a tiny problem so JIT compilation happens now."""
        xbin, y = np.zeros((4, 2), np.uint8), np.array([0, 1, 0, 1])
        rows, feats = np.arange(4), np.zeros((1, 1), np.int64)
        for node in (np.zeros(4, np.int64), np.array([0, -1, 0, -1])):  # grouped, not grouped
            hist = self.histograms(xbin, y, rows, node, feats, 0, 1, 2, 2)
        self.best_splits(hist, 1)
        zero = np.zeros(1, np.int64)
        self.route(xbin, rows, np.zeros(4, np.int64), zero, zero, zero, zero)

    def put(self, a: np.ndarray) -> np.ndarray:
        return np.array(a, copy=True)

    def get(self, a: np.ndarray) -> np.ndarray:
        return np.asarray(a)

    def histograms(
        self,
        xbin: np.ndarray,
        y: np.ndarray,
        rows: np.ndarray,
        node: np.ndarray,
        feats: np.ndarray,
        lo: int,
        hi: int,
        n_bins: int,
        n_classes: int,
        n_nodes: int | None = None,
    ) -> np.ndarray:
        out = np.zeros((hi - lo, feats.shape[1], n_classes, n_bins), np.int64)
        y = y.astype(np.int64, copy=False)
        if self.loops.is_grouped(node):  # route() keeps rows grouped: one node's block a task
            starts = np.searchsorted(node, np.arange(lo, hi + 1))
            self.loops.grouped_hist_kernel(xbin, y, rows, starts, feats, out)
        else:
            self.loops.hist_kernel(xbin, y, rows, node, feats, lo, hi, out)
        return out

    def best_splits(
        self, hist: np.ndarray, min_leaf: int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        k, _, n_classes, _ = hist.shape
        slot, b = np.zeros(k, np.int64), np.zeros(k, np.int64)
        left, found = np.zeros((k, n_classes), np.int64), np.zeros(k, np.bool_)
        self.loops.split_kernel(hist, min_leaf, slot, b, left, found)
        return slot, b, left, found

    def route(
        self,
        xbin: np.ndarray,
        rows: np.ndarray,
        node: np.ndarray,
        feature: np.ndarray,
        threshold: np.ndarray,
        left_next: np.ndarray,
        right_next: np.ndarray,
    ) -> tuple[np.ndarray, np.ndarray]:
        nxt = np.empty(len(rows), np.int64)
        loops = self.loops
        loops.route_kernel(xbin, rows, node, feature, threshold, left_next, right_next, nxt)
        n_next = 1 + max(left_next.max(initial=-1), right_next.max(initial=-1))
        return loops.group_rows(rows, nxt, n_next)
