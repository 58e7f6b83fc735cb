"""``rf_torch``, ``rf_tf``, ``rf_numba``: the histogram random forest with one backend's kernel.

Usage::

    parabench run --workload random_forest --method rf_torch,rf_tf,rf_numba --device cpu
    parabench run --workload random_forest --method rf_torch,rf_numba --device cuda

Each names its kernel class (PyTorch, TensorFlow, or numba: ``njit(parallel)`` on the CPU,
``numba.cuda`` on the GPU); the session and what an epoch is are in
:mod:`parabench.forest.hist`, the algorithm in :mod:`parabench.forest`.
"""

from __future__ import annotations

from typing import ClassVar

from parabench.forest.hist import HistForestMethod
from parabench.forest.numba_kernel import NumbaKernel
from parabench.forest.tf_kernel import TfKernel
from parabench.forest.torch_kernel import TorchKernel
from parabench.registry import methods


@methods.register
class TorchForest(HistForestMethod):
    name: ClassVar[str] = "rf_torch"
    startup_guess_s: ClassVar[float | None] = 8.0
    description: ClassVar[str] = "histogram random forest, PyTorch tensor kernels (cpu/cuda)"
    requires: ClassVar[frozenset[str]] = frozenset({"torch"})
    kernel = TorchKernel


@methods.register
class TfForest(HistForestMethod):
    name: ClassVar[str] = "rf_tf"
    startup_guess_s: ClassVar[float | None] = 20.0
    description: ClassVar[str] = "histogram random forest, TensorFlow kernels (CPU; GPU if seen)"
    requires: ClassVar[frozenset[str]] = frozenset({"tf"})
    kernel = TfKernel


@methods.register
class NumbaForest(HistForestMethod):
    name: ClassVar[str] = "rf_numba"
    startup_guess_s: ClassVar[float | None] = 8.0
    description: ClassVar[str] = "histogram random forest, numba njit(parallel) / numba.cuda"
    requires: ClassVar[frozenset[str]] = frozenset({"numba"})
    kernel = NumbaKernel
