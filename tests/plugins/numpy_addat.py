"""Test plugin: a histogram-forest kernel (and its method) added in one file.

Loaded through ``PARABENCH_PLUGINS=numpy_addat`` with this folder on ``PYTHONPATH``::

    PYTHONPATH=tests/plugins PARABENCH_PLUGINS=numpy_addat \\
        parabench run --workload random_forest --method numpy_addat --profile tiny

The kernel is NumPy's reference with the histogram counted by ``np.add.at`` instead of
``np.bincount``: other code, the same integer counts, so the very same forest.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from parabench.forest import NumpyKernel, register_kernel
from parabench.forest.hist import HistForestMethod
from parabench.registry import methods


@register_kernel
class NumpyAddAtKernel(NumpyKernel):
    name: ClassVar[str] = "numpy_addat"

    def histograms(
        self, xbin: np.ndarray, y: np.ndarray, rows: np.ndarray, node: np.ndarray,
        feats: np.ndarray, lo: int, hi: int, n_bins: int, n_classes: int,
        n_nodes: int | None = None,
    ) -> np.ndarray:
        keep = (node >= lo) & (node < hi)
        rows, k = rows[keep], node[keep] - lo
        hist = np.zeros((hi - lo, feats.shape[1], n_classes, n_bins), np.int64)
        for slot in range(feats.shape[1]):
            np.add.at(hist[:, slot], (k, y[rows], xbin[rows, feats[k, slot]]), 1)
        return hist


@methods.register
class NumpyAddAtForest(HistForestMethod):
    name: ClassVar[str] = "numpy_addat"
    description: ClassVar[str] = "test plugin: histogram random forest, np.add.at histograms"
    devices: ClassVar[tuple[str, ...]] = ("cpu",)
    kernel = NumpyAddAtKernel
