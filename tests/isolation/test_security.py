"""What a case exposes to other users of the machine: loopback-only listeners, an
authenticated MPI command channel, a private Dask cluster, CIFAR files that cannot run code,
and external engines that are refused in seconds when nothing answers.

The listener test runs each engine's case through the real CLI and lists, with psutil, every
socket its processes listen on while it runs.
"""

from __future__ import annotations

import pickle
import socket
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from casewatch import Watched, is_loopback, watch_run
from parabench.registry import methods

pytestmark = pytest.mark.cpu

TORCH = pytest.mark.torch
#: the torch process-group methods, watched in one CLI run (one interpreter and torch import
#: for the four cases instead of four); each still shows its own cases' listeners
TORCH_GROUP = ("ddp", "fsdp", "pipeline", "fedavg")
LISTENER_CASES = [
    pytest.param("mlp", "ddp", marks=TORCH),
    pytest.param("mlp", "fsdp", marks=[TORCH, pytest.mark.slow]),
    pytest.param("mlp", "pipeline", marks=[TORCH, pytest.mark.slow]),
    pytest.param("mlp", "fedavg", marks=[TORCH, pytest.mark.slow]),
    pytest.param("random_forest", "rf_dask", marks=pytest.mark.dask),
    pytest.param("random_forest", "rf_mpi", marks=pytest.mark.mpi),
    pytest.param("random_forest", "rf_spark", marks=[pytest.mark.spark, pytest.mark.slow]),
]


def _require(method: str) -> None:
    if (reason := methods.get(method).unavailable("cpu")) is not None:
        pytest.skip(f"{method}: {reason}")


def _watched(workload: str, methods_: str, out: Path) -> Watched:
    return watch_run(["--workload", workload, "--method", methods_, "--workers", "2",
                      "--device", "cpu", "--profile", "tiny", "--epochs", "2"],
                     out=out, poll_s=0.05)


@pytest.fixture(scope="module")
def torch_group_run(tmp_path_factory: pytest.TempPathFactory) -> Watched:
    """One watched run of every runnable torch process-group method."""
    runnable = [m for m in TORCH_GROUP if methods.get(m).unavailable("cpu") is None]
    if not runnable:
        pytest.skip("no torch process-group method runs here")
    return _watched("mlp", ",".join(runnable), tmp_path_factory.mktemp("listen") / "r.jsonl")


@pytest.mark.slow
@pytest.mark.parametrize(("workload", "method"), LISTENER_CASES)
def test_a_case_listens_on_loopback_only(workload: str, method: str, tmp_path: Path,
                                         request: pytest.FixtureRequest) -> None:
    _require(method)
    if method in TORCH_GROUP:
        run = request.getfixturevalue("torch_group_run")
        listeners = run.listeners_of(method)
    else:
        run = _watched(workload, method, tmp_path / "r.jsonl")
        listeners = run.listeners
    assert run.rc == 0, run.stderr
    assert listeners, "saw no listening socket: the watch missed the case"
    exposed = sorted(item for item in listeners if not is_loopback(item[2]))
    assert not exposed, f"{method} listens beyond loopback (pid, name, ip, port): {exposed}"


@pytest.mark.tf
@pytest.mark.slow
def test_tf_multiworker_exposes_only_tensorflows_grpc_ports_and_the_result_says_so(
    tmp_path: Path,
) -> None:
    """TensorFlow hard-codes 0.0.0.0 for its gRPC servers: the one documented exception. Any
    other non-loopback listener of the case, or a result that does not name the ports, fails."""
    from parabench.case.result import read_results

    _require("tf_multiworker")
    out = tmp_path / "r.jsonl"
    run = watch_run(["--workload", "mlp", "--method", "tf_multiworker", "--workers", "2",
                     "--device", "cpu", "--profile", "tiny", "--epochs", "2"],
                    out=out, poll_s=0.05)
    assert run.rc == 0, run.stderr
    [result] = read_results(out)
    note = result.extra["exposed_listeners"]
    exposed = {port for _pid, _name, ip, port in run.listeners if not is_loopback(ip)}
    assert exposed, "saw no gRPC listener: the watch missed the case"
    assert exposed <= set(note["ports"]), f"listeners beyond TensorFlow's gRPC ports: {exposed}"


# ---- the MPI command channel ----------------------------------------------------------------


class _Payload:
    """Unpickling this creates ``marker``: proof that a peer's bytes were unpickled."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str, str]]:
        return (open, (str(self.marker), "w"))


def _stranger(port: int, marker: Path) -> bytes:
    """Connect without the key, answer the challenge with garbage, then send a pickle that
    would create ``marker`` if anyone unpickled it. Returns what the listener sent back."""
    payload = pickle.dumps(_Payload(marker))
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.settimeout(30)
        challenge = sock.recv(32)
        try:
            sock.sendall(b"\0" * 64 + len(payload).to_bytes(8, "big") + b"\0" * 32 + payload)
            reply = sock.recv(64)
        except ConnectionResetError:
            reply = b""
    return challenge + b"|" + reply


def test_mpi_channel_refuses_a_peer_without_the_key_before_unpickling(tmp_path: Path) -> None:
    from parabench.forest.mpi_rank import Channel, ChannelRefused, new_key

    key, marker = new_key(), tmp_path / "unpickled"
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]
        seen: list[str] = []

        def serve_one() -> None:
            conn, _ = listener.accept()
            conn.settimeout(30)
            try:
                Channel.accept(conn, key).recv()
                seen.append("accepted")
            except ChannelRefused as exc:
                seen.append(f"refused: {exc}")
            finally:
                conn.close()

        server = threading.Thread(target=serve_one)
        server.start()
        answer = _stranger(port, marker)
        server.join(30)
    assert seen == ["refused: the peer does not hold the case's key"]
    assert answer.endswith(b"|"), "the listener must send nothing after a failed proof"
    assert not marker.exists(), "the stranger's pickle was unpickled"


def test_mpi_channel_carries_messages_and_refuses_replayed_or_altered_ones() -> None:
    from parabench.forest.mpi_rank import Channel, ChannelRefused, new_key

    key = new_key()
    a, b = socket.socketpair()
    got: list[Channel] = []
    side = threading.Thread(target=lambda: got.append(Channel.connect(b, key)))
    side.start()
    left = Channel.accept(a, key)
    side.join(10)
    right = got[0]
    left.send(("fit",))
    assert right.recv() == ("fit",)
    right.send({"n": 1})
    assert left.recv() == {"n": 1}
    left.send(("stop",))
    b.settimeout(5)
    frame = b.recv(1 << 16)  # the frame's raw bytes, taken off the wire
    a.sendall(frame)
    assert right.recv() == ("stop",)  # delivered once
    a.sendall(frame)
    with pytest.raises(ChannelRefused):
        right.recv()  # the same frame again: its sequence number is spent
    a.sendall(frame[:-1] + bytes([frame[-1] ^ 1]))
    with pytest.raises(ChannelRefused):
        right.recv()  # one bit of the pickle changed


@pytest.mark.mpi
@pytest.mark.slow
def test_mpi_session_refuses_a_stranger_and_still_starts(tmp_path: Path) -> None:
    """A local process that connects to the real session's command port first is refused
    without its bytes being unpickled, and the MPI job behind it still connects."""
    import psutil

    from parabench.config import RunConfig
    from parabench.registry import workloads

    _require("rf_mpi")
    marker = tmp_path / "unpickled"
    cfg = RunConfig(workload="random_forest", method="rf_mpi", workers=2, profile="tiny",
                    epochs=2, timeout_s=120.0)
    session = methods.get("rf_mpi").session(workloads.get("random_forest"), cfg)
    before = {c.laddr.port for c in psutil.Process().net_connections("inet")}
    starter = threading.Thread(target=session.start)
    starter.start()
    try:
        port = None
        while port is None and starter.is_alive():
            ports = {c.laddr.port for c in psutil.Process().net_connections("inet")
                     if c.status == psutil.CONN_LISTEN} - before
            port = next(iter(ports), None)
            time.sleep(0.01)
        assert port is not None, "the session never listened"
        try:
            _stranger(port, marker)
        except OSError:
            pass  # the job's rank 0 was faster: the listener is closed, the stranger refused
        starter.join(120)
        assert session.notes.get("rank_pids"), "the session did not start"
        refused = session.notes.get("mpi_refused_connections", [])
        assert len(refused) <= 1 and all("key" in r for r in refused), refused
        session.train_epoch(0)  # the job behind the channel works
    finally:
        starter.join(120)
        session.close()
    assert not marker.exists(), "the stranger's pickle was unpickled"


# ---- Dask -----------------------------------------------------------------------------------


@pytest.mark.dask
def test_local_dask_cluster_refuses_a_client_without_the_case_certificate() -> None:
    pytest.importorskip("cryptography")
    from distributed import Client

    from parabench.engines.dask_cluster import DaskCluster

    with DaskCluster(workers=1, threads_per_worker=1) as cluster:
        address = cluster.client.scheduler.address
        assert address.startswith("tls://127.0.0.1:")
        assert cluster.security_mode == "tls (per-case certificate)"
        plain = address.replace("tls://", "tcp://")
        with pytest.raises((OSError, TimeoutError, TypeError)):
            Client(plain, timeout=5, set_as_default=False)
        with pytest.raises((OSError, TimeoutError, TypeError)):
            Client(address, timeout=5, set_as_default=False)  # tls, but no certificate


# ---- CIFAR-10 -------------------------------------------------------------------------------


def test_cifar_batch_that_would_run_code_is_refused_unread(tmp_path: Path) -> None:
    from datafiles import write_cifar10
    from parabench.workloads.datasets import DatasetError, load_cifar10

    write_cifar10(tmp_path, 10)
    marker = tmp_path / "unpickled"
    (tmp_path / "cifar-10-batches-py/data_batch_3").write_bytes(
        pickle.dumps({"data": np.zeros((2, 3072), np.uint8), "labels": _Payload(marker)})
    )
    with pytest.raises(DatasetError, match=r"data_batch_3: not a CIFAR-10 python batch "
                                           r"\(it references \S*open, .*could run code"):
        load_cifar10(str(tmp_path))
    assert not marker.exists()


# ---- external engines -----------------------------------------------------------------------


@pytest.mark.parametrize(("method", "option", "value"), [
    pytest.param("rf_dask", "--dask-scheduler", "tcp://127.0.0.1:1", marks=pytest.mark.dask),
    pytest.param("rf_spark", "--spark-master", "spark://127.0.0.1:1", marks=pytest.mark.spark),
])
def test_unreachable_external_engine_is_a_usage_error(
    method: str, option: str, value: str, tmp_path: Path
) -> None:
    _require(method)
    t0 = time.monotonic()
    run = watch_run(["--workload", "random_forest", "--method", method, "--workers", "2",
                     "--profile", "tiny", "--epochs", "2", option, value],
                    out=tmp_path / "r.jsonl")
    waited = time.monotonic() - t0
    assert run.rc == 2, run.stderr
    lines = [line for line in run.stderr.splitlines() if "error" in line]
    assert f"{option} {value}: nothing answers at 127.0.0.1:1" in run.stderr, lines
    # the engines' own retries took 100-130 s; the probe answers in seconds (a loaded
    # machine only slows the case process's start, so the bound is wide)
    assert waited < 90, f"took {waited:.0f}s"
