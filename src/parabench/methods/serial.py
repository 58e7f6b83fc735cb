"""``serial``: one process, one device — the baseline every parallel method is compared to.

Usage::

    parabench run --method serial --workload mlp,random_forest --device cpu

On CPU the torch thread count is set explicitly (``threads_per_worker``, default: every core)
and recorded; scikit-learn estimators get ``n_jobs=1`` and are recorded as one thread. On CUDA
the model and data live on ``cuda:0``, every clock read is preceded by a synchronise, and the
peak comes from ``torch.cuda.max_memory_allocated``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from parabench.config import OptionSpec, RunConfig
from parabench.forest.session import predictions_sha
from parabench.method import EpochStats, Method, Session
from parabench.registry import methods
from parabench.torch.local import SerialTorchSession
from parabench.torch.options import TORCH_OPTIONS
from parabench.workload import Dataset, EstimatorWorkload, TorchWorkload, Workload


class SerialEstimatorSession(Session):
    workload: EstimatorWorkload
    window_unit: ClassVar[str] = "fit"

    def __init__(self, workload: EstimatorWorkload, config: RunConfig) -> None:
        super().__init__(workload, config)
        self.threads_per_worker = 1  # n_jobs=1: tree building uses one thread
        self.data: Dataset | None = None
        self.estimator: Any = None

    def start(self) -> None:
        self.data = self.workload.dataset(self.config)
        self.samples_per_epoch = self.workload.samples_per_epoch(self.data)

    def train_epoch(self, epoch: int) -> EpochStats:
        assert self.data is not None, "start() first"
        est = self.workload.build_estimator(self.config.profile, self.config.seed, n_jobs=1)
        data = self.data
        _, seconds = self.clock.time(lambda: est.fit(data.x_train, data.y_train))
        self.estimator = est
        loss = self.workload.train_loss(est, self.data)
        return EpochStats(seconds=seconds, loss=loss, samples=self.samples_per_epoch)

    def evaluate(self) -> float:
        assert self.data is not None and self.estimator is not None, "train first"
        # the seed-exact forest methods' parity compares their predictions digest with this
        self.notes["predictions_sha"] = predictions_sha(self.estimator.predict(self.data.x_test))
        return self.workload.score(self.estimator, self.data.x_test, self.data.y_test)


@methods.register
class Serial(Method):
    name: ClassVar[str] = "serial"
    startup_guess_s: ClassVar[float | None] = 5.0
    description: ClassVar[str] = "one process on one device: the baseline"
    devices: ClassVar[tuple[str, ...]] = ("cpu", "cuda")
    families: ClassVar[frozenset[str]] = frozenset({"torch", "estimator"})
    max_workers: ClassVar[int | None] = 1
    parity: ClassVar[str] = "baseline"
    options: ClassVar[Mapping[str, OptionSpec]] = TORCH_OPTIONS

    def devices_for(self, workload: Workload) -> tuple[str, ...]:
        # scikit-learn estimators have no CUDA path; only torch workloads move to the GPU
        return self.devices if isinstance(workload, TorchWorkload) else ("cpu",)

    def session(self, workload: Workload, config: RunConfig) -> Session:
        if isinstance(workload, TorchWorkload):
            return SerialTorchSession(workload, config)
        if isinstance(workload, EstimatorWorkload):
            return SerialEstimatorSession(workload, config)
        raise TypeError(f"serial cannot train {type(workload).__name__}")
