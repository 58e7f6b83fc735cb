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
from numba import njit, prange

from parabench.forest.kernel import Kernel


@njit(parallel=True, cache=True)
def hist_kernel(xbin, y, rows, node, feats, lo, hi, out):
    """Any row order: one task per slot, each scanning every row."""
    slots = feats.shape[1]
    for s in prange(slots):
        for i in range(rows.shape[0]):
            k = node[i]
            if k < lo or k >= hi:
                continue
            r = rows[i]
            out[k - lo, s, y[r], xbin[r, feats[k - lo, s]]] += 1


@njit(parallel=True, cache=True)
def grouped_hist_kernel(xbin, y, rows, starts, feats, out):
    """Rows grouped by node (``starts[k]:starts[k+1]``): one task per (node, slot)."""
    slots = feats.shape[1]
    for t in prange(out.shape[0] * slots):
        k, s = t // slots, t % slots
        f = feats[k, s]
        for i in range(starts[k], starts[k + 1]):
            r = rows[i]
            out[k, s, y[r], xbin[r, f]] += 1


@njit(cache=True)
def is_grouped(node):
    for i in range(1, node.shape[0]):
        if node[i] < node[i - 1]:
            return False
    return True


@njit(cache=True)
def group_rows(rows, nxt, n_nodes):
    """Stable counting sort of the rows by destination node, dropping -1 (finished) rows."""
    starts = np.zeros(n_nodes + 1, np.int64)
    for i in range(nxt.shape[0]):
        if nxt[i] >= 0:
            starts[nxt[i] + 1] += 1
    for k in range(n_nodes):
        starts[k + 1] += starts[k]
    out_rows = np.empty(starts[n_nodes], rows.dtype)
    out_node = np.empty(starts[n_nodes], np.int64)
    for i in range(nxt.shape[0]):
        k = nxt[i]
        if k >= 0:
            out_rows[starts[k]], out_node[starts[k]] = rows[i], k
            starts[k] += 1
    return out_rows, out_node


@njit(parallel=True, cache=True)
def split_kernel(hist, min_leaf, slot_out, bin_out, left_out, found_out):
    n_nodes, slots, n_classes, n_bins = hist.shape
    for k in prange(n_nodes):
        total = np.zeros(n_classes, np.int64)
        for c in range(n_classes):
            total[c] = hist[k, 0, c].sum()
        n_total = total.sum()
        cum = np.zeros(n_classes, np.int64)
        best, best_s, best_b, found = -np.inf, 0, 0, False
        for s in range(slots):
            cum[:] = 0
            n_left = 0
            for b in range(n_bins):
                sq_left = 0
                sq_right = 0
                for c in range(n_classes):
                    cum[c] += hist[k, s, c, b]
                    n_left += hist[k, s, c, b]
                    sq_left += cum[c] * cum[c]
                    rc = total[c] - cum[c]
                    sq_right += rc * rc
                n_right = n_total - n_left
                if n_left < min_leaf or n_right < min_leaf:
                    continue
                score = np.float64(sq_left) / np.float64(n_left) + np.float64(
                    sq_right
                ) / np.float64(n_right)
                if not found or score > best:
                    best, best_s, best_b, found = score, s, b, True
        slot_out[k], bin_out[k], found_out[k] = best_s, best_b, found
        for c in range(n_classes):
            left_out[k, c] = hist[k, best_s, c, : best_b + 1].sum()


@njit(parallel=True, cache=True)
def route_kernel(xbin, rows, node, feature, threshold, left_next, right_next, out):
    for i in prange(rows.shape[0]):
        k = node[i]
        if k < 0:
            out[i] = -1
        elif xbin[rows[i], feature[k]] <= threshold[k]:
            out[i] = left_next[k]
        else:
            out[i] = right_next[k]


FUNCTIONS = {"hist": hist_kernel, "split": split_kernel, "route": route_kernel}


class NumbaKernel(Kernel):
    name: ClassVar[str] = "numba"

    def __init__(self, device: str = "cpu") -> None:
        if device != "cpu":
            raise ValueError(
                f"the numba kernel runs on cpu (numba-cuda is the GPU one), not {device}"
            )
        super().__init__(device)

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
        if is_grouped(node):  # route() keeps rows grouped: each task writes one node's block
            starts = np.searchsorted(node, np.arange(lo, hi + 1))
            grouped_hist_kernel(xbin, y, rows, starts, feats, out)
        else:
            hist_kernel(xbin, y, rows, node, feats, lo, hi, out)
        return out

    def best_splits(
        self, hist: np.ndarray, min_leaf: int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        k, _, n_classes, _ = hist.shape
        slot, b = np.zeros(k, np.int64), np.zeros(k, np.int64)
        left, found = np.zeros((k, n_classes), np.int64), np.zeros(k, np.bool_)
        split_kernel(hist, min_leaf, slot, b, left, found)
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
        route_kernel(xbin, rows, node, feature, threshold, left_next, right_next, nxt)
        n_next = 1 + max(left_next.max(initial=-1), right_next.max(initial=-1))
        return group_rows(rows, nxt, n_next)
