"""``torch``, ``tf``, ``numba``: the histogram random forest with one backend's kernel.

Usage::

    parabench run --workload random_forest --method torch,tf,numba --device cpu
    parabench run --workload random_forest --method torch,numba --device cuda

All three grow the same forest (:mod:`parabench.forest`): the sklearn workload's parameters
(trees, ``max_features``, bootstrap, min samples; ``max_depth`` None -> the forest's
``DEFAULT_MAX_DEPTH``), features binned into ``DEFAULT_BINS`` quantile bins, and per-level
histogram / Gini split kernels in PyTorch, TensorFlow or numba (``numba.cuda`` on the GPU).
With the same seed they grow identical trees, so they differ only in speed. It is not
sklearn's exact-split algorithm, so parity with ``serial`` is statistical.

One process. On CPU the backend's thread pool gets ``workers x threads_per_worker`` threads
(the whole fair budget; each epoch is one fit). Start-up loads the data, sets the threads and
fits a two-tree forest on a slice of the data, so JIT compilation (numba), the CUDA context
and TensorFlow's runtime are paid there, not in the first epoch. An epoch bins the features
and grows every tree; on CUDA the device is synchronised before the clock is read.
"""

from __future__ import annotations

import functools
import time
from typing import Any, ClassVar

from parabench.config import RunConfig
from parabench.method import EpochStats, Method, Session
from parabench.registry import methods
from parabench.workload import Dataset, EstimatorWorkload, Workload

WARMUP_ROWS = 256


@functools.cache
def _is_random_forest(workload_name: str) -> bool:
    from sklearn.ensemble import RandomForestClassifier

    from parabench.registry import workloads

    workload = workloads.get(workload_name)
    if not isinstance(workload, EstimatorWorkload):
        return False
    return isinstance(workload.build_estimator("tiny", 0, 1), RandomForestClassifier)


def set_backend_threads(backend: str, threads: int) -> int:
    """Give the backend's CPU thread pool ``threads`` threads; returns what it really has."""
    if backend == "torch":
        import torch

        torch.set_num_threads(threads)
        return torch.get_num_threads()
    if backend == "numba":
        import numba

        numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
        return numba.get_num_threads()
    if backend == "tf":
        from parabench.forest.tf_kernel import import_tf

        tf = import_tf()
        try:  # only possible before TF's runtime starts (a fresh case process)
            tf.config.threading.set_intra_op_parallelism_threads(threads)
            tf.config.threading.set_inter_op_parallelism_threads(threads)
        except RuntimeError:
            pass
        return tf.config.threading.get_intra_op_parallelism_threads() or threads
    raise ValueError(f"unknown backend {backend!r}")


def kernel_name(backend: str, device: str) -> str:
    return "numba-cuda" if (backend, device) == ("numba", "cuda") else backend


def torch_device(config: RunConfig, index: int = 0) -> str:
    """``cuda:i`` (round-robin over the GPUs here) or ``cpu``."""
    if config.device != "cuda":
        return "cpu"
    from parabench.hardware import cuda_device_count

    return f"cuda:{index % max(1, cuda_device_count())}"


def warm_up(kernel: Any, data: Dataset, params: Any) -> None:
    """Fit two trees on a slice of the data: compiles, initialises, allocates once."""
    from dataclasses import replace

    from parabench.forest import Prepared, grow_trees

    if hasattr(kernel, "warm_up"):
        kernel.warm_up()
    rows = min(WARMUP_ROWS, data.n_train)
    small = Prepared.from_data(data.x_train[:rows], data.y_train[:rows], params.n_bins)
    grow_trees(kernel, small, replace(params, n_estimators=2), range(2))


def forest_params(workload: EstimatorWorkload, config: RunConfig) -> Any:
    from parabench.forest import ForestParams

    est = workload.build_estimator(config.profile, config.seed, n_jobs=1)
    return ForestParams.from_sklearn(est, seed=config.seed)


class GpuPeak:
    """Peak GPU memory of the kernels this process runs (torch, TF or numba-cuda)."""

    def __init__(self, kernel: Any) -> None:
        self.kernel = kernel

    def reset(self) -> None:
        if self.kernel.name == "torch" and self.kernel.dev.type == "cuda":
            self.kernel.torch.cuda.reset_peak_memory_stats(self.kernel.dev)
        elif self.kernel.name == "tf" and self.kernel.device == "cuda":
            self.kernel.tf.config.experimental.reset_memory_stats("GPU:0")
        elif self.kernel.name == "numba-cuda":
            self.kernel.peak_used_bytes = 0

    def mb(self) -> float | None:
        k = self.kernel
        if k.name == "torch" and k.dev.type == "cuda":
            return k.torch.cuda.max_memory_allocated(k.dev) / 2**20
        if k.name == "tf" and k.device == "cuda":
            return k.tf.config.experimental.get_memory_info("GPU:0")["peak"] / 2**20
        if k.name == "numba-cuda":
            return k.peak_used_bytes / 2**20
        return None


class HistForestSession(Session):
    workload: EstimatorWorkload

    def __init__(self, workload: EstimatorWorkload, config: RunConfig, backend: str) -> None:
        super().__init__(workload, config)
        self.backend = backend
        self.data: Dataset | None = None
        self.model: Any = None

    def start(self) -> None:
        from parabench.forest import make_kernel

        self.data = self.workload.dataset(self.config)
        self.samples_per_epoch = self.workload.samples_per_epoch(self.data)
        self.params = forest_params(self.workload, self.config)
        threads = set_backend_threads(self.backend, self.config.workers * self.config.threads)
        self.threads_per_worker = max(1, threads // self.config.workers)
        device = torch_device(self.config) if self.backend == "torch" else self.config.device
        self.kernel = make_kernel(kernel_name(self.backend, self.config.device), device)
        warm_up(self.kernel, self.data, self.params)
        self.gpu = GpuPeak(self.kernel)
        self.gpu.reset()
        self.notes.update(backend_threads=threads, kernel=self.kernel.name,
                          n_bins=self.params.n_bins, max_depth=self.params.max_depth)

    def train_epoch(self, epoch: int) -> EpochStats:
        from parabench.forest import Prepared, grow_trees

        assert self.data is not None, "start() first"
        t0 = time.perf_counter()
        prepared = Prepared.from_data(self.data.x_train, self.data.y_train, self.params.n_bins)
        t1 = time.perf_counter()
        self.model = grow_trees(self.kernel, prepared, self.params, range(self.params.n_estimators))
        seconds = time.perf_counter() - t0  # grow_trees() synchronised the device
        loss = self.workload.train_loss(self.model, self.data)
        return EpochStats(seconds=seconds, loss=loss, samples=self.samples_per_epoch,
                          components={"binning": t1 - t0, "grow": seconds - (t1 - t0)})

    def evaluate(self) -> float:
        assert self.data is not None and self.model is not None, "train first"
        return self.workload.score(self.model, self.data.x_test, self.data.y_test)

    def peak_gpu_mb(self) -> float | None:
        return self.gpu.mb() if self.config.device == "cuda" else None


class HistForestMethod(Method):
    """Base of the histogram-forest methods: one backend, random-forest workloads only."""

    backend: ClassVar[str]
    devices: ClassVar[tuple[str, ...]] = ("cpu", "cuda")
    families: ClassVar[frozenset[str]] = frozenset({"estimator"})
    parity: ClassVar[str] = "statistical"

    def supports(self, workload: Workload) -> bool:
        return super().supports(workload) and _is_random_forest(workload.name)

    def session(self, workload: Workload, config: RunConfig) -> Session:
        assert isinstance(workload, EstimatorWorkload)
        return HistForestSession(workload, config, self.backend)


@methods.register
class TorchForest(HistForestMethod):
    name: ClassVar[str] = "torch"
    description: ClassVar[str] = "histogram random forest, PyTorch tensor kernels (cpu/cuda)"
    requires: ClassVar[frozenset[str]] = frozenset({"torch"})
    backend: ClassVar[str] = "torch"


@methods.register
class TfForest(HistForestMethod):
    name: ClassVar[str] = "tf"
    description: ClassVar[str] = "histogram random forest, TensorFlow kernels (CPU; GPU if seen)"
    requires: ClassVar[frozenset[str]] = frozenset({"tf"})
    backend: ClassVar[str] = "tf"

    def unavailable(self, device: str = "cpu") -> str | None:
        if (reason := super().unavailable(device)) is not None or device != "cuda":
            return reason
        from parabench.forest.tf_kernel import tf_gpu_reason

        return tf_gpu_reason()


@methods.register
class NumbaForest(HistForestMethod):
    name: ClassVar[str] = "numba"
    description: ClassVar[str] = "histogram random forest, numba njit(parallel) / numba.cuda"
    requires: ClassVar[frozenset[str]] = frozenset({"numba"})
    backend: ClassVar[str] = "numba"

    def unavailable(self, device: str = "cpu") -> str | None:
        if (reason := super().unavailable(device)) is not None or device != "cuda":
            return reason
        from numba import cuda

        if not cuda.is_available():
            return "numba sees no CUDA GPU; pip install numba-cuda (numba >= 0.61 moved it)"
        return None
