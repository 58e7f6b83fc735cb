"""Seeded, learnable tabular classification data shared by the tabular workloads.

Usage::

    data = tabular_classification(n_samples=2000, n_features=20, n_classes=4, seed=0)

Built on ``sklearn.datasets.make_classification``: informative features drawn from class
clusters on hypercube vertices, so a model can really learn it and chance is ``1/n_classes``.
The held-out 20 % (or ``n_held_out`` rows) is split off with the same seed (stratified), so it
is never trained on.
The arrays are kept in :mod:`parabench.cache`: a case then starts without importing scikit-learn.
"""

from __future__ import annotations

from importlib.metadata import version

import numpy as np

from parabench.cache import cached_arrays
from parabench.workload import Dataset


def tabular_classification(
    *,
    n_samples: int,
    n_features: int,
    n_classes: int,
    seed: int,
    n_informative: int | None = None,
    test_fraction: float = 0.2,
    n_held_out: int | None = None,
    dtype: type = np.float32,
) -> Dataset:
    """``n_samples`` rows drawn by ``seed``; ``n_held_out`` of them held out (default: the
    ``test_fraction``, rounded up)."""
    held_out = n_held_out if n_held_out is not None else test_fraction
    key = {"n_samples": n_samples, "n_features": n_features, "n_classes": n_classes, "seed": seed,
           "n_informative": n_informative, "test_fraction": held_out,
           "dtype": np.dtype(dtype).str, "sklearn": version("scikit-learn"),
           "numpy": np.__version__}
    arrays = cached_arrays("tabular", key, lambda: _draw(
        n_samples=n_samples, n_features=n_features, n_classes=n_classes, seed=seed,
        n_informative=n_informative, held_out=held_out, dtype=dtype,
    ), sources=[__file__])
    return Dataset(**arrays, n_classes=n_classes)


def _draw(*, n_samples: int, n_features: int, n_classes: int, seed: int,
          n_informative: int | None, held_out: float | int, dtype: type) -> dict[str, np.ndarray]:
    from sklearn.datasets import make_classification
    from sklearn.model_selection import train_test_split

    informative = n_informative or max(2, n_features // 2)
    x, y = make_classification(
        n_samples=n_samples,
        n_features=n_features,
        n_informative=informative,
        n_redundant=min(2, n_features - informative),
        n_classes=n_classes,
        n_clusters_per_class=2,
        class_sep=1.0,
        flip_y=0.01,
        random_state=seed,
    )
    x_tr, x_te, y_tr, y_te = train_test_split(
        x.astype(dtype), y.astype(np.int64), test_size=held_out, random_state=seed, stratify=y
    )
    return {"x_train": np.ascontiguousarray(x_tr), "y_train": y_tr,
            "x_test": np.ascontiguousarray(x_te), "y_test": y_te}
