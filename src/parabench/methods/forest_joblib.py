"""``rf_threads`` and ``rf_processes``: scikit-learn's own forest parallelism through joblib.

Usage::

    parabench run --workload random_forest --method rf_threads,rf_processes --workers 2

The sessions are in :mod:`parabench.forest.joblib_sessions`; the shared forest shape in
:mod:`parabench.forest.session`.
"""

from __future__ import annotations

from typing import ClassVar

from parabench.forest.joblib_sessions import ProcessesSession, ThreadsSession
from parabench.forest.session import ForestMethod
from parabench.registry import methods


@methods.register
class Threads(ForestMethod):
    name: ClassVar[str] = "rf_threads"
    startup_guess_s: ClassVar[float | None] = 2.0
    coverage_rank: ClassVar[int | None] = 1
    description: ClassVar[str] = "scikit-learn n_jobs=workers on joblib's threading backend"
    session_class = ThreadsSession


@methods.register
class Processes(ForestMethod):
    name: ClassVar[str] = "rf_processes"
    startup_guess_s: ClassVar[float | None] = 6.0
    description: ClassVar[str] = "scikit-learn n_jobs=workers on joblib's loky process pool"
    session_class = ProcessesSession
