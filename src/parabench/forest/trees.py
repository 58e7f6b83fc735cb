"""A grown histogram forest as flat arrays, and how it predicts.

Usage::

    forest.predict_proba(x)          # mean of the leaf class distributions (like sklearn)
    forest.predict(x)                # classes_[argmax]
    forest.tree(i)                   # the i-th tree's arrays, node ids local to the tree
    Forest.concat([part_a, part_b])  # trees grown apart (threads, Dask workers), in tree order

Nodes of all trees sit in one table, tree after tree, each tree's nodes in the order they were
grown (level by level); ``offsets[i]`` is tree i's root. ``left``/``right`` index the table
(-1: a leaf). ``feature``/``bin`` are the split ("bin <= b goes left"), ``threshold`` the same
split on raw feature values. ``counts`` are the class counts of the (bootstrap) rows that
reached the node; ``value`` is their distribution.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

PREDICT_CHUNK = 4096  # rows per step: bounds the (rows x trees x classes) temporary


@dataclass(frozen=True, kw_only=True, eq=False)
class Forest:
    tree_ids: np.ndarray  # (T,) global tree index (its seed stream)
    offsets: np.ndarray  # (T + 1,) first node of each tree
    feature: np.ndarray  # (N,) int32, -1 at leaves
    bin: np.ndarray  # (N,) int32
    threshold: np.ndarray  # (N,) float64
    left: np.ndarray  # (N,) int64, -1 at leaves
    right: np.ndarray  # (N,) int64
    counts: np.ndarray  # (N, C) int64
    classes_: np.ndarray = field(default_factory=lambda: np.empty(0))

    @property
    def n_trees(self) -> int:
        return len(self.tree_ids)

    @property
    def n_nodes(self) -> int:
        return len(self.feature)

    @property
    def value(self) -> np.ndarray:
        totals = self.counts.sum(axis=1, keepdims=True)
        return self.counts / np.maximum(totals, 1)

    def tree(self, i: int) -> dict[str, np.ndarray]:
        """Tree ``i`` with node ids local to it (comparable across forests)."""
        lo, hi = self.offsets[i], self.offsets[i + 1]

        def local(a: np.ndarray) -> np.ndarray:
            return np.where(a[lo:hi] >= 0, a[lo:hi] - lo, -1)

        return {
            "feature": self.feature[lo:hi], "bin": self.bin[lo:hi],
            "left": local(self.left), "right": local(self.right), "counts": self.counts[lo:hi],
        }

    def apply(self, x: np.ndarray) -> np.ndarray:
        """(n, T) leaf index reached by each row in each tree."""
        x = np.asarray(x, dtype=np.float64)
        nodes = np.broadcast_to(self.offsets[:-1], (len(x), self.n_trees)).copy()
        row = np.arange(len(x))[:, None]
        while True:
            inner = self.left[nodes] >= 0
            if not inner.any():
                return nodes
            go_left = x[row, np.maximum(self.feature[nodes], 0)] <= self.threshold[nodes]
            child = np.where(go_left, self.left[nodes], self.right[nodes])
            nodes = np.where(inner, child, nodes)

    def predict_proba(self, x: np.ndarray) -> np.ndarray:
        value = self.value
        parts = [
            value[self.apply(x[i : i + PREDICT_CHUNK])].mean(axis=1)
            for i in range(0, len(x), PREDICT_CHUNK)
        ]
        return np.concatenate(parts) if parts else np.empty((0, self.counts.shape[1]))

    def predict(self, x: np.ndarray) -> np.ndarray:
        return self.classes_[np.argmax(self.predict_proba(x), axis=1)]

    @classmethod
    def concat(cls, parts: Sequence[Forest]) -> Forest:
        """One forest from parts holding disjoint trees, ordered by tree id."""
        if not parts:
            raise ValueError("no forests to concatenate")
        pieces: list[tuple[int, Forest, int]] = [
            (int(p.tree_ids[i]), p, i) for p in parts for i in range(p.n_trees)
        ]
        pieces.sort(key=lambda item: item[0])
        ids = [tid for tid, _, _ in pieces]
        if len(set(ids)) != len(ids):
            raise ValueError("forests to concatenate share tree ids")
        arrays: dict[str, list[np.ndarray]] = {k: [] for k in ("feature", "bin", "threshold",
                                                              "left", "right", "counts")}
        offsets = [0]
        for _, part, i in pieces:
            lo, hi = part.offsets[i], part.offsets[i + 1]
            shift = offsets[-1] - lo
            for name, out in arrays.items():
                a = getattr(part, name)[lo:hi]
                out.append(np.where(a >= 0, a + shift, -1) if name in ("left", "right") else a)
            offsets.append(offsets[-1] + (hi - lo))
        joined: dict[str, Any] = {k: np.concatenate(v) for k, v in arrays.items()}
        return cls(tree_ids=np.asarray(ids, dtype=np.int64), offsets=np.asarray(offsets),
                   classes_=parts[0].classes_, **joined)
