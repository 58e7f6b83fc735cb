"""The sessions of ``rf_dask`` and ``rf_dask+threads``: a scikit-learn forest on a Dask cluster.

Usage::

    parabench run --workload random_forest --method rf_dask,rf_dask+threads --workers 2
    parabench run --workload random_forest --method rf_dask --dask-scheduler tcp://10.0.0.5:8786

Both start (or connect to) the cluster once in ``start()`` through
:class:`parabench.engines.dask_cluster.DaskCluster`: ``workers`` worker processes with
``threads_per_worker`` threads each, on 127.0.0.1 with the dashboard off, or the user's
scheduler (then left running at the end). Start-up also imports scikit-learn on every worker
and ships the training data to every worker once (``scatter(broadcast=True)``), so a fit
moves only tree parameters and fitted trees.

- ``rf_dask`` hands tree building to joblib's Dask backend: ``fit`` with
  ``n_jobs = workers x threads_per_worker``, each tree a task (joblib batches them).
- ``rf_dask+threads`` (seed 000's hybrid) gives each worker one contiguous share of the trees
  as one task, and the worker grows its share with ``threads_per_worker`` threads (joblib's
  threading backend); the shares are merged in tree order. The split is seed-exact
  (:mod:`parabench.forest.split`).

Both predict exactly like ``serial`` for the same ``random_state``. A worker that dies during
the case (the local scheduler does not retry its tasks; a nanny-restarted worker is noticed)
fails the fit with :class:`~parabench.engines.dask_cluster.WorkerLost`.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any

from parabench.config import RunConfig
from parabench.engines.dask_cluster import DaskCluster
from parabench.forest.session import ForestSession
from parabench.workload import Dataset, EstimatorWorkload


class DaskForestSession(ForestSession):
    """Cluster up once; subclasses decide how a fit uses it."""

    def __init__(self, workload: EstimatorWorkload, config: RunConfig) -> None:
        super().__init__(workload, config)
        self.cluster: DaskCluster | None = None
        self.scattered: dict[str, Any] = {}

    def start_engine(self) -> None:
        assert self.data is not None
        self.cluster = DaskCluster.for_config(self.config)
        client = self.cluster.start()
        threads = set(client.nthreads().values())
        self.threads_per_worker = max(threads)
        self.notes["dask_scheduler"] = client.scheduler.address
        self.notes["dask_external"] = self.cluster.external
        self.notes["dask_security"] = self.cluster.security_mode
        client.run(_import_trees)

    @property
    def n_jobs(self) -> int:
        assert self.cluster is not None and self.cluster.client is not None, "start() first"
        return sum(self.cluster.client.nthreads().values())

    def close(self) -> None:
        self.scattered = {}
        if self.cluster is not None:
            self.cluster.close()


class DaskJoblibSession(DaskForestSession):
    """Trees as tasks through joblib's Dask backend."""

    backend: Any = None

    def start_engine(self) -> None:
        super().start_engine()
        assert self.data is not None and self.cluster is not None
        # One backend for the whole case: the training matrix is scattered to the workers
        # here (start-up), and joblib maps the fit's X (the same object: float32,
        # C-contiguous, so scikit-learn does not copy it) to the scattered copy.
        self.backend = _fail_fast_backend()(
            client=self.cluster.client, scatter=[self.data.x_train]
        )

    def fit_context(self) -> AbstractContextManager[Any]:
        from joblib import parallel_config

        return parallel_config(backend=self.backend, n_jobs=self.n_jobs)

    def fit(self, data: Dataset) -> Any:
        assert self.cluster is not None
        with self.cluster.guard():
            return self.fit_in(self.fit_context(), data)


class DaskThreadsSession(DaskForestSession):
    """One share of the trees per worker, grown there by several threads."""

    def start_engine(self) -> None:
        super().start_engine()
        assert self.data is not None and self.cluster is not None
        client = self.cluster.client
        x, y = client.scatter([self.data.x_train, self.data.y_train], broadcast=True)
        self.scattered = {"x": x, "y": y}

    def fit(self, data: Dataset) -> Any:
        from parabench.forest.split import merge, slices

        assert self.cluster is not None and self.cluster.client is not None
        client = self.cluster.client
        est = self.workload.build_estimator(
            self.config.profile, self.config.training_seed, n_jobs=self.threads_per_worker
        )
        workers = sorted(client.nthreads())
        shares = slices(est.n_estimators, len(workers))
        with self.cluster.guard():
            futures = [
                client.submit(
                    _grow_share, est, self.scattered["x"], self.scattered["y"], lo, hi,
                    self.threads_per_worker, workers=[addr], allow_other_workers=False,
                    pure=False,
                )
                for addr, (lo, hi) in zip(workers, shares, strict=False)
            ]
            forest = merge(self.cluster.gather(futures))
        forest.set_params(n_jobs=self.n_jobs)  # predict on this process with every core
        return forest


def _fail_fast_backend() -> type:
    """joblib's Dask backend with two failure paths fixed, so a lost worker fails the fit.

    In joblib 1.6 both of these hang ``Parallel`` forever (it waits for a batch whose outcome
    never arrives):

    - joblib scatters every argument over 1 kB (here: the encoded labels) from a callback on
      the client's event loop; if that scatter fails (its target worker just died), the error
      is only logged. Here such a batch is submitted with its arguments inline instead; it
      runs on a live worker and the cluster guard reports the lost worker afterwards.
    - a task that errs in Dask itself (``KilledWorker``: the worker running it died) sets
      the error on a future nobody reads and never calls joblib's completion callback. Here
      the callback is called with the error, so ``Parallel`` raises it.
    """
    import asyncio

    from joblib._dask import DaskDistributedBackend

    class TaskFailed:
        def __init__(self, error: BaseException) -> None:
            self.error = error

    class FailFastDaskBackend(DaskDistributedBackend):
        async def _to_func_args(self, func: Any) -> Any:
            try:
                return await super()._to_func_args(func)
            except Exception:  # noqa: BLE001 - CommClosedError, OSError: a worker went away
                saved, self.call_data_futures = self.call_data_futures, None
                try:
                    return await super()._to_func_args(func)
                finally:
                    self.call_data_futures = saved

        async def _collect(self) -> None:
            while self._continue:
                async for future, result in self.waiting_futures:
                    cf_future = self._results.pop(future)
                    callback = self._callbacks.pop(future)
                    if future.status == "error":
                        _typ, exc, _tb = result
                        cf_future.set_exception(exc)
                        callback(TaskFailed(exc))
                    else:
                        cf_future.set_result(result)
                        callback(result)
                await asyncio.sleep(0.01)

        def retrieve_result_callback(self, out: Any) -> Any:
            if isinstance(out, TaskFailed):
                raise out.error
            return super().retrieve_result_callback(out)

    return FailFastDaskBackend


def _import_trees() -> None:
    import sklearn.ensemble  # noqa: F401 - loaded once at start-up, not in the first fit


def _grow_share(est: Any, x: Any, y: Any, lo: int, hi: int, threads: int) -> Any:
    from joblib import parallel_config

    from parabench.forest.split import grow_slice

    with parallel_config(backend="threading", n_jobs=threads):
        return grow_slice(est, x, y, lo, hi)
