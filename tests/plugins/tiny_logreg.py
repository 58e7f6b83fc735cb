"""A whole workload in one file: softmax regression on seeded synthetic data.

The recipe for a new workload (see docs/architecture.md): subclass ``TorchWorkload`` (or
``EstimatorWorkload``), give it a ``name``, ``make_data`` and ``build_model``, and register it.
Loaded through ``PARABENCH_PLUGINS=tiny_logreg`` with this folder on ``PYTHONPATH``;
``tests/workloads/test_workload_recipe.py`` trains it with the real ``parabench run``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

import numpy as np

from parabench.registry import workloads
from parabench.workload import Dataset, TorchWorkload

if TYPE_CHECKING:
    import torch

#: profile -> (samples, features, classes)
SIZES = {"tiny": (1_024, 8, 3), "quick": (8_192, 16, 4), "full": (65_536, 32, 4)}


@workloads.register
class TinyLogReg(TorchWorkload):
    name: ClassVar[str] = "tiny_logreg"
    description: ClassVar[str] = "softmax regression, seeded synthetic blobs (test plugin)"

    def make_data(self, profile: str, seed: int, data_dir: str | None = None) -> Dataset:
        samples, features, classes = SIZES[profile]
        rng = np.random.default_rng(seed)
        centers = rng.normal(scale=3.0, size=(classes, features))
        y = rng.integers(0, classes, size=samples)
        x = (centers[y] + rng.normal(size=(samples, features))).astype(np.float32)
        cut = samples * 4 // 5
        return Dataset(x_train=x[:cut], y_train=y[:cut], x_test=x[cut:], y_test=y[cut:],
                       n_classes=classes)

    def build_model(self, data: Dataset, seed: int) -> torch.nn.Module:
        import torch

        torch.manual_seed(seed)
        return torch.nn.Linear(data.x_train.shape[1], data.n_classes or 2)
