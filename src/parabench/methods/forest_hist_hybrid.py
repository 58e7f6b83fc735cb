"""Hybrids of the torch histogram forest: ``threads+torch``, ``torch+dask``, ``dask+threads+torch``.

Usage::

    parabench run --workload random_forest --method threads+torch,torch+dask --workers 2
    parabench run --workload random_forest --method dask+threads+torch --workers 2 \\
        --threads 2 --dask-scheduler tcp://10.0.0.5:8786

Each splits the forest's trees into contiguous blocks and grows every block with the torch
kernel of :mod:`parabench.methods.forest_hist`; tree ``t`` draws from its own seed stream,
so the merged forest is the very forest ``torch`` grows (the tests check it), and parity with
``serial`` is statistical, as for ``torch``.

* ``threads+torch``: ``workers`` Python threads in this process, each with its own kernel;
  torch's intra-op pool gets ``threads_per_worker`` threads per calling thread. On CUDA each
  thread has its own CUDA stream, on GPU ``i % GPUs``.
* ``torch+dask``: a Dask cluster (:class:`~parabench.engines.dask_cluster.DaskCluster`:
  local worker processes on loopback, or ``--dask-scheduler``) of ``workers`` workers; one task
  per worker, pinned to it, grows its block with ``threads_per_worker`` torch threads, on GPU
  ``worker index % GPUs`` of that worker's machine.
* ``dask+threads+torch``: as ``torch+dask``, but each task splits its block again over
  ``threads_per_worker`` threads (one torch thread each; CUDA streams on a GPU).

The cluster, the thread pools and every worker's torch runtime start once, in ``start()``
(a two-tree warm-up fit per worker); a lost Dask worker fails the case. An epoch bins the
features here, ships the binned data to the workers, grows, and merges: all inside the
epoch's time. On CUDA every block ends with a synchronise before its clock is read, and the
peak GPU memory is the sum over workers of each one's ``max_memory_allocated``.
"""

from __future__ import annotations

import functools
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, ClassVar

import numpy as np

from parabench.config import RunConfig
from parabench.method import EpochStats, Session
from parabench.methods.forest_hist import (
    HistForestMethod,
    forest_params,
    set_backend_threads,
    torch_device,
    warm_up,
)
from parabench.registry import methods
from parabench.workload import Dataset, EstimatorWorkload, Workload


def blocks(n_trees: int, parts: int) -> list[list[int]]:
    """Contiguous, balanced blocks of tree ids (empty blocks dropped)."""
    return [b.tolist() for b in np.array_split(np.arange(n_trees), parts) if len(b)]


@functools.cache
def _kernel(device: str, slot: int) -> Any:
    """One torch kernel (and CUDA stream) per (device, thread slot), kept for the process."""
    from parabench.forest import make_kernel

    return make_kernel("torch", device)


def grow_threaded(prepared: Any, params: Any, tree_ids: list[int], kernels: list[Any],
                  pool: ThreadPoolExecutor | None) -> Any:
    """Grow ``tree_ids`` split over ``kernels`` (one thread each); the merged forest."""
    from parabench.forest import Forest, grow_trees

    def one(kernel: Any, ids: list[int]) -> Any:
        with kernel.on_stream():
            return grow_trees(kernel, prepared, params, ids)

    parts = [(kernels[i], ids) for i, ids in enumerate(_split(tree_ids, len(kernels)))]
    if pool is None or len(parts) == 1:
        forests = [one(k, ids) for k, ids in parts]
    else:
        forests = [f.result() for f in [pool.submit(one, k, ids) for k, ids in parts]]
    return Forest.concat(forests)


def _split(ids: list[int], parts: int) -> list[list[int]]:
    return [[ids[i] for i in b] for b in blocks(len(ids), parts)]


def _peak_gpu_mb(kernels: list[Any]) -> float | None:
    devices = {k.dev for k in kernels if k.dev.type == "cuda"}
    if not devices:
        return None
    import torch

    return sum(torch.cuda.max_memory_allocated(d) for d in devices) / 2**20


class ThreadsTorchSession(Session):
    workload: EstimatorWorkload

    def __init__(self, workload: EstimatorWorkload, config: RunConfig) -> None:
        super().__init__(workload, config)
        self.data: Dataset | None = None
        self.model: Any = None
        self.pool: ThreadPoolExecutor | None = None

    def start(self) -> None:
        self.data = self.workload.dataset(self.config)
        self.samples_per_epoch = self.workload.samples_per_epoch(self.data)
        self.params = forest_params(self.workload, self.config)
        self.threads_per_worker = set_backend_threads("torch", self.config.threads)
        workers = self.config.workers
        self.kernels = [_kernel(torch_device(self.config, i), i) for i in range(workers)]
        self.pool = ThreadPoolExecutor(workers, thread_name_prefix="forest")
        for f in [self.pool.submit(self._warm_up, k) for k in self.kernels]:
            f.result()
        for device in {k.dev for k in self.kernels if k.dev.type == "cuda"}:
            self.kernels[0].torch.cuda.reset_peak_memory_stats(device)

    def _warm_up(self, kernel: Any) -> None:
        assert self.data is not None
        with kernel.on_stream():
            warm_up(kernel, self.data, self.params)

    def train_epoch(self, epoch: int) -> EpochStats:
        from parabench.forest import Prepared

        assert self.data is not None, "start() first"
        t0 = time.perf_counter()
        prepared = Prepared.from_data(self.data.x_train, self.data.y_train, self.params.n_bins)
        t1 = time.perf_counter()
        trees = list(range(self.params.n_estimators))
        self.model = grow_threaded(prepared, self.params, trees, self.kernels, self.pool)
        seconds = time.perf_counter() - t0  # every block synchronised its stream
        loss = self.workload.train_loss(self.model, self.data)
        return EpochStats(seconds=seconds, loss=loss, samples=self.samples_per_epoch,
                          components={"binning": t1 - t0, "grow": seconds - (t1 - t0)})

    def evaluate(self) -> float:
        assert self.data is not None and self.model is not None, "train first"
        return self.workload.score(self.model, self.data.x_test, self.data.y_test)

    def peak_gpu_mb(self) -> float | None:
        return _peak_gpu_mb(self.kernels) if self.config.device == "cuda" else None

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)
            self.pool = None


def worker_task(prepared: Any, params: Any, tree_ids: list[int], index: int, device: str,
                threads: int, inner: int, warm: bool = False) -> tuple[Any, dict[str, float]]:
    """Runs on a Dask worker: grow ``tree_ids`` with ``inner`` threads of torch kernels."""
    import torch

    set_backend_threads("torch", threads)
    if device == "cuda":
        device = f"cuda:{index % max(1, torch.cuda.device_count())}"
    kernels = [_kernel(device, i) for i in range(inner)]
    pool = _worker_pool(inner) if inner > 1 else None
    if warm:
        for k in kernels:
            with k.on_stream():
                warm_up_prepared(k, prepared, params)
        for d in {k.dev for k in kernels if k.dev.type == "cuda"}:
            torch.cuda.reset_peak_memory_stats(d)
    t0 = time.perf_counter()
    forest = grow_threaded(prepared, params, tree_ids, kernels, pool)
    info = {"grow_s": time.perf_counter() - t0, "peak_gpu_mb": _peak_gpu_mb(kernels) or 0.0}
    return forest, info


@functools.cache
def _worker_pool(threads: int) -> ThreadPoolExecutor:
    """The worker process's own thread pool for dask+threads+torch, kept across epochs."""
    return ThreadPoolExecutor(threads, thread_name_prefix="forest")


def warm_up_prepared(kernel: Any, prepared: Any, params: Any) -> None:
    from dataclasses import replace

    from parabench.forest import grow_trees

    grow_trees(kernel, prepared, replace(params, n_estimators=2), range(2))


class DaskTorchSession(Session):
    """``torch+dask`` (inner = 1 thread driving torch) and ``dask+threads+torch``."""

    workload: EstimatorWorkload

    def __init__(self, workload: EstimatorWorkload, config: RunConfig, threaded: bool) -> None:
        super().__init__(workload, config)
        self.threaded = threaded
        self.data: Dataset | None = None
        self.model: Any = None
        self.cluster: Any = None
        self.gpu_peaks: dict[str, float] = {}

    def _layout(self) -> tuple[int, int]:
        """(torch threads per driving thread, driving threads) in each worker."""
        return (1, self.config.threads) if self.threaded else (self.config.threads, 1)

    def start(self) -> None:
        from parabench.engines.dask_cluster import DaskCluster
        from parabench.forest import Prepared

        self.data = self.workload.dataset(self.config)
        self.samples_per_epoch = self.workload.samples_per_epoch(self.data)
        self.params = forest_params(self.workload, self.config)
        self.cluster = DaskCluster.for_config(self.config)
        self.cluster.start()
        self.addresses = sorted(self.cluster.initial_workers)[: self.config.workers]
        rows = min(256, self.data.n_train)
        small = Prepared.from_data(self.data.x_train[:rows], self.data.y_train[:rows],
                                   self.params.n_bins)
        self._run(small, [[0, 1]] * len(self.addresses), warm=True)
        torch_threads, inner = self._layout()
        self.notes.update(dask_workers=len(self.addresses), torch_threads=torch_threads,
                          driving_threads_per_worker=inner)

    def _run(self, prepared: Any, parts: list[list[int]], warm: bool = False
             ) -> tuple[list[Any], list[dict[str, float]]]:
        torch_threads, inner = self._layout()
        with self.cluster.guard() as client:
            [data] = client.scatter([prepared], broadcast=True, hash=False)
            try:
                futures = [
                    client.submit(worker_task, data, self.params, ids, i, self.config.device,
                                  torch_threads, inner, warm, workers=[addr],
                                  allow_other_workers=False, pure=False)
                    for i, (addr, ids) in enumerate(zip(self.addresses, parts, strict=False))
                ]
                results = self.cluster.gather(futures)  # notices a lost worker
            finally:
                client.cancel([data])
        for addr, (_, info) in zip(self.addresses, results, strict=False):
            self.gpu_peaks[addr] = max(self.gpu_peaks.get(addr, 0.0), info["peak_gpu_mb"])
        return [forest for forest, _ in results], [info for _, info in results]

    def train_epoch(self, epoch: int) -> EpochStats:
        from parabench.forest import Forest, Prepared

        assert self.data is not None, "start() first"
        t0 = time.perf_counter()
        prepared = Prepared.from_data(self.data.x_train, self.data.y_train, self.params.n_bins)
        t1 = time.perf_counter()
        forests, infos = self._run(prepared, blocks(self.params.n_estimators,
                                                    len(self.addresses)))
        self.model = Forest.concat(forests)
        seconds = time.perf_counter() - t0
        slowest = max(info["grow_s"] for info in infos)
        loss = self.workload.train_loss(self.model, self.data)
        return EpochStats(seconds=seconds, loss=loss, samples=self.samples_per_epoch,
                          components={"binning": t1 - t0, "grow": slowest,
                                      "dask": seconds - (t1 - t0) - slowest})

    def evaluate(self) -> float:
        assert self.data is not None and self.model is not None, "train first"
        return self.workload.score(self.model, self.data.x_test, self.data.y_test)

    def peak_gpu_mb(self) -> float | None:
        return sum(self.gpu_peaks.values()) if self.config.device == "cuda" else None

    def close(self) -> None:
        if self.cluster is not None:
            self.cluster.close()
            self.cluster = None


@methods.register
class ThreadsTorchForest(HistForestMethod):
    name: ClassVar[str] = "threads+torch"
    description: ClassVar[str] = "torch histogram forest, trees split over threads (streams)"
    requires: ClassVar[frozenset[str]] = frozenset({"torch"})
    backend: ClassVar[str] = "torch"

    def session(self, workload: Workload, config: RunConfig) -> Session:
        assert isinstance(workload, EstimatorWorkload)
        return ThreadsTorchSession(workload, config)


@methods.register
class TorchDaskForest(HistForestMethod):
    name: ClassVar[str] = "torch+dask"
    options: ClassVar[frozenset[str]] = frozenset({"dask_scheduler"})
    description: ClassVar[str] = "torch histogram forest, trees split over Dask workers"
    requires: ClassVar[frozenset[str]] = frozenset({"torch", "dask"})
    backend: ClassVar[str] = "torch"

    def session(self, workload: Workload, config: RunConfig) -> Session:
        assert isinstance(workload, EstimatorWorkload)
        return DaskTorchSession(workload, config, threaded=False)


@methods.register
class DaskThreadsTorchForest(HistForestMethod):
    name: ClassVar[str] = "dask+threads+torch"
    options: ClassVar[frozenset[str]] = frozenset({"dask_scheduler"})
    description: ClassVar[str] = "torch histogram forest: Dask workers x threads per worker"
    requires: ClassVar[frozenset[str]] = frozenset({"torch", "dask"})
    backend: ClassVar[str] = "torch"

    def session(self, workload: Workload, config: RunConfig) -> Session:
        assert isinstance(workload, EstimatorWorkload)
        return DaskTorchSession(workload, config, threaded=True)
