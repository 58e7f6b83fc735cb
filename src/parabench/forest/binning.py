"""Quantile binning of features: the one preprocessing step every histogram forest shares.

Usage::

    binner = Binner.fit(x_train, n_bins=64)      # per-feature quantile edges, computed once
    xbin = binner.transform(x_train)             # (n, features) uint8 bin indices
    binner.thresholds(feature, bin)              # float threshold: x <= t  <=>  bin <= b

A value's bin is the number of edges strictly below it, so "bin <= b goes left" is exactly
"x <= edges[b] goes left": a tree grown on bins predicts on raw floats with no binning.
Edges are float64 and values are compared as float64, so float32 data bins identically in
fit and predict. A feature with at most ``n_bins`` distinct values gets one bin per value
(its edges are the values themselves), so low-cardinality features lose nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MAX_BINS = 256  # bin indices are stored as uint8


@dataclass(frozen=True, kw_only=True)
class Binner:
    """Per-feature increasing edges; ``n_bins`` is the largest bin count of any feature."""

    edges: tuple[np.ndarray, ...]

    @classmethod
    def fit(cls, x: np.ndarray, n_bins: int = 64) -> Binner:
        if not 2 <= n_bins <= MAX_BINS:
            raise ValueError(f"n_bins must be in [2, {MAX_BINS}], got {n_bins}")
        quantiles = np.linspace(0.0, 1.0, n_bins + 1)[1:-1]
        edges = []
        for column in np.asarray(x, dtype=np.float64).T:
            distinct = np.unique(column)
            if len(distinct) <= n_bins:
                edges.append(distinct[:-1])  # one bin per value; the largest needs no edge
            else:
                edges.append(np.unique(np.quantile(column, quantiles)))
        return cls(edges=tuple(edges))

    @property
    def n_features(self) -> int:
        return len(self.edges)

    @property
    def n_bins(self) -> int:
        return 1 + max((len(e) for e in self.edges), default=0)

    def transform(self, x: np.ndarray) -> np.ndarray:
        x = np.asarray(x, dtype=np.float64)
        if x.ndim != 2 or x.shape[1] != self.n_features:
            raise ValueError(f"expected (n, {self.n_features}) features, got {x.shape}")
        out = np.empty(x.shape, dtype=np.uint8)
        for j, edges in enumerate(self.edges):
            out[:, j] = np.searchsorted(edges, x[:, j], side="left")
        return out

    def thresholds(self, feature: np.ndarray, bins: np.ndarray) -> np.ndarray:
        """Float thresholds of splits "bin <= bins" on ``feature`` (+inf past the last edge)."""
        table = np.full((self.n_features, self.n_bins), np.inf)
        for j, edges in enumerate(self.edges):
            table[j, : len(edges)] = edges
        return table[np.asarray(feature), np.asarray(bins)]
