"""The sessions of ``rf_threads`` and ``rf_processes``: scikit-learn's forest through joblib.

Usage (declared in :mod:`parabench.methods.forest_joblib`)::

    session = ProcessesSession(workload, config)   # loky workers start in start(), once

``ThreadsSession`` fits with joblib's threading backend and ``n_jobs = workers`` (tree
building releases the GIL); ``ProcessesSession`` with the loky backend, whose worker processes
are started once in ``start()`` and reused by every fit (loky's reusable executor), and shut
down in ``close()``. A loky worker that dies between fits fails the case. With one worker
joblib runs the fit in the case's own process (``n_jobs=1``): there is no worker process.
Both give predictions
identical to ``serial`` for the same ``random_state``: every tree's seed is drawn in ``fit``
before any work is dispatched.
"""

from __future__ import annotations

import os
import time
from contextlib import AbstractContextManager
from typing import Any

import psutil

from parabench.config import RunConfig
from parabench.forest.session import ForestSession
from parabench.workload import Dataset, EstimatorWorkload


class ThreadsSession(ForestSession):
    def fit(self, data: Dataset) -> Any:
        from joblib import parallel_config

        return self.fit_in(parallel_config(backend="threading", n_jobs=self.n_jobs), data)


class ProcessesSession(ForestSession):
    def __init__(self, workload: EstimatorWorkload, config: RunConfig) -> None:
        super().__init__(workload, config)
        self.worker_pids: dict[int, float] = {}

    def fit_context(self) -> AbstractContextManager[Any]:
        from joblib import parallel_config

        # loky retires workers idle for idle_worker_timeout (default 300 s): keep them for the
        # whole case, so that a worker gone missing is a real failure, not housekeeping
        idle_s = int(max(300.0, 2 * self.config.timeout_s))
        return parallel_config(backend="loky", n_jobs=self.n_jobs, idle_worker_timeout=idle_s)

    def start_engine(self) -> None:
        from joblib import Parallel, delayed

        # Spawn loky's reusable workers now (start-up), with the n_jobs every fit will use, and
        # import the tree code there: otherwise the first fit pays seconds of imports.
        with self.fit_context():
            pids = Parallel()(delayed(_warm_worker)(0.2) for _ in range(self.n_jobs))
        # n_jobs=1: joblib runs the tasks in this process, so there is no worker to watch (or
        # to kill in close(): that was the case killing itself, SIGKILL, after its result)
        self.worker_pids = {pid: psutil.Process(pid).create_time()
                            for pid in set(pids) - {os.getpid()}}
        self.notes["worker_pids"] = sorted(self.worker_pids)

    def fit(self, data: Dataset) -> Any:
        est = self.fit_in(self.fit_context(), data)
        self._check_workers()
        return est

    def _check_workers(self) -> None:
        """A loky worker killed between fits is silently replaced: report it as a failure."""
        dead = [pid for pid, created in self.worker_pids.items() if not _alive(pid, created)]
        if dead:
            raise RuntimeError(f"loky worker process(es) {dead} died during the case")

    def close(self) -> None:
        from joblib.externals.loky import reusable_executor

        executor = getattr(reusable_executor, "_executor", None)
        if executor is not None:
            try:
                executor.shutdown(wait=True, kill_workers=True)
            except Exception:  # noqa: BLE001 - leftovers are killed below
                pass
        for pid, created in self.worker_pids.items():
            if _alive(pid, created):
                psutil.Process(pid).kill()
        self.worker_pids = {}


def _warm_worker(seconds: float) -> int:
    """Import what a tree-building task needs; linger so that every worker gets one task."""
    import sklearn.ensemble  # noqa: F401

    time.sleep(seconds)
    return os.getpid()


def _alive(pid: int, created: float) -> bool:
    try:
        proc = psutil.Process(pid)
        return proc.create_time() == created and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False
