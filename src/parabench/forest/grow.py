"""The histogram random forest: one tree-growing algorithm, any kernel.

Usage::

    params = ForestParams.from_sklearn(workload.build_estimator(profile, seed, n_jobs=1))
    model = HistForestClassifier(params, make_kernel("torch", "cpu")).fit(x, y)   # or "cuda"
    model.predict_proba(x_test)           # sklearn-style: predict, predict_proba, classes_
    data = Prepared.from_data(x, y, params.n_bins)          # binning: once per fit
    part = grow_trees(make_kernel("numpy"), data, params, range(0, 2))  # some trees (hybrids)

The algorithm, identical for every backend:

* features are binned once per fit into ``n_bins`` quantile bins (:class:`Binner`);
* tree ``t`` draws everything from its own ``numpy`` generator seeded ``[seed, t]``: its
  bootstrap sample (``n`` rows with replacement, as sklearn), then, level by level, ``mtry``
  features without replacement for each of its frontier nodes (``max_features="sqrt"`` gives
  ``int(sqrt(features))``, as sklearn). So a tree does not depend on which other trees are
  grown beside it, on the batch size, or on the worker that grows it;
* trees grow breadth-first, a batch of trees at a time: per level the kernel builds class
  histograms for every (frontier node, sampled feature, bin) and picks each node's best Gini
  split; the host records the splits and decides which children stay in the frontier;
* a node stops splitting at ``max_depth``, below ``min_samples_split`` rows, when pure, or
  when no sampled feature has a valid split (every split leaves < ``min_samples_leaf``).

``max_depth=None`` (sklearn's default: grow until the leaves are pure) becomes
``DEFAULT_MAX_DEPTH`` = 48, only a bound against pathological inputs: on the quick profile
the trees are 24 levels deep on average and 30 at most. ``DEFAULT_BINS`` = 32: on the quick
profile 32 bins were as close to sklearn's accuracy as 64 (means over five seeds 0.8351 and
0.8329, serial 0.8361) for half the histogram work. One kernel call histograms at most
``max_cells`` cells (the frontier is processed in chunks of nodes), which bounds memory.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from parabench.forest.binning import Binner
from parabench.forest.kernel import Kernel
from parabench.forest.trees import Forest

DEFAULT_MAX_DEPTH = 48
DEFAULT_BINS = 32
ROWS_PER_BATCH = 1 << 22  # bootstrap rows grown together (trees per batch = this // n)


@dataclass(frozen=True, kw_only=True)
class ForestParams:
    """What to grow; the names and meanings are sklearn's RandomForestClassifier's."""

    n_estimators: int = 100
    max_features: str | int | float | None = "sqrt"
    bootstrap: bool = True
    max_depth: int = DEFAULT_MAX_DEPTH
    min_samples_split: int = 2
    min_samples_leaf: int = 1
    n_bins: int = DEFAULT_BINS
    seed: int = 0
    max_cells: int = 1 << 23

    @classmethod
    def from_sklearn(cls, estimator: Any, **overrides: Any) -> ForestParams:
        """The parameters of a sklearn RandomForestClassifier, so both forests match."""
        p = estimator.get_params()
        for name, default in (("max_leaf_nodes", None), ("min_weight_fraction_leaf", 0.0),
                              ("class_weight", None), ("max_samples", None)):
            if p.get(name, default) != default:
                raise ValueError(f"the histogram forest does not implement {name}={p[name]!r}")
        for name in ("min_samples_split", "min_samples_leaf"):
            if not isinstance(p[name], int):
                raise ValueError(f"{name} must be an integer count, got {p[name]!r}")
        return cls(**{
            "n_estimators": p["n_estimators"], "max_features": p["max_features"],
            "bootstrap": p["bootstrap"],
            "max_depth": p["max_depth"] if p["max_depth"] is not None else DEFAULT_MAX_DEPTH,
            "min_samples_split": p["min_samples_split"],
            "min_samples_leaf": p["min_samples_leaf"], "seed": p["random_state"] or 0,
        } | overrides)

    def mtry(self, n_features: int) -> int:
        m = self.max_features
        if m in ("sqrt", "auto"):
            k = int(math.sqrt(n_features))
        elif m == "log2":
            k = int(math.log2(n_features))
        elif m is None:
            k = n_features
        elif isinstance(m, float):
            k = int(m * n_features)
        else:
            k = int(m)
        return min(n_features, max(1, k))


class _Nodes:
    """Growable node table of one batch of trees (ids in creation order)."""

    def __init__(self, n_classes: int, capacity: int = 1024) -> None:
        self.size = 0
        self.tree = np.empty(capacity, np.int64)
        self.feature = np.full(capacity, -1, np.int32)
        self.bin = np.zeros(capacity, np.int32)
        self.left = np.full(capacity, -1, np.int64)
        self.right = np.full(capacity, -1, np.int64)
        self.counts = np.empty((capacity, n_classes), np.int64)

    def add(self, tree: np.ndarray, counts: np.ndarray) -> np.ndarray:
        need = self.size + len(tree)
        if need > len(self.tree):
            cap = max(need, 2 * len(self.tree))
            for name in ("tree", "feature", "bin", "left", "right", "counts"):
                old = getattr(self, name)
                fill = -1 if name in ("feature", "left", "right") else 0
                new = np.full((cap, *old.shape[1:]), fill, old.dtype)
                new[: self.size] = old[: self.size]
                setattr(self, name, new)
        ids = np.arange(self.size, need)
        self.tree[ids], self.counts[ids] = tree, counts
        self.size = need
        return ids


def _splittable(counts: np.ndarray, depth: int, params: ForestParams) -> np.ndarray:
    n = counts.sum(axis=1)
    return (
        (depth < params.max_depth)
        & (n >= max(params.min_samples_split, 2 * params.min_samples_leaf))
        & ((counts > 0).sum(axis=1) > 1)
    )


def _chunks(k: int, per_node: int, max_cells: int) -> Iterator[tuple[int, int]]:
    step = max(1, max_cells // per_node)
    for lo in range(0, k, step):
        yield lo, min(k, lo + step)


def grow_batch(
    kernel: Kernel, xdev: Any, ydev: Any, y: np.ndarray, n_features: int, n_bins: int,
    n_classes: int, params: ForestParams, tree_ids: list[int],
) -> _Nodes:
    """Grow the trees ``tree_ids`` together; rows and histograms stay on the kernel's device."""
    n, mtry = len(y), params.mtry(n_features)
    rngs = [np.random.default_rng([params.seed, t]) for t in tree_ids]
    samples = [r.integers(0, n, n) if params.bootstrap else np.arange(n) for r in rngs]
    nodes = _Nodes(n_classes)
    frontier = nodes.add(np.arange(len(tree_ids)),
                         np.stack([np.bincount(y[s], minlength=n_classes) for s in samples]))
    frontier = frontier[_splittable(nodes.counts[frontier], 0, params)]
    position = np.full(len(tree_ids), -1)
    position[frontier] = np.arange(len(frontier))
    node_host = np.repeat(position, n)
    keep = node_host >= 0
    rows = kernel.put(np.concatenate(samples)[keep])
    node = kernel.put(node_host[keep])
    depth, per_node = 0, mtry * n_bins * n_classes
    while len(frontier):
        feats = _sample_features(rngs, nodes.tree[frontier], n_features, mtry)
        parts = []
        for lo, hi in _chunks(len(frontier), per_node, params.max_cells):
            hist = kernel.histograms(xdev, ydev, rows, node, kernel.put(feats[lo:hi]), lo, hi,
                                     n_bins, n_classes, n_nodes=len(frontier))
            parts.append([kernel.get(a) for a in kernel.best_splits(hist,
                                                                    params.min_samples_leaf)])
        slot, bins, left_counts, found = (np.concatenate(p) for p in zip(*parts, strict=True))
        feature = feats[np.arange(len(frontier)), slot]
        frontier, left_next, right_next = _record_level(
            nodes, frontier, feature, bins, left_counts, found.astype(bool), depth + 1, params)
        rows, node = kernel.route(xdev, rows, node, kernel.put(feature), kernel.put(bins),
                                  kernel.put(left_next), kernel.put(right_next))
        depth += 1
    return nodes


def _sample_features(
    rngs: list[np.random.Generator], tree: np.ndarray, n_features: int, mtry: int
) -> np.ndarray:
    """(K, mtry) features per frontier node, each tree drawing from its own generator."""
    feats = np.empty((len(tree), mtry), np.int64)
    starts = np.flatnonzero(np.r_[True, tree[1:] != tree[:-1]])
    for lo, hi in zip(starts, np.r_[starts[1:], len(tree)], strict=True):
        draws = rngs[tree[lo]].random((hi - lo, n_features))
        if mtry < n_features:  # the mtry smallest draws: a uniform subset, in a fixed order
            feats[lo:hi] = np.argpartition(draws, mtry - 1, axis=1)[:, :mtry]
        else:
            feats[lo:hi] = np.argsort(draws, axis=1)
    return feats


def _record_level(
    nodes: _Nodes, frontier: np.ndarray, feature: np.ndarray, bins: np.ndarray,
    left_counts: np.ndarray, found: np.ndarray, depth: int, params: ForestParams,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Store the level's splits, add the children; the next frontier and row destinations."""
    parents = frontier[found]
    nodes.feature[parents], nodes.bin[parents] = feature[found], bins[found]
    right_counts = nodes.counts[parents] - left_counts[found]
    left_ids = nodes.add(nodes.tree[parents], left_counts[found])
    right_ids = nodes.add(nodes.tree[parents], right_counts)
    nodes.left[parents], nodes.right[parents] = left_ids, right_ids
    children = np.concatenate([left_ids, right_ids])
    children = children[_splittable(nodes.counts[children], depth, params)]
    # tree-major, then creation order: each tree sees its own nodes in a fixed order
    children = children[np.argsort(nodes.tree[children], kind="stable")]
    position = np.full(nodes.size, -1)
    position[children] = np.arange(len(children))
    left_next = np.full(len(frontier), -1)
    right_next = np.full(len(frontier), -1)
    left_next[found], right_next[found] = position[left_ids], position[right_ids]
    return children, left_next, right_next


def to_forest(nodes: _Nodes, tree_ids: list[int], binner: Binner, classes: np.ndarray) -> Forest:
    """The batch's node table renumbered tree-major (each tree's nodes in creation order)."""
    order = np.argsort(nodes.tree[: nodes.size], kind="stable")
    new_id = np.empty(nodes.size, np.int64)
    new_id[order] = np.arange(nodes.size)
    sizes = np.bincount(nodes.tree[: nodes.size], minlength=len(tree_ids))

    def renumber(a: np.ndarray) -> np.ndarray:
        a = a[: nodes.size][order]
        return np.where(a >= 0, new_id[np.maximum(a, 0)], -1)

    feature, bins = nodes.feature[: nodes.size][order], nodes.bin[: nodes.size][order]
    threshold = np.where(feature >= 0, binner.thresholds(np.maximum(feature, 0), bins), np.nan)
    return Forest(
        tree_ids=np.asarray(tree_ids, np.int64), offsets=np.r_[0, np.cumsum(sizes)],
        feature=feature, bin=bins, threshold=threshold, left=renumber(nodes.left),
        right=renumber(nodes.right), counts=nodes.counts[: nodes.size][order], classes_=classes,
    )


@dataclass(frozen=True, kw_only=True, eq=False)
class Prepared:
    """Training data as every tree of one fit sees it: binned, labels as 0..C-1."""

    binner: Binner
    xbin: np.ndarray  # (n, features) uint8
    y: np.ndarray  # (n,) int64 class index
    classes: np.ndarray

    @classmethod
    def from_data(cls, x: np.ndarray, y: np.ndarray, n_bins: int) -> Prepared:
        classes, y_enc = np.unique(y, return_inverse=True)
        binner = Binner.fit(x, n_bins)
        return cls(binner=binner, xbin=binner.transform(x), y=y_enc.astype(np.int64),
                   classes=classes)


def grow_trees(kernel: Kernel, data: Prepared, params: ForestParams, tree_ids: Iterable[int]
         ) -> Forest:
    """The trees ``tree_ids`` of the forest ``params`` describes, grown with ``kernel``."""
    ids = list(tree_ids)
    xdev, ydev = kernel.put(data.xbin), kernel.put(data.y)
    per_batch = max(1, ROWS_PER_BATCH // max(1, len(data.y)))
    forests = []
    for i in range(0, len(ids), per_batch):
        batch = ids[i : i + per_batch]
        nodes = grow_batch(kernel, xdev, ydev, data.y, data.xbin.shape[1], data.binner.n_bins,
                           len(data.classes), params, batch)
        forests.append(to_forest(nodes, batch, data.binner, data.classes))
    kernel.synchronize()
    return forests[0] if len(forests) == 1 else Forest.concat(forests)


class HistForestClassifier:
    """sklearn-style estimator: :meth:`Prepared.from_data` then :func:`grow_trees`, one kernel."""

    def __init__(self, params: ForestParams, kernel: Kernel) -> None:
        self.params = params
        self.kernel = kernel
        self.forest: Forest | None = None

    @property
    def classes_(self) -> np.ndarray:
        assert self.forest is not None, "fit first"
        return self.forest.classes_

    def fit(self, x: np.ndarray, y: np.ndarray, tree_ids: Iterable[int] | None = None
            ) -> HistForestClassifier:
        ids = range(self.params.n_estimators) if tree_ids is None else tree_ids
        data = Prepared.from_data(x, y, self.params.n_bins)
        self.forest = grow_trees(self.kernel, data, self.params, ids)
        return self

    def predict_proba(self, x: np.ndarray) -> np.ndarray:
        assert self.forest is not None, "fit first"
        return self.forest.predict_proba(x)

    def predict(self, x: np.ndarray) -> np.ndarray:
        assert self.forest is not None, "fit first"
        return self.forest.predict(x)

