"""The histogram-forest kernel as raw TensorFlow ops (CPU, or the GPU when TF sees one).

Usage::

    kernel = TfKernel("cpu")              # "cuda": /GPU:0, an error if TF sees no GPU
    model = HistForestClassifier(params, kernel).fit(x, y)

Eager ops only (``tf.math.bincount`` over flat (node, slot, class, bin) indices, cumulative
sums, float64 Gini scores, an explicit first-maximum): the shapes change every level, so a
``tf.function`` would retrace each time. No Keras is involved.
"""

from __future__ import annotations

import os
from typing import Any, ClassVar

import numpy as np

from parabench.forest.kernel import Kernel


def import_tf() -> Any:
    """TensorFlow with its C++ start-up chatter silenced (unless the user asked for it)."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    return tf


def tf_gpu_reason() -> str | None:
    """None when TensorFlow sees a GPU, else why not."""
    tf = import_tf()
    if not tf.config.list_physical_devices("GPU"):
        return (f"TensorFlow {tf.__version__} sees no GPU (a CPU-only build, or no CUDA "
                "libraries for it); pip install 'tensorflow[and-cuda]'")
    return None


class TfKernel(Kernel):
    name: ClassVar[str] = "tf"

    def __init__(self, device: str = "cpu") -> None:
        super().__init__(device)
        self.tf = import_tf()
        if device == "cuda" and (reason := tf_gpu_reason()) is not None:
            raise RuntimeError(reason)
        self.tf_device = "/GPU:0" if device == "cuda" else "/CPU:0"

    @classmethod
    def set_threads(cls, threads: int) -> int:
        tf = import_tf()
        try:  # only possible before TF's runtime starts (a fresh case process)
            tf.config.threading.set_intra_op_parallelism_threads(threads)
            tf.config.threading.set_inter_op_parallelism_threads(threads)
        except RuntimeError:
            pass
        return tf.config.threading.get_intra_op_parallelism_threads() or threads

    @classmethod
    def unavailable(cls, device: str) -> str | None:
        return tf_gpu_reason() if device == "cuda" else None

    def reset_peak(self) -> None:
        if self.device == "cuda":
            self.tf.config.experimental.reset_memory_stats("GPU:0")

    def peak_gpu_mb(self) -> float | None:
        if self.device != "cuda":
            return None
        return self.tf.config.experimental.get_memory_info("GPU:0")["peak"] / 2**20

    def put(self, a: np.ndarray) -> Any:
        with self.tf.device(self.tf_device):
            return self.tf.identity(self.tf.constant(np.ascontiguousarray(a)))

    def get(self, a: Any) -> np.ndarray:
        return a.numpy()

    def synchronize(self) -> None:
        # .numpy() on a small result waits for every op queued before it on the device
        if self.device == "cuda":
            with self.tf.device(self.tf_device):
                self.tf.constant(0).numpy()

    def histograms(
        self, xbin: Any, y: Any, rows: Any, node: Any, feats: Any,
        lo: int, hi: int, n_bins: int, n_classes: int, n_nodes: int | None = None,
    ) -> Any:
        tf = self.tf
        with tf.device(self.tf_device):
            k_nodes, slots = hi - lo, int(feats.shape[1])
            if lo != 0 or hi != n_nodes:
                keep = (node >= lo) & (node < hi)
                rows, node = tf.boolean_mask(rows, keep), tf.boolean_mask(node, keep)
            k = node - lo
            n_features = tf.cast(tf.shape(xbin)[1], tf.int64)
            cols = tf.gather(feats, k)  # (m, slots)
            flat = tf.reshape(xbin, [-1])
            b = tf.cast(tf.gather(flat, rows[:, None] * n_features + cols), tf.int64)
            arange = tf.range(slots, dtype=tf.int64)
            idx = ((k[:, None] * slots + arange) * n_classes + tf.gather(y, rows)[:, None])
            idx = idx * n_bins + b
            size = k_nodes * slots * n_classes * n_bins
            # int32 values (size <= max_cells): the input type every bincount kernel takes
            flat_idx = tf.cast(tf.reshape(idx, [-1]), tf.int32)
            hist = tf.math.bincount(flat_idx, minlength=size, maxlength=size, dtype=tf.int64)
            return tf.reshape(hist, [k_nodes, slots, n_classes, n_bins])

    def best_splits(self, hist: Any, min_leaf: int) -> tuple[Any, Any, Any, Any]:
        tf = self.tf
        with tf.device(self.tf_device):
            k, slots, _, n_bins = (int(d) for d in hist.shape)
            # float64 holds every count, square and sum exactly (all < 2**53), as in the torch
            # kernel; sum_c (t_c - l_c)^2 = sum t^2 - 2 t.l + sum l^2 skips the right counts
            left = tf.math.cumsum(tf.cast(hist, tf.float64), axis=3)
            n_left = tf.reduce_sum(left, axis=2)
            sq_left = tf.reduce_sum(left * left, axis=2)
            cross = tf.reduce_sum(left * left[:, :, :, -1:], axis=2)
            sq_right = sq_left[:, :, -1:] - 2 * cross + sq_left
            n_right = n_left[:, :, -1:] - n_left
            valid = (n_left >= min_leaf) & (n_right >= min_leaf)
            score = sq_left / tf.maximum(n_left, 1) + sq_right / tf.maximum(n_right, 1)
            score = tf.where(valid, score, tf.constant(-np.inf, tf.float64))
            flat = tf.reshape(score, [k, slots * n_bins])
            top = tf.reduce_max(flat, axis=1, keepdims=True)
            index = tf.broadcast_to(tf.range(slots * n_bins, dtype=tf.int64), tf.shape(flat))
            past_end = tf.constant(slots * n_bins, tf.int64)
            best = tf.reduce_min(tf.where(flat == top, index, past_end), axis=1)
            found = tf.reduce_any(tf.reshape(valid, [k, -1]), axis=1)
            slot, b = best // n_bins, best % n_bins
            picked = tf.stack([tf.range(k, dtype=tf.int64), slot], axis=1)
            per_class = tf.gather_nd(left, picked)  # (k, classes, bins)
            left_counts = tf.cast(tf.gather(per_class, b, axis=2, batch_dims=1), tf.int64)
            return slot, b, left_counts, found

    def route(
        self, xbin: Any, rows: Any, node: Any, feature: Any, threshold: Any,
        left_next: Any, right_next: Any,
    ) -> tuple[Any, Any]:
        tf = self.tf
        with tf.device(self.tf_device):
            n_features = tf.cast(tf.shape(xbin)[1], tf.int64)
            flat = tf.reshape(xbin, [-1])
            b = tf.cast(tf.gather(flat, rows * n_features + tf.gather(feature, node)), tf.int64)
            go_left = b <= tf.gather(threshold, node)
            nxt = tf.where(go_left, tf.gather(left_next, node), tf.gather(right_next, node))
            keep = nxt >= 0
            return tf.boolean_mask(rows, keep), tf.boolean_mask(nxt, keep)
