"""``rf_dask`` and ``rf_dask+threads``: a scikit-learn forest grown on a Dask cluster.

Usage::

    parabench run --workload random_forest --method rf_dask,rf_dask+threads --workers 2
    parabench run --workload random_forest --method rf_dask --dask-scheduler tcp://10.0.0.5:8786

``rf_dask`` hands the trees to joblib's Dask backend as tasks; ``rf_dask+threads`` gives each worker
one share of the trees, grown there with threads. The sessions are in
:mod:`parabench.forest.dask_sessions`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from parabench.config import OptionSpec
from parabench.engines.dask_cluster import DASK_SCHEDULER
from parabench.forest.dask_sessions import DaskJoblibSession, DaskThreadsSession
from parabench.forest.session import ForestMethod
from parabench.registry import methods


class _DaskMethod(ForestMethod):
    requires: ClassVar[frozenset[str]] = frozenset({"sklearn", "dask"})
    options: ClassVar[Mapping[str, OptionSpec]] = {"dask_scheduler": DASK_SCHEDULER}


@methods.register
class Dask(_DaskMethod):
    name: ClassVar[str] = "rf_dask"
    startup_guess_s: ClassVar[float | None] = 12.0
    description: ClassVar[str] = "trees as tasks on a Dask cluster (joblib's dask backend)"
    session_class = DaskJoblibSession


@methods.register
class DaskThreads(_DaskMethod):
    name: ClassVar[str] = "rf_dask+threads"
    startup_guess_s: ClassVar[float | None] = 12.0
    description: ClassVar[str] = "one share of the trees per Dask worker, grown with threads"
    session_class = DaskThreadsSession
