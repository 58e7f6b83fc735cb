"""The shared shape of the forest methods: :class:`ForestSession` and :class:`ForestMethod`.

Usage (a forest method is a session class and a declaration; see ``methods/forest_*.py``)::

    class MySession(ForestSession):
        def start_engine(self) -> None: ...          # pools, clusters, ranks: start-up
        def fit(self, data: Dataset) -> Any: ...     # a fresh fitted forest: the timed region

    @methods.register
    class Mine(ForestMethod):
        name = "mine"
        session_class = MySession

One epoch is one ``fit``, timed by the harness's clock (``self.clock``); ``evaluate`` records
the predict time (``notes["predict_s"]``) and a digest of the held-out predictions
(``facts.predictions_sha``) so runs can be compared for identity.
"""

from __future__ import annotations

import dataclasses
import hashlib
from abc import abstractmethod
from contextlib import AbstractContextManager
from typing import Any, ClassVar

import numpy as np

from parabench.config import RunConfig
from parabench.core.clock import Stopwatch
from parabench.method import EpochStats, Method, Session
from parabench.workload import Dataset, EstimatorWorkload, Workload


def predictions_sha(predictions: Any) -> str:
    """A short digest of predicted labels: equal digests mean identical predictions."""
    return hashlib.sha256(np.ascontiguousarray(predictions).tobytes()).hexdigest()[:16]


class ForestSession(Session):
    """One epoch = one timed fit of the workload's estimator; subclasses say how to fit."""

    workload: EstimatorWorkload
    window_unit: ClassVar[str] = "fit"

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
        self.notes.update(self.data.origin or {})  # built, or from the sweep's cache
        self.samples_per_epoch = self.workload.samples_per_epoch(self.data)
        self.start_engine()

    def start_engine(self) -> None:  # noqa: B027 - optional: threads need nothing started
        """Start the engine (pools, clusters, ranks) once; timed as part of start-up."""

    @abstractmethod
    def fit(self, data: Dataset) -> Any:
        """Fit a fresh forest on the training data and return it (the timed region)."""

    def fit_in(self, backend: AbstractContextManager[Any], data: Dataset) -> Any:
        """Fit a fresh workload estimator with ``n_jobs`` under a joblib backend context."""
        est = self.workload.build_estimator(self.config.profile, self.config.training_seed,
                                            self.n_jobs)
        with backend:
            est.fit(data.x_train, data.y_train)
        return est

    @property
    def n_jobs(self) -> int:
        return self.config.workers

    def train_epoch(self, epoch: int) -> EpochStats:
        data = self.data
        assert data is not None, "start() first"
        self.epoch, self.fit_components = epoch, {}
        est, seconds = self.clock.time(lambda: self.fit(data))
        self.estimator = est
        loss = self.workload.train_loss(est, data)
        return EpochStats(seconds=seconds, loss=loss, samples=self.samples_per_epoch,
                          components=dict(self.fit_components))

    def evaluate(self) -> float:
        assert self.data is not None and self.estimator is not None, "train first"
        watch = Stopwatch()  # a note, not a measured window: the harness times the fits
        score = self.workload.score(self.estimator, self.data.x_test, self.data.y_test)
        self.notes["predict_s"] = watch.seconds()
        self.facts = dataclasses.replace(self.facts, predictions_sha=predictions_sha(
            self.estimator.predict(self.data.x_test)))
        return score


class ForestMethod(Method):
    """Base of the scikit-learn forest methods: estimator workloads, exact parity.

    Exact here means seed-exact: every tree gets serial's ``random_state`` stream, so the
    held-out predictions digest must equal serial's and the quality gap be exactly 0
    (:func:`parabench.analysis.parity.exact_evidence`). Checked at tiny through the CLI on
    2026-11-23: rf_threads, rf_processes, rf_dask, rf_dask+threads and rf_mpi (then named
    without the prefix) all give serial's digest. A
    method that cannot (Spark's own forest) declares ``parity = "statistical"`` and says why.
    """

    families: ClassVar[frozenset[str]] = frozenset({"estimator"})
    requires: ClassVar[frozenset[str]] = frozenset({"sklearn"})
    parity: ClassVar[str] = "exact"
    session_class: ClassVar[type[ForestSession]]

    def session(self, workload: Workload, config: RunConfig) -> Session:
        if not isinstance(workload, EstimatorWorkload):
            raise TypeError(f"{self.name} cannot train {type(workload).__name__}")
        return self.session_class(workload, config)
