"""A Dask cluster for one benchmark case: started (or connected to) once, guarded, closed.

Usage (inside a Session)::

    from parabench.engines.dask_cluster import DaskCluster, WorkerLost

    def start(self):                                   # timed once as start-up
        self.cluster = DaskCluster.for_config(self.config)
        self.cluster.start()                           # LocalCluster, or the user's scheduler
    def train_epoch(self, epoch):
        with self.cluster.guard():                     # a lost worker raises WorkerLost
            futures = self.cluster.client.map(fn, parts)
            results = self.cluster.gather(futures)     # checks the workers while waiting
    def close(self):
        if self.cluster is not None:
            self.cluster.close()                       # idempotent, safe after errors

    # or: with DaskCluster(workers=2, threads_per_worker=1) as cluster: ...

``DaskCluster.for_config(config)`` takes ``workers=config.workers``,
``threads_per_worker=config.threads`` and ``address=config.option("dask_scheduler")``.

Without an address, a ``LocalCluster`` of ``workers`` worker *processes* is started: the
scheduler and the nannies live in this process, each worker process is a child of it, so the
runner's memory sampler and its process-group kill see them all. Everything listens on
127.0.0.1 only, the dashboard is off, and the cluster is private to the case: a per-case
``Security.temporary()`` context (a throw-away CA and certificate, kept in memory) makes every
connection mutual TLS, so another local user who finds the port cannot submit work (a Dask
task is pickled code that the workers run as the benchmark user). Without the ``cryptography``
package (part of the ``dask`` extra) the cluster falls back to plain TCP on loopback, which any
local user could connect to, and the result's notes say so (``dask_security``).
Workers get ``threads_per_worker`` threads and the same number in the BLAS/OpenMP thread
variables (the fair budget), and no memory limit, so a nanny never pauses or restarts a worker
in the middle of a timing (the runner records out-of-memory).

With an address (``tcp://HOST:PORT``) the cluster is only connected to: ``close()``
disconnects and leaves it running, and ``start()`` waits for ``workers`` workers to be there.
Nothing listening there is a ``ConfigError`` ("nothing answers at HOST:PORT") within seconds,
not Dask's own minutes of retries. Its security is the user's to set (Dask's configuration).

A lost worker must end the case, not be silently absorbed: the local scheduler is created
with ``allowed_failures=0`` (a task on a worker that dies errs with ``KilledWorker`` rather
than being retried elsewhere), and :meth:`DaskCluster.guard` compares the worker set with the
one seen at start before and after the block (a nanny restarts a killed worker under a new
address), turning either into one :class:`WorkerLost` whose message says what happened.
``close()`` also kills any local worker process that outlived the cluster's own shutdown.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import psutil

from parabench.config import OptionSpec
from parabench.engines.probe import require_listening
from parabench.envinfo import THREAD_VARS

if TYPE_CHECKING:
    from parabench.config import RunConfig

#: the option of every method that runs on a Dask cluster (declared in their ``options``)
DASK_SCHEDULER = OptionSpec(str, "address of an existing Dask scheduler (tcp://HOST:PORT)")

LOOPBACK = "127.0.0.1"
CLOSE_TIMEOUT_S = 20.0
DEFAULT_SCHEDULER_PORT = 8786


class WorkerLost(RuntimeError):
    """A Dask worker died or left the cluster while the case was running."""


@dataclass(kw_only=True)
class DaskCluster:
    """One case's Dask cluster and client. Create, ``start()``, use ``client``, ``close()``."""

    workers: int
    threads_per_worker: int
    address: str | None = None
    startup_timeout_s: float = 120.0
    client: Any = field(default=None, init=False)
    cluster: Any = field(default=None, init=False)
    #: worker addresses seen by start(); any that disappears means a worker was lost
    initial_workers: frozenset[str] = field(default=frozenset(), init=False)
    #: pid -> create_time of the local worker processes (empty for an external cluster)
    worker_pids: dict[int, float] = field(default_factory=dict, init=False)
    #: "tls (per-case certificate)", "plain tcp on loopback" or "external" (see the module doc)
    security_mode: str = field(default="external", init=False)

    @classmethod
    def for_config(cls, config: RunConfig, **changes: Any) -> DaskCluster:
        kwargs: dict[str, Any] = {
            "workers": config.workers,
            "threads_per_worker": config.threads,
            "address": config.option("dask_scheduler"),
            "startup_timeout_s": min(120.0, config.timeout_s),
        }
        return cls(**(kwargs | changes))

    @property
    def external(self) -> bool:
        """True when connected to a scheduler someone else started (close leaves it running)."""
        return self.address is not None

    def start(self) -> Any:
        """Start the LocalCluster (or connect) and wait for every worker; returns the client."""
        if self.client is not None:
            return self.client
        from distributed import Client

        try:
            if self.external:
                assert self.address is not None
                if not self.address.startswith("inproc://"):
                    require_listening(self.address, option="--dask-scheduler",
                                      default_port=DEFAULT_SCHEDULER_PORT)
                self.client = Client(
                    self.address, timeout=self.startup_timeout_s, set_as_default=False
                )
            else:
                security = _case_security()
                self.security_mode = "plain tcp on loopback" if security is None else \
                    "tls (per-case certificate)"
                self.cluster = self._local_cluster(security)
                self.client = Client(self.cluster, security=security, set_as_default=False)
            self.client.wait_for_workers(self.workers, timeout=self.startup_timeout_s)
            self.initial_workers = self.worker_addresses()
            if not self.external:
                self._record_worker_pids()
        except BaseException:
            self.close()
            raise
        return self.client

    def _local_cluster(self, security: Any) -> Any:
        import dask
        from distributed import LocalCluster

        threads = {var: str(self.threads_per_worker) for var in THREAD_VARS}
        # pre-spawn: set before the worker interpreter starts, so BLAS/OpenMP read it at load
        settings = {f"distributed.nanny.pre-spawn-environ.{k}": v for k, v in threads.items()}
        with dask.config.set(settings):
            return LocalCluster(
                n_workers=self.workers,
                threads_per_worker=self.threads_per_worker,
                processes=True,
                host=LOOPBACK,
                scheduler_port=0,
                dashboard_address=None,
                # the scheduler's HTTP routes (health, metrics) start even with the dashboard
                # off, by default on port 8787 of the host: a free loopback port instead
                scheduler_kwargs={"allowed_failures": 0, "dashboard_address": f"{LOOPBACK}:0"},
                memory_limit=0,
                silence_logs=logging.ERROR,
                env=threads,
                security=security,
            )

    def _record_worker_pids(self) -> None:
        """Remember the local worker processes (a nanny's restarted worker has a new pid)."""
        for nanny in getattr(self.cluster, "workers", {}).values():
            try:
                if (pid := getattr(nanny, "pid", None)) is not None:
                    self.worker_pids[pid] = psutil.Process(pid).create_time()
            except psutil.Error:
                pass

    def worker_addresses(self) -> frozenset[str]:
        assert self.client is not None, "start() first"
        # not scheduler_info(): it returns the client's cached identity, which a periodic
        # refresh (n_workers=0) can replace with one listing no workers at all
        return frozenset(self.client.nthreads())

    def check_workers(self) -> None:
        """Raise WorkerLost when a worker present at start is gone (died, or was restarted)."""
        now = self.worker_addresses()
        if lost := self.initial_workers - now:
            raise WorkerLost(
                f"Dask worker(s) {', '.join(sorted(lost))} left the cluster (killed, crashed or "
                f"restarted){self._gone_pids()}; {len(now & self.initial_workers)} of "
                f"{len(self.initial_workers)} original workers remain"
            )

    def _gone_pids(self) -> str:
        """" (worker process pid N is gone)" for local workers whose process ended."""
        gone = []
        for pid, created in self.worker_pids.items():
            try:
                if psutil.Process(pid).create_time() == created:
                    continue
            except psutil.Error:
                pass
            gone.append(str(pid))
        return f" (worker process pid {', '.join(gone)} is gone)" if gone else ""

    @contextmanager
    def guard(self) -> Iterator[Any]:
        """Run a block of Dask work; a worker lost before, during or after it is WorkerLost."""
        self.check_workers()
        try:
            yield self.client
        except Exception as exc:
            if type(exc).__name__ == "KilledWorker":
                raise WorkerLost(
                    f"a Dask worker died while running a task{self._gone_pids()}: {exc}"
                ) from exc
            self._raise_if_lost(exc)
            raise
        self.check_workers()

    def gather(self, futures: list[Any], poll_s: float = 1.0) -> list[Any]:
        """The futures' results, checking the workers while waiting: a task pinned to a
        worker that died would otherwise wait for it forever."""
        results = []
        for future in futures:
            while True:
                try:
                    results.append(future.result(timeout=poll_s))
                    break
                except TimeoutError:
                    self.check_workers()
        return results

    def _raise_if_lost(self, cause: BaseException) -> None:
        try:
            self.check_workers()
        except WorkerLost as lost:
            raise lost from cause
        except Exception:  # noqa: BLE001 - the scheduler is unreachable: keep the first error
            pass

    def close(self) -> None:
        """Disconnect, shut a local cluster down, kill leftovers. Safe to call repeatedly."""
        if self.cluster is not None:
            self._record_worker_pids()
        client, cluster = self.client, self.cluster
        self.client = self.cluster = None
        for closable in (client, cluster):
            if closable is None:
                continue
            try:
                closable.close(timeout=CLOSE_TIMEOUT_S)
            except Exception:  # noqa: BLE001 - best effort: leftovers are killed below
                pass
        self._kill_leftover_workers()

    def _kill_leftover_workers(self) -> None:
        for pid, created in self.worker_pids.items():
            try:
                proc = psutil.Process(pid)
                if proc.create_time() == created:  # not a recycled pid
                    for p in [*proc.children(recursive=True), proc]:
                        p.kill()
            except psutil.Error:
                pass
        self.worker_pids.clear()

    def __enter__(self) -> DaskCluster:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _case_security() -> Any:
    """A fresh mutual-TLS context for one local cluster, or None without ``cryptography``."""
    try:
        import cryptography  # noqa: F401 - Security.temporary() needs it
    except ImportError:
        return None
    from distributed.security import Security

    return Security.temporary()
