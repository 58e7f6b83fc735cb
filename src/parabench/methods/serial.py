"""``serial``: one process, one device — the baseline every parallel method is compared to.

Usage::

    parabench run --method serial --workload mlp,random_forest --device cpu

On CPU the torch thread count is set explicitly (``threads_per_worker``, default: every core)
and recorded; scikit-learn estimators get ``n_jobs=1`` and are recorded as one thread. On CUDA
the model and data live on ``cuda:0``, every clock read is preceded by a synchronise, and the
peak comes from ``torch.cuda.max_memory_allocated``.
"""

from __future__ import annotations

import time
from typing import Any, ClassVar

import psutil

from parabench.config import RunConfig
from parabench.method import EpochStats, Method, Session
from parabench.registry import methods
from parabench.workload import Dataset, EstimatorWorkload, TorchWorkload, Workload


class SerialEstimatorSession(Session):
    workload: EstimatorWorkload

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
        t0 = time.perf_counter()
        est.fit(self.data.x_train, self.data.y_train)
        seconds = time.perf_counter() - t0
        self.estimator = est
        loss = self.workload.train_loss(est, self.data)
        return EpochStats(seconds=seconds, loss=loss, samples=self.samples_per_epoch)

    def evaluate(self) -> float:
        assert self.data is not None and self.estimator is not None, "train first"
        return self.workload.score(self.estimator, self.data.x_test, self.data.y_test)


class SerialTorchSession(Session):
    workload: TorchWorkload

    def start(self) -> None:
        import torch

        from parabench.torch_loop import TorchLoop

        torch.set_num_threads(self.threads_per_worker)
        self.device = torch.device("cuda:0" if self.config.device == "cuda" else "cpu")
        data = self.workload.dataset(self.config)
        self.samples_per_epoch = self.workload.samples_per_epoch(data)
        x, y, self.x_test, self.y_test = (t.to(self.device) for t in self.workload.tensors(data))
        torch.manual_seed(self.config.seed)
        model = self.workload.build_model(data, self.config.seed).to(self.device)
        loss_fn = self.workload.loss_fn()
        self.batch_size = self._resolve_batch_size(model, loss_fn, x, y)
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
        self.loop = TorchLoop(
            model,
            self.workload.make_optimizer(model.parameters()),
            loss_fn,
            x,
            y,
            batch_size=self.batch_size,
            device=self.device,
            seed=self.config.seed,
        )

    def _resolve_batch_size(self, model: Any, loss_fn: Any, x: Any, y: Any) -> int:
        from parabench.torch_loop import auto_batch_size

        if self.config.batch_size is None:
            return self.workload.default_batch_size(self.config.profile) or 64
        if self.config.batch_size != "auto":
            return int(self.config.batch_size)
        # CPU: half of what is available now, shared fairly between workers
        budget = psutil.virtual_memory().available * 0.5 / self.config.workers
        if self.device.type == "cuda":
            import torch

            free, _total = torch.cuda.mem_get_info(self.device)
            budget = free * 0.8
        chosen = auto_batch_size(model, loss_fn, x, y, budget_bytes=budget, limit=len(x))
        self.notes["batch_size_auto_budget_mb"] = round(budget / 2**20, 1)
        return chosen

    def train_epoch(self, epoch: int) -> EpochStats:
        return self.loop.train_epoch(epoch)

    def evaluate(self) -> float:
        from parabench.torch_loop import predict

        return self.workload.score(predict(self.loop.model, self.x_test), self.y_test)

    def peak_gpu_mb(self) -> float | None:
        if self.config.device != "cuda":
            return None
        import torch

        return torch.cuda.max_memory_allocated(self.device) / 2**20


@methods.register
class Serial(Method):
    name: ClassVar[str] = "serial"
    description: ClassVar[str] = "one process on one device: the baseline"
    devices: ClassVar[tuple[str, ...]] = ("cpu", "cuda")
    families: ClassVar[frozenset[str]] = frozenset({"torch", "estimator"})
    max_workers: ClassVar[int | None] = 1
    parity: ClassVar[str] = "baseline"

    def devices_for(self, workload: Workload) -> tuple[str, ...]:
        # scikit-learn estimators have no CUDA path; only torch workloads move to the GPU
        return self.devices if isinstance(workload, TorchWorkload) else ("cpu",)

    def session(self, workload: Workload, config: RunConfig) -> Session:
        if isinstance(workload, TorchWorkload):
            return SerialTorchSession(workload, config)
        if isinstance(workload, EstimatorWorkload):
            return SerialEstimatorSession(workload, config)
        raise TypeError(f"serial cannot train {type(workload).__name__}")
