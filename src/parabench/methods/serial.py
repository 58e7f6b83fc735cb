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

from parabench.config import RunConfig
from parabench.method import TORCH_OPTIONS, EpochStats, Method, Session
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

        from parabench.torch.build import (
            flops_per_sample,
            load_tensors,
            make_loop,
            resolve_batch_size,
            torch_device,
        )

        torch.set_num_threads(self.threads_per_worker)
        self.device = device = torch_device(self.config)
        t = load_tensors(self.workload, self.config, device)
        self.samples_per_epoch = self.workload.samples_per_epoch(t.data)
        self.x_test, self.y_test = t.x_test, t.y_test
        torch.manual_seed(self.config.seed)
        model = self.workload.build_model(t.data, self.config.seed).to(device)
        self.batch_size = resolve_batch_size(self.workload, self.config, model, t, device,
                                             self.notes)
        self.flops_per_sample = flops_per_sample(model, self.workload.loss_fn(), t.x, t.y)
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        self.loop = make_loop(self.workload, self.config, model, t, self.batch_size, device)

    def train_epoch(self, epoch: int) -> EpochStats:
        return self.loop.train_epoch(epoch)

    def evaluate(self) -> float:
        from parabench.torch.loop import predict

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
    options: ClassVar[frozenset[str]] = frozenset(TORCH_OPTIONS)

    def devices_for(self, workload: Workload) -> tuple[str, ...]:
        # scikit-learn estimators have no CUDA path; only torch workloads move to the GPU
        return self.devices if isinstance(workload, TorchWorkload) else ("cpu",)

    def session(self, workload: Workload, config: RunConfig) -> Session:
        if isinstance(workload, TorchWorkload):
            return SerialTorchSession(workload, config)
        if isinstance(workload, EstimatorWorkload):
            return SerialEstimatorSession(workload, config)
        raise TypeError(f"serial cannot train {type(workload).__name__}")
