"""Torch histogram-forest hybrids: ``rf_threads+torch``, ``rf_torch+dask``,
``rf_dask+threads+torch``.

Usage::

    parabench run --workload random_forest --method rf_threads+torch,rf_torch+dask --workers 2
    parabench run --workload random_forest --method rf_dask+threads+torch --workers 2 \\
        --threads 2 --dask-scheduler tcp://10.0.0.5:8786

The trees are split into blocks over threads, Dask workers, or both, each block grown by a
torch kernel; the sessions are in :mod:`parabench.forest.hybrid`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from parabench.config import OptionSpec
from parabench.engines.dask_cluster import DASK_SCHEDULER
from parabench.forest.hist import HistForestMethod
from parabench.forest.hybrid import DaskThreadsTorchSession, ThreadsTorchSession, TorchDaskSession
from parabench.forest.torch_kernel import TorchKernel
from parabench.registry import methods


class _TorchHybrid(HistForestMethod):
    requires: ClassVar[frozenset[str]] = frozenset({"torch", "dask"})
    options: ClassVar[Mapping[str, OptionSpec]] = {"dask_scheduler": DASK_SCHEDULER}
    kernel = TorchKernel


@methods.register
class ThreadsTorchForest(_TorchHybrid):
    name: ClassVar[str] = "rf_threads+torch"
    startup_guess_s: ClassVar[float | None] = 10.0
    description: ClassVar[str] = "torch histogram forest, trees split over threads (streams)"
    requires: ClassVar[frozenset[str]] = frozenset({"torch"})
    options: ClassVar[Mapping[str, OptionSpec]] = {}
    session_class = ThreadsTorchSession


@methods.register
class TorchDaskForest(_TorchHybrid):
    name: ClassVar[str] = "rf_torch+dask"
    startup_guess_s: ClassVar[float | None] = 20.0
    description: ClassVar[str] = "torch histogram forest, trees split over Dask workers"
    session_class = TorchDaskSession


@methods.register
class DaskThreadsTorchForest(_TorchHybrid):
    name: ClassVar[str] = "rf_dask+threads+torch"
    startup_guess_s: ClassVar[float | None] = 14.0
    description: ClassVar[str] = "torch histogram forest: Dask workers x threads per worker"
    session_class = DaskThreadsTorchSession
