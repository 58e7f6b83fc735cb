"""The ``numba.cuda`` kernels of :class:`~parabench.forest.numba_cuda_kernel.NumbaCudaKernel`.

Usage::

    from parabench.forest import numba_cuda_loops as lp   # imports numba.cuda
    lp.hist_kernel[grid, lp.THREADS_2D](xbin, y, rows, node, feats, lo, hi, out)

Kept apart from the kernel class so that naming the class (``KERNELS``) does not import
numba; see :mod:`parabench.forest.numba_cuda_kernel` for what each kernel does.
"""


from __future__ import annotations

import math

import numpy as np

# numba-cuda 0.30.x registers a CUDA overload of ``np.row_stack`` on first kernel launch, and
# numpy 2.5 removed that alias of ``np.vstack``: every launch then raises AttributeError
# (NVIDIA/numba-cuda#907, which its maintainers will not fix). Restoring the alias, exactly
# what numpy < 2.5 had, lets the kernels launch; nothing here calls it.
if not hasattr(np, "row_stack"):
    np.row_stack = np.vstack

from numba import cuda  # noqa: E402  (after the alias above)

THREADS_1D = 256
THREADS_2D = (64, 4)


def blocks(n: int, per: int) -> int:
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


