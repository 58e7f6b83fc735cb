"""``threads`` and ``processes``: scikit-learn's own forest parallelism through joblib.

Usage::

    parabench run --workload random_forest --method threads,processes --workers 2

``threads`` fits with joblib's threading backend and ``n_jobs = workers`` (tree building
releases the GIL); ``processes`` with the loky backend, whose worker processes are started
once in ``start()`` and reused by every fit (loky's reusable executor), and shut down in
``close()``. Both give predictions identical to ``serial`` for the same ``random_state``:
every tree's seed is drawn in ``fit`` before any work is dispatched.

:class:`ForestSession` is the shared shape of the forest methods (also used by
:mod:`parabench.methods.forest_dask`, ``forest_mpi`` and ``forest_spark``): one epoch is one
timed ``fit`` (:meth:`ForestSession.fit`), start-up is :meth:`ForestSession.start_engine`,
and ``evaluate`` records the predict time (``notes["predict_s"]``) and a digest of the
held-out predictions (``notes["predictions_sha"]``) so runs can be compared for identity.
"""

from __future__ import annotations

import hashlib
import time
from abc import abstractmethod
from contextlib import AbstractContextManager
from typing import Any, ClassVar

import numpy as np
import psutil

from parabench.config import RunConfig
from parabench.method import EpochStats, Method, Session
from parabench.registry import methods
from parabench.workload import Dataset, EstimatorWorkload, Workload


def predictions_sha(predictions: Any) -> str:
    """A short digest of predicted labels: equal digests mean identical predictions."""
    return hashlib.sha256(np.ascontiguousarray(predictions).tobytes()).hexdigest()[:16]


class ForestSession(Session):
    """One epoch = one timed fit of the workload's estimator; subclasses say how to fit."""

    workload: EstimatorWorkload

    def __init__(self, workload: EstimatorWorkload, config: RunConfig) -> None:
        super().__init__(workload, config)
        self.threads_per_worker = 1  # a tree is grown by one thread
        self.data: Dataset | None = None
        self.estimator: Any = None
        self.epoch = 0
        #: seconds of parts of the current fit, when the engine can tell (EpochStats.components)
        self.fit_components: dict[str, float] = {}

    def start(self) -> None:
        self.data = self.workload.dataset(self.config)
        self.samples_per_epoch = self.workload.samples_per_epoch(self.data)
        self.start_engine()

    def start_engine(self) -> None:  # noqa: B027 - optional: threads need nothing started
        """Start the engine (pools, clusters, ranks) once; timed as part of start-up."""

    @abstractmethod
    def fit(self, data: Dataset) -> Any:
        """Fit a fresh forest on the training data and return it (the timed region)."""

    def fit_in(self, backend: AbstractContextManager[Any], data: Dataset) -> Any:
        """Fit a fresh workload estimator with ``n_jobs`` under a joblib backend context."""
        est = self.workload.build_estimator(self.config.profile, self.config.seed, self.n_jobs)
        with backend:
            est.fit(data.x_train, data.y_train)
        return est

    @property
    def n_jobs(self) -> int:
        return self.config.workers

    def train_epoch(self, epoch: int) -> EpochStats:
        assert self.data is not None, "start() first"
        self.epoch, self.fit_components = epoch, {}
        t0 = time.perf_counter()
        est = self.fit(self.data)
        seconds = time.perf_counter() - t0
        self.estimator = est
        loss = self.workload.train_loss(est, self.data)
        return EpochStats(seconds=seconds, loss=loss, samples=self.samples_per_epoch,
                          components=dict(self.fit_components))

    def evaluate(self) -> float:
        assert self.data is not None and self.estimator is not None, "train first"
        t0 = time.perf_counter()
        score = self.workload.score(self.estimator, self.data.x_test, self.data.y_test)
        self.notes["predict_s"] = time.perf_counter() - t0
        self.notes["predictions_sha"] = predictions_sha(self.estimator.predict(self.data.x_test))
        return score


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
        self.worker_pids = {pid: psutil.Process(pid).create_time() for pid in set(pids)}
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
    import os

    import sklearn.ensemble  # noqa: F401

    time.sleep(seconds)
    return os.getpid()


def _alive(pid: int, created: float) -> bool:
    try:
        proc = psutil.Process(pid)
        return proc.create_time() == created and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


class _ForestMethod(Method):
    families: ClassVar[frozenset[str]] = frozenset({"estimator"})
    requires: ClassVar[frozenset[str]] = frozenset({"sklearn"})
    parity: ClassVar[str] = "exact"
    session_class: ClassVar[type[ForestSession]]

    def session(self, workload: Workload, config: RunConfig) -> Session:
        if not isinstance(workload, EstimatorWorkload):
            raise TypeError(f"{self.name} cannot train {type(workload).__name__}")
        return self.session_class(workload, config)


@methods.register
class Threads(_ForestMethod):
    name: ClassVar[str] = "threads"
    description: ClassVar[str] = "scikit-learn n_jobs=workers on joblib's threading backend"
    session_class = ThreadsSession


@methods.register
class Processes(_ForestMethod):
    name: ClassVar[str] = "processes"
    description: ClassVar[str] = "scikit-learn n_jobs=workers on joblib's loky process pool"
    session_class = ProcessesSession
