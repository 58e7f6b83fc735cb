"""Sessions of the hybrid histogram forests: trees split over threads, Dask workers, or both.

Usage (declared in :mod:`parabench.methods.forest_hist_hybrid`)::

    from parabench.forest.torch_kernel import TorchKernel

    session = ThreadsTorchSession(workload, config, TorchKernel)     # rf_threads+torch
    session = TorchDaskSession(workload, config, TorchKernel)        # rf_torch+dask
    session = DaskThreadsTorchSession(workload, config, TorchKernel) # rf_dask+threads+torch

Each splits the forest's trees into contiguous blocks and grows every block with the
method's kernel (:mod:`parabench.forest.threaded`); the merged forest is the very forest one
kernel grows (the tests check it), and parity with ``serial`` is statistical.

* ``rf_threads+torch``: ``workers`` Python threads in this process, each with its own kernel;
  torch's intra-op pool gets ``threads_per_worker`` threads per calling thread. On CUDA each
  thread has its own CUDA stream, on GPU ``i % GPUs``.
* ``rf_torch+dask``: a Dask cluster (:class:`~parabench.engines.dask_cluster.DaskCluster`:
  local worker processes on loopback, or ``--dask-scheduler``) of ``workers`` workers; one task
  per worker (:func:`~parabench.forest.hybrid_worker.worker_task`), pinned to it, grows its
  block with ``threads_per_worker`` torch threads, on GPU ``worker index % GPUs`` of that
  worker's machine.
* ``rf_dask+threads+torch``: as ``rf_torch+dask``, but each task splits its block again over
  ``threads_per_worker`` threads (one torch thread each; CUDA streams on a GPU).

The cluster, the thread pools and every worker's torch runtime start once, in ``start()``
(a two-tree warm-up fit per worker); a lost Dask worker fails the case. An epoch bins the
features here, ships the binned data to the workers, grows, and merges: all inside the
epoch's window of the harness's clock. On CUDA every block ends with a synchronise, and the
peak GPU memory is the sum over workers of each one's ``max_memory_allocated``.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any, ClassVar

from parabench.forest.grow import Prepared
from parabench.forest.hist import WARMUP_ROWS, HistForestSession, warm_up
from parabench.forest.hybrid_worker import worker_task
from parabench.forest.kernel import Kernel
from parabench.forest.threaded import (
    blocks,
    grow_threaded,
    kernel_for,
    peak_gpu_mb,
    reset_peaks,
)
from parabench.forest.trees import Forest
from parabench.workload import Dataset


class ThreadsTorchSession(HistForestSession):
    """``workers`` threads in this process, one kernel each."""

    pool: ThreadPoolExecutor | None = None

    def start_engine(self, data: Dataset) -> None:
        self.threads_per_worker = self.backend.set_threads(self.config.threads)
        workers = self.config.workers
        self.kernels = [kernel_for(self.backend, self.backend.place(self.config.device, i), i)
                        for i in range(workers)]
        self.pool = ThreadPoolExecutor(workers, thread_name_prefix="forest")
        for f in [self.pool.submit(self._warm_up, k, data) for k in self.kernels]:
            f.result()
        reset_peaks(self.kernels)

    def _warm_up(self, kernel: Kernel, data: Dataset) -> None:
        with kernel.on_stream():
            warm_up(kernel, data, self.params)

    def grow(self, prepared: Prepared) -> Forest:
        trees = list(range(self.params.n_estimators))
        return grow_threaded(prepared, self.params, trees, self.kernels, self.pool)

    def peak_gpu_mb(self) -> float | None:
        return peak_gpu_mb(self.kernels) if self.config.device == "cuda" else None

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)
            self.pool = None


class TorchDaskSession(HistForestSession):
    """``rf_torch+dask``: one task per Dask worker, one thread driving the kernel there."""

    #: whether each worker splits its block again over ``threads_per_worker`` threads
    threaded: ClassVar[bool] = False
    cluster: Any = None

    def _layout(self) -> tuple[int, int]:
        """(kernel threads per driving thread, driving threads) in each worker."""
        return (1, self.config.threads) if self.threaded else (self.config.threads, 1)

    def start_engine(self, data: Dataset) -> None:
        from parabench.engines.dask_cluster import DaskCluster

        self.gpu_peaks: dict[str, float] = {}
        self.grow_s: list[float] = []
        self.cluster = DaskCluster.for_config(self.config)
        self.cluster.start()
        self.addresses = sorted(self.cluster.initial_workers)[: self.config.workers]
        rows = min(WARMUP_ROWS, data.n_train)
        small = Prepared.from_data(data.x_train[:rows], data.y_train[:rows], self.params.n_bins)
        self._run(small, [[0, 1]] * len(self.addresses), warm=True)
        torch_threads, inner = self._layout()
        self.notes.update(dask_workers=len(self.addresses), torch_threads=torch_threads,
                          driving_threads_per_worker=inner)

    def _run(self, prepared: Prepared, parts: list[list[int]], warm: bool = False
             ) -> list[Forest]:
        torch_threads, inner = self._layout()
        with self.cluster.guard() as client:
            [data] = client.scatter([prepared], broadcast=True, hash=False)
            try:
                futures = [
                    client.submit(worker_task, data, self.params, ids, i, self.config.device,
                                  torch_threads, inner, warm, backend=self.backend,
                                  workers=[addr], allow_other_workers=False, pure=False)
                    for i, (addr, ids) in enumerate(zip(self.addresses, parts, strict=False))
                ]
                results = self.cluster.gather(futures)  # notices a lost worker
            finally:
                client.cancel([data])
        for addr, (_, info) in zip(self.addresses, results, strict=False):
            self.gpu_peaks[addr] = max(self.gpu_peaks.get(addr, 0.0), info["peak_gpu_mb"])
        self.grow_s = [info["grow_s"] for _, info in results]
        return [forest for forest, _ in results]

    def grow(self, prepared: Prepared) -> Forest:
        parts = blocks(self.params.n_estimators, len(self.addresses))
        return Forest.concat(self._run(prepared, parts))

    def components(self, after_binning: float) -> dict[str, float]:
        slowest = max(self.grow_s)  # the slowest worker's own growing; the rest is Dask's
        return {"grow": slowest, "dask": after_binning - slowest}

    def peak_gpu_mb(self) -> float | None:
        return sum(self.gpu_peaks.values()) if self.config.device == "cuda" else None

    def close(self) -> None:
        if self.cluster is not None:
            self.cluster.close()
            self.cluster = None


class DaskThreadsTorchSession(TorchDaskSession):
    """``rf_dask+threads+torch``: each worker's block split again over its threads."""

    threaded: ClassVar[bool] = True
