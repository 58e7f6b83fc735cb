"""Seed-exact pieces of a scikit-learn forest: grow trees ``[lo, hi)`` alone, then merge.

Usage::

    from parabench.forest.split import grow_slice, merge, slices

    parts = [grow_slice(workload.build_estimator(profile, seed, n_jobs=1), x, y, lo, hi)
             for lo, hi in slices(n_trees, parts=4)]      # anywhere: threads, Dask, MPI ranks
    forest = merge(parts)      # predicts exactly like the same estimator fitted in one piece

Why this is exact: ``BaseForest.fit`` seeds tree *i* with the *i*-th draw of
``check_random_state(random_state).randint(MAX_INT)`` (``_make_estimator`` ->
``_set_random_states``), and each tree draws its bootstrap sample from its own seed. With
``warm_start=True`` and ``lo`` trees already present, ``fit`` first discards ``lo`` draws ("to
get the random state we would have got if we hadn't used a warm_start") and then grows trees
``lo .. hi-1`` with exactly the seeds a one-piece fit gives them. So a slice is: ``lo``
placeholder trees, ``warm_start``, ``n_estimators=hi``, fit, keep ``estimators_[lo:]``. This
relies on scikit-learn's documented warm-start contract; the tests compare a merged forest's
predictions with a one-piece fit, so a change in scikit-learn shows up as a failure.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np


def slices(n_trees: int, parts: int) -> list[tuple[int, int]]:
    """Contiguous ``[lo, hi)`` tree ranges, as even as possible; empty ranges are dropped."""
    if parts < 1:
        raise ValueError(f"parts must be >= 1, got {parts}")
    bounds = np.linspace(0, n_trees, parts + 1).round().astype(int)
    return [(int(lo), int(hi)) for lo, hi in zip(bounds[:-1], bounds[1:], strict=True) if hi > lo]


def grow_slice(estimator: Any, x: np.ndarray, y: np.ndarray, lo: int, hi: int) -> Any:
    """Fit trees ``lo .. hi-1`` of ``estimator``'s forest; the result holds only those trees."""
    if not isinstance(estimator.random_state, int | np.integer):
        raise ValueError(
            "a forest can only be split seed-exactly with an integer random_state, "
            f"got {estimator.random_state!r}"
        )
    if not 0 <= lo < hi <= estimator.n_estimators:
        raise ValueError(f"tree range [{lo}, {hi}) outside 0..{estimator.n_estimators}")
    part = copy.deepcopy(estimator)
    part.set_params(warm_start=True, n_estimators=hi)
    # placeholders: fit only counts them (to skip their seeds); they are never used
    part.estimators_ = [None] * lo
    part.fit(x, y)
    part.estimators_ = part.estimators_[lo:]
    part.set_params(warm_start=estimator.warm_start, n_estimators=hi - lo)
    return part


def merge(parts: list[Any]) -> Any:
    """One forest from slices in tree order (the first part's fitted attributes are kept)."""
    if not parts:
        raise ValueError("no forest parts to merge")
    forest = copy.copy(parts[0])
    forest.estimators_ = [tree for part in parts for tree in part.estimators_]
    forest.set_params(n_estimators=len(forest.estimators_))
    return forest
