"""The histogram-forest methods' session and base: one kernel class grows the whole forest.

Usage (a method names its kernel class; see :mod:`parabench.methods.forest_hist`)::

    from parabench.forest.torch_kernel import TorchKernel

    @methods.register
    class TorchForest(HistForestMethod):
        name = "my_torch"                  # as methods/forest_hist.py's "rf_torch"
        requires = frozenset({"torch"})
        kernel = TorchKernel

All grow the same forest (:mod:`parabench.forest`): the sklearn workload's parameters
(trees, ``max_features``, bootstrap, min samples; ``max_depth`` None -> the forest's
``DEFAULT_MAX_DEPTH``), features binned into ``DEFAULT_BINS`` quantile bins, and per-level
histogram / Gini split kernels. With the same seed every kernel grows identical trees, so
they differ only in speed. It is not sklearn's exact-split algorithm, so parity with
``serial`` is statistical.

One process. On CPU the kernel's thread pool gets ``workers x threads_per_worker`` threads
(the whole fair budget; each epoch is one fit). Start-up loads the data, sets the threads and
fits a two-tree forest on a slice of the data, so JIT compilation (numba), the CUDA context
and TensorFlow's runtime are paid there, not in the first epoch. An epoch bins the features
and grows every tree, timed by the harness's clock; on CUDA the device is synchronised before
the clock is read.
"""

from __future__ import annotations

import functools
from dataclasses import replace
from typing import Any, ClassVar

from parabench.config import RunConfig
from parabench.core.clock import Spans
from parabench.forest.grow import ForestParams, Prepared, grow_trees
from parabench.forest.kernel import Kernel
from parabench.forest.trees import Forest
from parabench.method import EpochStats, Method, Session
from parabench.workload import Dataset, EstimatorWorkload, Workload

WARMUP_ROWS = 256


@functools.cache
def is_random_forest(workload_name: str) -> bool:
    from sklearn.ensemble import RandomForestClassifier

    from parabench.registry import workloads

    workload = workloads.get(workload_name)
    if not isinstance(workload, EstimatorWorkload):
        return False
    return isinstance(workload.build_estimator("tiny", 0, 1), RandomForestClassifier)


def forest_params(workload: EstimatorWorkload, config: RunConfig) -> ForestParams:
    est = workload.build_estimator(config.profile, config.training_seed, n_jobs=1)
    return ForestParams.from_sklearn(est, seed=config.training_seed)


def warm_up_prepared(kernel: Kernel, prepared: Prepared, params: ForestParams) -> None:
    """Fit two trees: compiles, initialises, allocates once."""
    grow_trees(kernel, prepared, replace(params, n_estimators=2), range(2))


def warm_up(kernel: Kernel, data: Dataset, params: ForestParams) -> None:
    """The kernel's own warm-up, then two trees on a slice of the data."""
    if hasattr(kernel, "warm_up"):
        kernel.warm_up()
    rows = min(WARMUP_ROWS, data.n_train)
    warm_up_prepared(kernel, Prepared.from_data(data.x_train[:rows], data.y_train[:rows],
                                                params.n_bins), params)


class HistForestSession(Session):
    workload: EstimatorWorkload
    window_unit: ClassVar[str] = "fit"

    def __init__(self, workload: EstimatorWorkload, config: RunConfig,
                 backend: type[Kernel]) -> None:
        super().__init__(workload, config)
        self.backend = backend
        self.data: Dataset | None = None
        self.model: Any = None

    def start(self) -> None:
        self.data = self.workload.dataset(self.config)
        self.notes.update(self.data.origin or {})  # built, or from the sweep's cache
        self.samples_per_epoch = self.workload.samples_per_epoch(self.data)
        self.params = forest_params(self.workload, self.config)
        self.start_engine(self.data)

    def start_engine(self, data: Dataset) -> None:
        """Threads, kernel(s), warm-up: start-up after the data are loaded."""
        threads = self.backend.set_threads(self.config.workers * self.config.threads)
        self.threads_per_worker = max(1, threads // self.config.workers)
        kernel_class = self.backend.for_device(self.config.device)
        self.kernel = kernel_class(kernel_class.place(self.config.device))
        warm_up(self.kernel, data, self.params)
        self.kernel.reset_peak()
        self.notes.update(backend_threads=threads, kernel=self.kernel.name,
                          n_bins=self.params.n_bins, max_depth=self.params.max_depth)

    def train_epoch(self, epoch: int) -> EpochStats:
        data = self.data
        assert data is not None, "start() first"
        spans = Spans()

        def fit() -> Any:
            with spans("binning"):
                prepared = Prepared.from_data(data.x_train, data.y_train, self.params.n_bins)
            return self.grow(prepared)

        self.model, seconds = self.clock.time(fit)
        binning = spans.seconds()["binning"]
        loss = self.workload.train_loss(self.model, data)
        return EpochStats(seconds=seconds, loss=loss, samples=self.samples_per_epoch,
                          components={"binning": binning, **self.components(seconds - binning)})

    def grow(self, prepared: Prepared) -> Forest:
        """Every tree of the forest from the binned data (synchronised: the device is idle)."""
        return grow_trees(self.kernel, prepared, self.params, range(self.params.n_estimators))

    def components(self, after_binning: float) -> dict[str, float]:
        """The epoch's seconds after binning, by part."""
        return {"grow": after_binning}

    def evaluate(self) -> float:
        assert self.data is not None and self.model is not None, "train first"
        return self.workload.score(self.model, self.data.x_test, self.data.y_test)

    def peak_gpu_mb(self) -> float | None:
        return self.kernel.peak_gpu_mb() if self.config.device == "cuda" else None


class HistForestMethod(Method):
    """Base of the histogram-forest methods: one kernel class, random-forest workloads only."""

    #: the backend's kernel class (it sets threads, picks its device kind, keeps the GPU peak)
    kernel: ClassVar[type[Kernel]]
    session_class: ClassVar[type[HistForestSession]] = HistForestSession
    devices: ClassVar[tuple[str, ...]] = ("cpu", "cuda")
    families: ClassVar[frozenset[str]] = frozenset({"estimator"})
    parity: ClassVar[str] = "statistical"

    def supports(self, workload: Workload) -> bool:
        return super().supports(workload) and is_random_forest(workload.name)

    def unavailable(self, device: str = "cpu") -> str | None:
        if (reason := super().unavailable(device)) is not None:
            return reason
        return self.kernel.unavailable(device)

    def session(self, workload: Workload, config: RunConfig) -> Session:
        assert isinstance(workload, EstimatorWorkload)
        return self.session_class(workload, config, self.kernel)
