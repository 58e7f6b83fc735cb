"""Histogram random forests: one tree-growing algorithm, with pluggable per-level kernels.

Usage::

    from parabench.forest import ForestParams, HistForestClassifier, make_kernel

    params = ForestParams.from_sklearn(sklearn_forest)           # same trees/features/depth
    model = HistForestClassifier(params, make_kernel("numba")).fit(x, y)
    accuracy = (model.predict(x_test) == y_test).mean()

Kernels: ``numpy`` (reference), ``torch`` (cpu/cuda), ``tf`` (cpu/gpu), ``numba`` (CPU,
``@njit(parallel=True)``) and ``numba-cuda``. A :class:`Forest` (what :func:`grow_trees` returns)
predicts like a fitted sklearn forest (``predict``, ``predict_proba``, ``classes_``). See
:mod:`parabench.forest.grow` for the algorithm, :mod:`parabench.forest.kernel` for the
kernel contract, :mod:`parabench.forest.kernels` for the names.

The package also holds the forest methods' sessions (``methods/forest_*.py`` only declare
them): :mod:`~parabench.forest.session` (the scikit-learn forests' base) with the joblib,
Dask, MPI and Spark sessions; :mod:`~parabench.forest.hist` and :mod:`~parabench.forest.hybrid`
(histogram forests on one kernel, or split over threads and Dask workers);
:mod:`~parabench.forest.peers` (XGBoost, LightGBM, cuML). Worker-side programs:
:mod:`~parabench.forest.mpi_rank` (MPI ranks) and :mod:`~parabench.forest.hybrid_worker`
(a Dask worker's task).
"""

from parabench.forest.binning import Binner
from parabench.forest.grow import (
    DEFAULT_BINS,
    DEFAULT_MAX_DEPTH,
    ForestParams,
    HistForestClassifier,
    Prepared,
    grow_trees,
)
from parabench.forest.kernel import Kernel, NumpyKernel
from parabench.forest.kernels import KERNELS, make_kernel, register_kernel
from parabench.forest.trees import Forest

__all__ = [
    "DEFAULT_BINS", "DEFAULT_MAX_DEPTH", "KERNELS", "Binner", "Forest", "ForestParams",
    "HistForestClassifier", "Kernel", "NumpyKernel", "Prepared", "grow_trees", "make_kernel",
    "register_kernel",
]
