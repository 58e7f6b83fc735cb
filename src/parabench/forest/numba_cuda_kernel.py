"""The histogram-forest kernel as ``numba.cuda`` kernels on the GPU.

Usage::

    kernel = NumbaCudaKernel("cuda")
    kernel.warm_up()                       # compile the kernels (start-up, not fit time)
    model = HistForestClassifier(params, kernel).fit(x, y)

Tested without a GPU under the CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``, set before numba
is imported; slow, so on tiny inputs). On a real GPU numba needs its CUDA target (the
``numba-cuda`` package on numba >= 0.61).

Six kernels: ``zero`` (clears a histogram on the device), ``hist`` (one thread per row x
slot, integer atomic adds: their order cannot change a count), ``cumulate`` (one thread per
node x slot x class: running sums over bins, in place), ``slot_best`` (one thread per node x
slot: the best bin of that slot), ``node_best`` (one thread per node: the first best slot,
its left class counts) and ``route`` (one thread per row). Rows of finished nodes stay, with
node -1, and are skipped: no device compaction.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np

from parabench.forest.kernel import Kernel


class NumbaCudaKernel(Kernel):
    name: ClassVar[str] = "numba-cuda"

    def __init__(self, device: str = "cuda") -> None:
        from numba import cuda

        from parabench.forest import numba_cuda_loops

        super().__init__(device)
        self.cuda = cuda
        self.loops = numba_cuda_loops
        #: most device memory seen in use (this GPU, all contexts) at a level's fullest moment
        self.peak_used_bytes = 0

    def reset_peak(self) -> None:
        self.peak_used_bytes = 0

    def peak_gpu_mb(self) -> float | None:
        """The peak sampled, or None when none was (the simulator: not 0 MB, unknown)."""
        return self.peak_used_bytes / 2**20 if self.peak_used_bytes else None

    def _sample_memory(self) -> None:
        free, total = self.cuda.current_context().get_memory_info()
        if math.isfinite(total):  # the simulator reports free = total = inf: nothing to sample
            self.peak_used_bytes = max(self.peak_used_bytes, total - free)

    def warm_up(self) -> None:
        """Launch every kernel once on a tiny problem: compilation happens here."""
        xbin = self.put(np.zeros((4, 2), np.uint8))
        rows, node = self.put(np.arange(4)), self.put(np.zeros(4, np.int64))
        hist = self.histograms(
            xbin,
            self.put(np.array([0, 1, 0, 1])),
            rows,
            node,
            self.put(np.zeros((1, 1), np.int64)),
            0,
            1,
            2,
            2,
        )
        self.best_splits(hist, 1)
        zero = self.put(np.zeros(1, np.int64))
        self.route(xbin, rows, node, zero, zero, zero, zero)
        self.synchronize()

    def put(self, a: np.ndarray) -> Any:
        a = np.ascontiguousarray(a)
        return self.cuda.to_device(
            a.astype(np.int64) if a.dtype.kind in "iu" and a.dtype != np.uint8 else a
        )

    def get(self, a: Any) -> np.ndarray:
        return a.copy_to_host()

    def synchronize(self) -> None:
        self.cuda.synchronize()

    def histograms(
        self,
        xbin: Any,
        y: Any,
        rows: Any,
        node: Any,
        feats: Any,
        lo: int,
        hi: int,
        n_bins: int,
        n_classes: int,
        n_nodes: int | None = None,
    ) -> Any:
        lp, T1, T2 = self.loops, self.loops.THREADS_1D, self.loops.THREADS_2D
        slots = feats.shape[1]
        out = self.cuda.device_array((hi - lo, slots, n_classes, n_bins), np.int64)
        flat = out.reshape(out.size)
        lp.zero_kernel[lp.blocks(out.size, T1), T1](flat)  # no host zeros to copy
        grid = (lp.blocks(rows.shape[0], T2[0]), lp.blocks(slots, T2[1]))
        lp.hist_kernel[grid, T2](xbin, y, rows, node, feats, lo, hi, out)
        return out

    def best_splits(self, hist: Any, min_leaf: int) -> tuple[Any, Any, Any, Any]:
        lp, T1 = self.loops, self.loops.THREADS_1D
        T2 = lp.THREADS_2D
        k, slots, n_classes, _ = hist.shape
        left = self.cuda.device_array_like(hist)
        left.copy_to_device(hist)
        lp.cumulate_kernel[lp.blocks(k * slots * n_classes, T1), T1](left)
        score = self.cuda.device_array((k, slots), np.float64)
        bins = self.cuda.device_array((k, slots), np.int64)
        grid = (lp.blocks(k, T2[0]), lp.blocks(slots, T2[1]))
        lp.slot_best_kernel[grid, T2](left, min_leaf, score, bins)
        slot, b = self.cuda.device_array(k, np.int64), self.cuda.device_array(k, np.int64)
        left_counts = self.cuda.device_array((k, n_classes), np.int64)
        found = self.cuda.device_array(k, np.bool_)
        lp.node_best_kernel[lp.blocks(k, T1), T1](
            left, score, bins, slot, b, left_counts, found
        )
        self._sample_memory()  # the histogram and its cumulative copy are both alive here
        return slot, b, left_counts, found

    def route(
        self,
        xbin: Any,
        rows: Any,
        node: Any,
        feature: Any,
        threshold: Any,
        left_next: Any,
        right_next: Any,
    ) -> tuple[Any, Any]:
        lp, T1 = self.loops, self.loops.THREADS_1D
        out = self.cuda.device_array_like(node)
        out.copy_to_device(node)
        lp.route_kernel[lp.blocks(rows.shape[0], T1), T1](
            xbin, rows, out, feature, threshold, left_next, right_next
        )
        return rows, out
