"""The ``@njit(parallel=True)`` loops of :class:`~parabench.forest.numba_kernel.NumbaKernel`.

Usage::

    from parabench.forest import numba_loops as loops   # imports numba, compiles lazily
    loops.hist_kernel(xbin, y, rows, node, feats, lo, hi, out)

Kept apart from the kernel class so that naming the class (``KERNELS``) does not import
numba; see :mod:`parabench.forest.numba_kernel` for what each loop does.
"""


from __future__ import annotations

import numpy as np
from numba import njit, prange


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


