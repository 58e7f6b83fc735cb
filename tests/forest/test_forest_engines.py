"""The random-forest methods on their real engines: parity with serial, engines kept up,
loopback only, and a killed worker ending the case cleanly.

Sessions are started once per method (``engines`` fixture) and shared by the tests of that
method; a fault test kills a worker of that shared session and closes it. Everything runs at
the ``tiny`` profile with 2 workers.
"""

from __future__ import annotations

import ipaddress
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import pytest

from parabench.config import RunConfig
from parabench.forest.session import predictions_sha
from parabench.forest.split import grow_slice, merge, slices
from parabench.method import Session
from parabench.registry import methods, workloads

pytestmark = pytest.mark.cpu

WORKLOAD = "random_forest"
PROFILE = "tiny"
WORKERS = 2
TIMEOUT_S = 120.0
EXACT = [
    pytest.param("rf_threads"),
    pytest.param("rf_processes"),
    pytest.param("rf_dask", marks=pytest.mark.dask),
    pytest.param("rf_dask+threads", marks=pytest.mark.dask),
    pytest.param("rf_mpi", marks=pytest.mark.mpi),
]


def config(method: str, **changes: Any) -> RunConfig:
    base = RunConfig(workload=WORKLOAD, method=method, workers=WORKERS, profile=PROFILE,
                     epochs=2, timeout_s=TIMEOUT_S)
    return base.replace(**changes)


def descendants() -> set[int]:
    """Live descendants of this process, without multiprocessing's resource trackers
    (shared helpers that exit with this process, started by the first pool of any kind)."""
    found = set()
    for proc in psutil.Process().children(recursive=True):
        try:
            if proc.status() == psutil.STATUS_ZOMBIE:
                continue
            if "resource_tracker" not in " ".join(proc.cmdline()):
                found.add(proc.pid)
        except psutil.Error:
            pass
    return found


def assert_nothing_left(before: set[int], engines: Engines, wait_s: float = 10.0) -> None:
    """No process beyond those before the session started, or of the still-open sessions."""
    allowed = before | engines.open_engine_pids()
    deadline = time.monotonic() + wait_s
    while (left := descendants() - allowed) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not left, f"processes left running: {sorted(left)}"


def non_loopback_listeners(pids: set[int]) -> set[str]:
    """Addresses other than loopback that these processes listen on."""
    found = set()
    for pid in pids:
        try:
            conns = psutil.Process(pid).net_connections(kind="inet")
        except psutil.Error:
            continue
        for conn in conns:
            if conn.status == psutil.CONN_LISTEN and not _loopback(conn.laddr.ip):
                found.add(f"{pid}:{conn.laddr.ip}:{conn.laddr.port}")
    return found


def _loopback(ip: str) -> bool:
    addr = ipaddress.ip_address(ip.split("%")[0])
    mapped = getattr(addr, "ipv4_mapped", None)  # ::ffff:127.0.0.1 (Java's dual-stack sockets)
    return addr.is_loopback or (mapped is not None and mapped.is_loopback)


class Engines:
    """Started sessions by method name, with the processes each one added."""

    def __init__(self) -> None:
        self.sessions: dict[str, tuple[Session, set[int], set[int]]] = {}

    def get(self, method: str) -> tuple[Session, set[int], set[int]]:
        """(started session, descendants before start, engine processes after start)."""
        if method not in self.sessions:
            before = descendants()
            cfg = config(method)
            session = methods.get(method).session(workloads.get(WORKLOAD), cfg)
            try:
                session.start()
            except BaseException:
                session.close()
                raise
            self.sessions[method] = (session, before, descendants() - before)
        return self.sessions[method]

    def open_engine_pids(self) -> set[int]:
        return {pid for _, _, engine in self.sessions.values() for pid in engine}

    def pop(self, method: str) -> tuple[Session, set[int], set[int]]:
        found = self.get(method)
        del self.sessions[method]
        return found

    def close(self) -> None:
        for session, _, _ in self.sessions.values():
            session.close()


@pytest.fixture(scope="module")
def engines() -> Iterator[Engines]:
    started = Engines()
    yield started
    started.close()


@pytest.fixture(scope="module")
def serial() -> tuple[Any, Any]:
    """(serial forest fitted directly with scikit-learn, the data)."""
    wl = workloads.get(WORKLOAD)
    data = wl.make_data(PROFILE, 0)
    forest = wl.build_estimator(PROFILE, 0, n_jobs=1).fit(data.x_train, data.y_train)
    return forest, data


@pytest.mark.parametrize("parts", [1, 2, 3, 7])
def test_forest_slices_merge_into_the_serial_forest(parts: int, serial: tuple[Any, Any]) -> None:
    forest, data = serial
    wl = workloads.get(WORKLOAD)
    pieces = [grow_slice(wl.build_estimator(PROFILE, 0, n_jobs=1), data.x_train, data.y_train,
                         lo, hi) for lo, hi in slices(forest.n_estimators, parts)]
    merged = merge(pieces)
    assert merged.n_estimators == forest.n_estimators == len(merged.estimators_)
    assert np.array_equal(merged.predict_proba(data.x_test), forest.predict_proba(data.x_test))


def test_forest_slices_refuse_an_unseeded_forest(serial: tuple[Any, Any]) -> None:
    _, data = serial
    est = workloads.get(WORKLOAD).build_estimator(PROFILE, 0, n_jobs=1).set_params(
        random_state=None)
    with pytest.raises(ValueError, match="integer random_state"):
        grow_slice(est, data.x_train, data.y_train, 0, 5)


@pytest.mark.parametrize("method", EXACT)
def test_exact_method_predicts_like_serial_with_its_engine_kept_up(
    method: str, engines: Engines, serial: tuple[Any, Any]
) -> None:
    forest, data = serial
    session, _before, engine = engines.get(method)
    for epoch in range(2):
        stats = session.train_epoch(epoch)
        assert stats.seconds > 0 and stats.samples == len(data.x_train)
        fitted = session.estimator  # type: ignore[attr-defined]
        assert np.array_equal(fitted.predict_proba(data.x_test),
                              forest.predict_proba(data.x_test))
    # the engine started once: the same processes, none added or replaced by the fits
    assert descendants() - _before == engine
    quality = session.evaluate()
    assert quality == workloads.get(WORKLOAD).score(forest, data.x_test, data.y_test)
    assert session.notes["predict_s"] > 0
    assert session.facts.predictions_sha == predictions_sha(forest.predict(data.x_test))
    if method in {"rf_processes", "rf_dask", "rf_dask+threads", "rf_mpi"}:
        assert len(engine) >= WORKERS, "workers must be children of the case process"
    assert not non_loopback_listeners(engine)


@pytest.mark.dask
def test_dask_cluster_listens_on_loopback_only(engines: Engines) -> None:
    session, _, _ = engines.get("rf_dask")
    cluster = session.cluster  # type: ignore[attr-defined]
    # tls: the per-case certificate (the cryptography package is in the dask extra)
    assert cluster.client.scheduler.address.startswith("tls://127.0.0.1:")
    assert all(addr.startswith("tls://127.0.0.1:") for addr in cluster.worker_addresses())
    assert session.notes["dask_security"] == "tls (per-case certificate)"


@pytest.mark.dask
def test_killed_dask_worker_fails_the_fit_and_leaves_nothing(engines: Engines) -> None:
    from parabench.engines.dask_cluster import WorkerLost

    session, before, _ = engines.pop("rf_dask")
    try:
        victim = next(iter(session.cluster.worker_pids))  # type: ignore[attr-defined]
        psutil.Process(victim).kill()
        t0 = time.monotonic()
        with pytest.raises(WorkerLost, match="left the cluster|died"):
            session.train_epoch(5)
        assert time.monotonic() - t0 < TIMEOUT_S
    finally:
        session.close()
    session.close()  # idempotent
    assert_nothing_left(before, engines)


@pytest.mark.dask
@pytest.mark.slow
@pytest.mark.parametrize("method", ["rf_dask", "rf_dask+threads"])
def test_dask_worker_killed_mid_fit_fails_the_fit_promptly(method: str, engines: Engines) -> None:
    """A worker dies while it grows trees (quick profile: fits long enough to hit one)."""
    import threading

    from parabench.engines.dask_cluster import WorkerLost

    before = descendants() | engines.open_engine_pids()
    cfg = config(method, profile="quick")
    session = methods.get(method).session(workloads.get(WORKLOAD), cfg)
    try:
        session.start()
        victim = next(iter(session.cluster.worker_pids))  # type: ignore[attr-defined]
        threading.Timer(1.0, psutil.Process(victim).kill).start()
        t0 = time.monotonic()
        with pytest.raises(WorkerLost):
            session.train_epoch(0)
        assert time.monotonic() - t0 < TIMEOUT_S
    finally:
        session.close()
    assert_nothing_left(before, engines)


@pytest.mark.mpi
def test_killed_mpi_rank_fails_the_fit_and_leaves_nothing(engines: Engines) -> None:
    from parabench.forest.mpi_session import MPIJobLost

    session, before, _ = engines.pop("rf_mpi")
    try:
        victim = session.notes["rank_pids"][1]
        psutil.Process(victim).kill()
        t0 = time.monotonic()
        with pytest.raises(MPIJobLost, match="lost the MPI job|ended"):
            session.train_epoch(5)
        assert time.monotonic() - t0 < TIMEOUT_S
    finally:
        session.close()
    session.close()
    assert_nothing_left(before, engines)


def test_killed_loky_worker_fails_the_fit_and_leaves_nothing(engines: Engines) -> None:
    session, before, _ = engines.pop("rf_processes")
    try:
        psutil.Process(session.notes["worker_pids"][0]).kill()
        with pytest.raises(Exception, match="died|terminated|killed"):
            session.train_epoch(5)
    finally:
        session.close()
    session.close()
    assert_nothing_left(before, engines)


@pytest.mark.parametrize("method", [pytest.param("rf_threads"),
                                    pytest.param("rf_dask+threads", marks=pytest.mark.dask)])
def test_close_twice_leaves_nothing_running(method: str, engines: Engines) -> None:
    session, before, _ = engines.pop(method)
    session.close()
    session.close()
    assert_nothing_left(before, engines)


@pytest.mark.parametrize("method", ["rf_threads", "rf_processes", "rf_dask", "rf_dask+threads",
                                    "rf_mpi", "rf_spark"])
def test_close_before_start_is_safe(method: str) -> None:
    session = methods.get(method).session(workloads.get(WORKLOAD), config(method))
    session.close()
    session.close()


@pytest.mark.dask
def test_dask_uses_a_given_scheduler_and_leaves_it_running(serial: tuple[Any, Any]) -> None:
    from distributed import Client, LocalCluster

    forest, data = serial
    # the user's own cluster: plain tcp (a per-case certificate is only for clusters we start)
    with LocalCluster(n_workers=1, threads_per_worker=1, host="127.0.0.1",
                      dashboard_address=None) as cluster, Client(cluster) as user:
        address = cluster.scheduler_address
        workers_before = set(user.nthreads())
        cfg = config("rf_dask", workers=1, options={"dask_scheduler": address})
        session = methods.get("rf_dask").session(workloads.get(WORKLOAD), cfg)
        try:
            session.start()
            session.train_epoch(0)
            assert np.array_equal(session.estimator.predict(data.x_test),  # type: ignore[attr-defined]
                                  forest.predict(data.x_test))
            assert session.notes["dask_external"] is True
        finally:
            session.close()
        # the user's cluster is still there and still works
        assert set(user.nthreads()) == workers_before
        assert user.submit(sum, [1, 2]).result() == 3


@pytest.mark.spark
@pytest.mark.slow
def test_spark_forest_reaches_serial_quality_on_loopback(
    serial: tuple[Any, Any], engines: Engines
) -> None:
    forest, data = serial
    wl = workloads.get(WORKLOAD)
    # serial's own spread: the same data, five random_states
    accs = [wl.score(wl.build_estimator(PROFILE, rs, n_jobs=1).fit(data.x_train, data.y_train),
                     data.x_test, data.y_test) for rs in range(5)]
    margin = 3 * float(np.std(accs, ddof=1))
    before = descendants()
    session = methods.get("rf_spark").session(wl, config("rf_spark", epochs=1))
    try:
        session.start()
        jvm = descendants() - before
        assert jvm, "the Spark driver JVM must be a child of the case process"
        assert not non_loopback_listeners(jvm)
        stats = session.train_epoch(0)
        assert np.isfinite(stats.loss)
        quality = session.evaluate()
        assert session.notes["predict_s"] > 0
    finally:
        session.close()
    session.close()
    assert_nothing_left(before, engines)
    assert quality >= float(np.mean(accs)) - margin, (quality, accs)
    assert methods.get("rf_spark").parity == "statistical"


def test_processes_with_one_worker_runs_in_the_case_and_closes_without_killing_it(
        tmp_path: Path) -> None:
    """joblib runs n_jobs=1 in the case's own process: close() once SIGKILLed that process,
    as a 'worker', after every fit ('killed by SIGKILL from outside the case', every seed of
    the regret harness's random_forest-2 scenario). Through the CLI, as a user runs it."""
    out = tmp_path / "one.jsonl"
    done = subprocess.run(
        [sys.executable, "-m", "parabench", "run", "--workload", "random_forest", "--method",
         "rf_processes", "--workers", "1", "--threads", "2", "--profile", "tiny", "--epochs", "1",
         "--out", str(out)], capture_output=True, text=True, timeout=300,
        env={**os.environ, "PARABENCH_WINDOWS": "2", "PARABENCH_WINDOW_S": "0.05"})
    [row] = [json.loads(line) for line in out.read_text().splitlines()]
    assert row["status"] == "ok", row["reason"] + done.stderr[-2000:]
    assert row["extra"]["worker_pids"] == []  # no worker process: the fit ran in the case
