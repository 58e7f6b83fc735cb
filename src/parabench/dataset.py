"""A workload's data: a seeded train / held-out split, plain arrays.

Usage::

    import numpy as np
    from parabench.dataset import Dataset      # also importable from parabench.workload

    x, y = np.zeros((8, 2), np.float32), np.zeros(8, np.int64)
    data = Dataset(x_train=x, y_train=y, x_test=x, y_test=y, n_classes=2)
    data.n_train                               # 8

Its own module, below :mod:`parabench.workload` and :mod:`parabench.workloads.datacache`, so
the cache that stores and loads datasets does not import the workload base that uses it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass(frozen=True, kw_only=True)
class Dataset:
    """A seeded train / held-out split. The held-out part is never trained on."""

    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    n_classes: int | None = None
    #: the profile the data was made for, where the model is sized by it too (vgg11 and
    #: densenet121 are narrower at tiny); None: the model depends on the data alone
    profile: str | None = None
    #: where the arrays came from, for the case's notes: ``data_source`` (built, sweep cache,
    #: data dir) and ``data_s``, the seconds it took (:mod:`parabench.workloads.datacache`)
    origin: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def n_train(self) -> int:
        return len(self.x_train)
