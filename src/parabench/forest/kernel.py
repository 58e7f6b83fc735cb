"""The pluggable per-level kernel of the histogram forest, and its NumPy reference.

Usage::

    kernel = make_kernel("torch", device="cpu")        # or "cuda"; or "numpy", "tf", "numba"
    TorchKernel.set_threads(4)                          # the backend's CPU thread pool
    kernel.reset_peak(); ...; kernel.peak_gpu_mb()      # None on the CPU
    xb, y = kernel.put(xbin), kernel.put(y)             # (n, features) uint8, (n,) int64
    hist = kernel.histograms(xb, y, rows, node, kernel.put(feats), 0, k, n_bins, n_classes)
    slot, bin_, left, found = kernel.best_splits(hist, min_leaf=1)
    rows, node = kernel.route(xb, rows, node, feature, bin_, left_next, right_next)

One level of tree growth is these three calls; :mod:`parabench.forest.grow` drives them and
keeps the trees. Arrays live wherever the backend keeps them (``put`` / ``get`` move them).

``rows`` are indices into the training rows (a bootstrap sample repeats a row), ``node`` the
frontier position each row sits in. ``histograms`` counts, for the frontier nodes
``lo <= k < hi``, the rows per (node, sampled feature slot, class, bin): ``feats[k - lo, s]``
is the feature of slot ``s`` of node ``k``; rows of other nodes (or ``node < 0``) are ignored.
``n_nodes`` (optional) is the frontier size: when ``lo == 0`` and ``hi == n_nodes`` every row
belongs to the call and a backend may skip filtering.
Bins are the innermost axis so the cumulative sums over bins and the sums over classes run
on contiguous rows.

``best_splits`` scores every threshold "bin <= b goes left" by the weighted Gini impurity of
the two sides, which up to constants is ``-(sum_c l_c^2 / n_l + sum_c r_c^2 / n_r)``. The
score is computed as exactly those IEEE float64 operations (integer sums of squares, two
correctly rounded divisions, one addition) in every backend, and ties go to the first
(slot, bin) in row-major order, so all backends pick bit-identical splits. A split leaving
fewer than ``min_leaf`` rows on a side is invalid; a node with no valid split is not found.

``route`` sends each row of a found node to ``left_next[k]`` or ``right_next[k]`` (the next
frontier position, or -1 when that child is a leaf) by ``xbin[row, feature[k]] <= bin[k]``;
rows of nodes that were not found get -1. Backends may drop -1 rows or keep them.

A backend is one :class:`Kernel` subclass in one file that owns everything backend-specific
a method needs (``set_threads``, ``for_device``, ``place``, ``unavailable``, the GPU peak) and
imports its engine only when instantiated; :mod:`parabench.forest.kernels` names them.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from contextlib import AbstractContextManager, nullcontext
from typing import Any, ClassVar

import numpy as np


class Kernel(ABC):
    """One backend's implementation of the per-level operations."""

    name: ClassVar[str]

    def __init__(self, device: str = "cpu") -> None:
        self.device = device

    @classmethod
    def set_threads(cls, threads: int) -> int:
        """Give the backend's CPU thread pool ``threads`` threads; returns what it really has
        (a single-threaded backend has one)."""
        return 1

    @classmethod
    def for_device(cls, device: str) -> type[Kernel]:
        """The kernel class that runs this backend on ``device`` (numba's CUDA one is apart)."""
        return cls

    @classmethod
    def place(cls, device: str, index: int = 0) -> str:
        """The device of a case's ``index``-th kernel on ``device`` ("cpu" or "cuda")."""
        return device

    @classmethod
    def unavailable(cls, device: str) -> str | None:
        """Why this backend cannot run on ``device`` here, beyond its package being installed."""
        return None

    @property
    def device_key(self) -> str:
        """Which device this kernel runs on, fully named (kernels on one device share it)."""
        return self.device

    def on_stream(self) -> AbstractContextManager[None]:
        """Run the block's kernels on this kernel's own device stream (host: nothing to do)."""
        return nullcontext()

    def reset_peak(self) -> None:  # noqa: B027 - host backends keep no GPU peak
        """Forget the GPU memory peak so far (called after warm-up)."""

    def peak_gpu_mb(self) -> float | None:
        """Peak GPU memory since :meth:`reset_peak`, in MiB; None on the host."""
        return None

    @abstractmethod
    def put(self, a: np.ndarray) -> Any:
        """Host array -> backend array (a copy on the backend's device)."""

    @abstractmethod
    def get(self, a: Any) -> np.ndarray:
        """Backend array -> host NumPy array."""

    def synchronize(self) -> None:  # noqa: B027 - host backends have nothing to wait for
        """Wait for queued device work (called before a clock is read)."""

    @abstractmethod
    def histograms(
        self, xbin: Any, y: Any, rows: Any, node: Any, feats: Any,
        lo: int, hi: int, n_bins: int, n_classes: int, n_nodes: int | None = None,
    ) -> Any:
        """(hi - lo, slots, n_classes, n_bins) int64 counts; see the module docstring."""

    @abstractmethod
    def best_splits(self, hist: Any, min_leaf: int) -> tuple[Any, Any, Any, Any]:
        """Per node: best slot, best bin, left class counts (K, C) and found (bool)."""

    @abstractmethod
    def route(
        self, xbin: Any, rows: Any, node: Any, feature: Any, threshold: Any,
        left_next: Any, right_next: Any,
    ) -> tuple[Any, Any]:
        """New (rows, node) after the level's splits; see the module docstring."""


class NumpyKernel(Kernel):
    """The reference: ``np.bincount`` histograms and vectorised split scoring, on the host."""

    name: ClassVar[str] = "numpy"

    def __init__(self, device: str = "cpu") -> None:
        if device != "cpu":
            raise ValueError(f"the numpy kernel runs on cpu, not {device}")
        super().__init__(device)

    def put(self, a: np.ndarray) -> np.ndarray:
        return np.array(a, copy=True)

    def get(self, a: np.ndarray) -> np.ndarray:
        return np.asarray(a)

    def histograms(
        self, xbin: np.ndarray, y: np.ndarray, rows: np.ndarray, node: np.ndarray,
        feats: np.ndarray, lo: int, hi: int, n_bins: int, n_classes: int,
        n_nodes: int | None = None,
    ) -> np.ndarray:
        slots = feats.shape[1]
        if lo != 0 or hi != n_nodes:
            keep = (node >= lo) & (node < hi)
            rows, node = rows[keep], node[keep]
        k = node - lo
        b = xbin[rows[:, None], feats[k]].astype(np.int64)  # (m, slots)
        idx = ((k[:, None] * slots + np.arange(slots)) * n_classes + y[rows][:, None]) * n_bins
        idx += b
        size = (hi - lo) * slots * n_classes * n_bins
        hist = np.bincount(idx.ravel(), minlength=size)
        return hist.reshape(hi - lo, slots, n_classes, n_bins)

    def best_splits(
        self, hist: np.ndarray, min_leaf: int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        k, slots, _, n_bins = hist.shape
        left = np.cumsum(hist, axis=3)
        right = left[:, :, :, -1:] - left
        n_left, n_right = left.sum(axis=2), right.sum(axis=2)
        sq_left, sq_right = (left * left).sum(axis=2), (right * right).sum(axis=2)
        valid = (n_left >= min_leaf) & (n_right >= min_leaf)
        score = sq_left / np.maximum(n_left, 1) + sq_right / np.maximum(n_right, 1)
        flat = np.where(valid, score, -np.inf).reshape(k, slots * n_bins)
        best = np.argmax(flat, axis=1)  # the first of equal maxima
        found = valid.reshape(k, -1).any(axis=1)
        slot, b = np.divmod(best, n_bins)
        return slot, b, left[np.arange(k), slot, :, b], found

    def route(
        self, xbin: np.ndarray, rows: np.ndarray, node: np.ndarray, feature: np.ndarray,
        threshold: np.ndarray, left_next: np.ndarray, right_next: np.ndarray,
    ) -> tuple[np.ndarray, np.ndarray]:
        go_left = xbin[rows, feature[node]] <= threshold[node]
        nxt = np.where(go_left, left_next[node], right_next[node])
        keep = nxt >= 0
        return rows[keep], nxt[keep]
