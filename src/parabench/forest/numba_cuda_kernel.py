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
from numba import cuda

from parabench.forest.kernel import Kernel

THREADS_1D = 256
THREADS_2D = (64, 4)


def _blocks(n: int, per: int) -> int:
    return max(1, math.ceil(n / per))


@cuda.jit
def hist_kernel(xbin, y, rows, node, feats, lo, hi, out):
    i, s = cuda.grid(2)
    if i < rows.shape[0] and s < feats.shape[1]:
        k = node[i]
        if k >= lo and k < hi:
            r = rows[i]
            cuda.atomic.add(out, (k - lo, s, y[r], xbin[r, feats[k - lo, s]]), 1)


@cuda.jit
def zero_kernel(flat):
    i = cuda.grid(1)
    if i < flat.shape[0]:
        flat[i] = 0


@cuda.jit
def cumulate_kernel(hist):
    t = cuda.grid(1)
    n_nodes, slots, n_classes, n_bins = hist.shape
    if t < n_nodes * slots * n_classes:
        k, rest = t // (slots * n_classes), t % (slots * n_classes)
        s, c = rest // n_classes, rest % n_classes
        for b in range(1, n_bins):
            hist[k, s, c, b] += hist[k, s, c, b - 1]


@cuda.jit
def slot_best_kernel(left, min_leaf, score_out, bin_out):
    k, s = cuda.grid(2)
    n_nodes, slots, n_classes, n_bins = left.shape
    if k < n_nodes and s < slots:
        n_total = 0
        for c in range(n_classes):
            n_total += left[k, s, c, n_bins - 1]
        best, best_b = -math.inf, -1
        for b in range(n_bins):
            n_left, sq_left, sq_right = 0, 0, 0
            for c in range(n_classes):
                lc = left[k, s, c, b]
                rc = left[k, s, c, n_bins - 1] - lc
                n_left += lc
                sq_left += lc * lc
                sq_right += rc * rc
            n_right = n_total - n_left
            if n_left >= min_leaf and n_right >= min_leaf:
                score = float(sq_left) / float(n_left) + float(sq_right) / float(n_right)
                if best_b < 0 or score > best:
                    best, best_b = score, b
        score_out[k, s], bin_out[k, s] = best, best_b


@cuda.jit
def node_best_kernel(left, score, bins, slot_out, bin_out, left_out, found_out):
    k = cuda.grid(1)
    if k < score.shape[0]:
        best_s = -1
        for s in range(score.shape[1]):
            if bins[k, s] >= 0 and (best_s < 0 or score[k, s] > score[k, best_s]):
                best_s = s
        found_out[k] = best_s >= 0
        slot_out[k] = max(best_s, 0)
        b = bins[k, best_s] if best_s >= 0 else 0
        bin_out[k] = b
        for c in range(left.shape[2]):
            left_out[k, c] = left[k, max(best_s, 0), c, b]


@cuda.jit
def route_kernel(xbin, rows, node, feature, threshold, left_next, right_next):
    i = cuda.grid(1)
    if i < rows.shape[0]:
        k = node[i]
        if k >= 0:
            if xbin[rows[i], feature[k]] <= threshold[k]:
                node[i] = left_next[k]
            else:
                node[i] = right_next[k]


class NumbaCudaKernel(Kernel):
    name: ClassVar[str] = "numba-cuda"

    def __init__(self, device: str = "cuda") -> None:
        super().__init__(device)
        self.cuda = cuda
        #: most device memory seen in use (this GPU, all contexts) at a level's fullest moment
        self.peak_used_bytes = 0

    def _sample_memory(self) -> None:
        try:
            free, total = self.cuda.current_context().get_memory_info()
        except (AttributeError, NotImplementedError):  # the simulator has no device memory
            return
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
        slots = feats.shape[1]
        out = self.cuda.device_array((hi - lo, slots, n_classes, n_bins), np.int64)
        flat = out.reshape(out.size)
        zero_kernel[_blocks(out.size, THREADS_1D), THREADS_1D](flat)  # no host zeros to copy
        grid = (_blocks(rows.shape[0], THREADS_2D[0]), _blocks(slots, THREADS_2D[1]))
        hist_kernel[grid, THREADS_2D](xbin, y, rows, node, feats, lo, hi, out)
        return out

    def best_splits(self, hist: Any, min_leaf: int) -> tuple[Any, Any, Any, Any]:
        k, slots, n_classes, _ = hist.shape
        left = self.cuda.device_array_like(hist)
        left.copy_to_device(hist)
        cumulate_kernel[_blocks(k * slots * n_classes, THREADS_1D), THREADS_1D](left)
        score = self.cuda.device_array((k, slots), np.float64)
        bins = self.cuda.device_array((k, slots), np.int64)
        grid = (_blocks(k, THREADS_2D[0]), _blocks(slots, THREADS_2D[1]))
        slot_best_kernel[grid, THREADS_2D](left, min_leaf, score, bins)
        slot, b = self.cuda.device_array(k, np.int64), self.cuda.device_array(k, np.int64)
        left_counts = self.cuda.device_array((k, n_classes), np.int64)
        found = self.cuda.device_array(k, np.bool_)
        node_best_kernel[_blocks(k, THREADS_1D), THREADS_1D](
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
        out = self.cuda.device_array_like(node)
        out.copy_to_device(node)
        route_kernel[_blocks(rows.shape[0], THREADS_1D), THREADS_1D](
            xbin, rows, out, feature, threshold, left_next, right_next
        )
        return rows, out
