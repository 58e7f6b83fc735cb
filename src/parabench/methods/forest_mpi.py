"""``mpi``: a scikit-learn forest grown by mpi4py ranks, one share of the trees each.

Usage::

    parabench run --workload random_forest --method mpi --workers 4

``start()`` launches ``mpiexec -n workers python -m parabench.engines.mpi_forest_rank`` once
(start-up = launch + every rank loading the data) and waits for rank 0 to connect back to a
command socket on 127.0.0.1. Each epoch sends one ``fit`` command: every rank grows its
contiguous, seed-exact share of the trees (:mod:`parabench.engines.forest_split`), rank 0
gathers and merges them in order and sends the forest back, so the forest predicts exactly
like ``serial``'s. The epoch time is the whole round trip; ``components`` splits it into the
slowest rank's tree building and the rest (gather, merge, transfer).

The launcher is MPICH's single-host ``mpiexec.gforker`` when it sits beside
:func:`parabench.hardware.mpi_launcher` (the ``mpich`` wheel ships it), because Hydra's
``mpiexec`` always listens on every interface for its proxies; otherwise that ``mpiexec``.
Ranks get loopback-only network settings for UCX, libfabric and Open MPI. Ranks are
descendants of the case process, so the runner counts their memory and its kill reaches them.

A rank that dies takes the job down (the launcher kills the rest); the session notices the
closed socket or the launcher's exit and raises :class:`MPIJobLost` with the launcher's last
words. ``close()`` stops the job politely, then kills whatever is left.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, ClassVar

import psutil

from parabench import hardware
from parabench.config import RunConfig
from parabench.envinfo import THREAD_VARS
from parabench.method import EpochStats
from parabench.methods.forest_joblib import ForestSession, _ForestMethod
from parabench.registry import methods
from parabench.workload import Dataset, EstimatorWorkload

LOOPBACK = "127.0.0.1"
STOP_WAIT_S = 10.0
LOOPBACK_ENV = {
    "UCX_NET_DEVICES": "lo",  # MPICH's ch4:ucx netmod (the mpich wheel)
    "FI_TCP_IFACE": "lo",  # MPICH built with libfabric
    "OMPI_MCA_btl_tcp_if_include": "lo",  # Open MPI
    "OMPI_MCA_oob_tcp_if_include": "lo",
}


class MPIJobLost(RuntimeError):
    """The MPI job ended (a rank died, the launcher failed) while the case needed it."""


def launcher() -> str:
    base = hardware.mpi_launcher()
    if base is None:
        raise MPIJobLost("no MPI launcher found; pip install 'parabench[mpi]'")
    gforker = Path(base).parent / "mpiexec.gforker"
    return str(gforker) if gforker.exists() else base


class MPIForestSession(ForestSession):
    def __init__(self, workload: EstimatorWorkload, config: RunConfig) -> None:
        super().__init__(workload, config)
        self.proc: subprocess.Popen[bytes] | None = None
        self.sock: socket.socket | None = None
        self.log: Any = None
        self.rank_pids: dict[int, float] = {}  # pid -> create_time

    def start_engine(self) -> None:
        from parabench.engines.mpi_forest_rank import recv_msg

        listener = socket.create_server((LOOPBACK, 0))
        try:
            listener.settimeout(0.5)
            port = listener.getsockname()[1]
            self.log = tempfile.TemporaryFile()
            command = self._command(port)
            self.proc = subprocess.Popen(
                command, stdin=subprocess.DEVNULL, stdout=self.log, stderr=subprocess.STDOUT,
                env=self._env(),
            )
            self.notes["mpi_launcher"] = Path(command[0]).name
            deadline = time.monotonic() + min(self.config.timeout_s, 300.0)
            self.sock = self._accept(listener, deadline)
        finally:
            listener.close()
        self.sock.settimeout(0.5)
        kind, info = recv_msg(self.sock, self._checker(deadline, "start-up"))
        assert kind == "ready", kind
        for pid in info["pids"]:
            try:
                self.rank_pids[pid] = psutil.Process(pid).create_time()
            except psutil.Error:
                pass  # already gone: the next command will say so
        self.notes["rank_pids"] = list(info["pids"])
        self.notes["rank_shares"] = [list(s) if s else None for s in info["shares"]]

    def _command(self, port: int) -> list[str]:
        return [
            launcher(), "-n", str(self.config.workers),
            sys.executable, "-m", "parabench.engines.mpi_forest_rank",
            "--connect", f"{LOOPBACK}:{port}", "--config", json.dumps(self.config.to_dict()),
        ]

    def _env(self) -> dict[str, str]:
        env = dict(os.environ) | LOOPBACK_ENV
        env.update({var: "1" for var in THREAD_VARS})  # a rank grows one tree at a time
        return env

    def _accept(self, listener: socket.socket, deadline: float) -> socket.socket:
        check = self._checker(deadline, "start-up")
        while True:
            try:
                conn, _addr = listener.accept()
                return conn
            except TimeoutError:
                check()

    def _checker(self, deadline: float, phase: str) -> Any:
        def check() -> None:
            if self.proc is not None and self.proc.poll() is not None:
                raise MPIJobLost(self._ended(f"the MPI job ended during {phase}"))
            if time.monotonic() > deadline:
                raise MPIJobLost(f"the MPI job did not answer within the deadline ({phase})")

        return check

    def _ended(self, what: str) -> str:
        rc = self.proc.poll() if self.proc is not None else None
        return f"{what} (launcher exit code {rc}): {self._log_tail()}"

    def _log_tail(self, lines: int = 6) -> str:
        if self.log is None:
            return ""
        self.log.seek(0)
        text = self.log.read().decode(errors="replace").strip().splitlines()
        return " | ".join(line.strip() for line in text[-lines:] if line.strip())

    def fit(self, data: Dataset) -> Any:
        raise NotImplementedError("the ranks fit; see train_epoch")

    def train_epoch(self, epoch: int) -> EpochStats:
        from parabench.engines.mpi_forest_rank import ChannelClosed, recv_msg, send_msg

        assert self.data is not None and self.sock is not None, "start() first"
        deadline = time.monotonic() + self.config.timeout_s
        t0 = time.perf_counter()
        try:
            send_msg(self.sock, ("fit",))
            reply = recv_msg(self.sock, self._checker(deadline, f"fit of epoch {epoch}"))
        except (ChannelClosed, OSError) as exc:
            self._wait_exit()
            raise MPIJobLost(self._ended(f"lost the MPI job during epoch {epoch}")) from exc
        seconds = time.perf_counter() - t0
        if reply[0] == "error":
            raise MPIJobLost(f"a rank failed to grow its trees: {reply[1]}")
        _kind, forest, info = reply
        forest.set_params(n_jobs=self.config.workers)  # predict here with the case's cores
        self.estimator = forest
        slowest = max(info["rank_fit_s"])
        loss = self.workload.train_loss(forest, self.data)
        return EpochStats(
            seconds=seconds, loss=loss, samples=self.samples_per_epoch,
            components={"slowest_rank_s": slowest, "gather_merge_s": seconds - slowest},
        )

    def _wait_exit(self, timeout: float = 5.0) -> None:
        """Give the launcher a moment to finish dying, so its exit code and log are final."""
        if self.proc is not None:
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                pass

    def close(self) -> None:
        from parabench.engines.mpi_forest_rank import send_msg

        sock, proc, self.sock, self.proc = self.sock, self.proc, None, None
        if sock is not None:
            try:
                send_msg(sock, ("stop",))
            except OSError:
                pass  # the job is already gone
        if proc is not None:
            try:
                proc.wait(timeout=STOP_WAIT_S)
            except subprocess.TimeoutExpired:
                pass
            _kill_tree(proc.pid)
            proc.wait()
        if sock is not None:
            sock.close()
        for pid, created in self.rank_pids.items():  # a rank the launcher lost track of
            _kill_tree(pid, created)
        self.rank_pids = {}
        if self.log is not None:
            self.log.close()
            self.log = None


def _kill_tree(pid: int, created: float | None = None) -> None:
    try:
        root = psutil.Process(pid)
        if created is not None and root.create_time() != created:
            return  # the pid was recycled: not ours
        procs = [*root.children(recursive=True), root]
    except psutil.Error:
        return
    for proc in procs:
        try:
            proc.kill()
        except psutil.Error:
            pass


@methods.register
class MPI(_ForestMethod):
    name: ClassVar[str] = "mpi"
    description: ClassVar[str] = "mpi4py ranks each grow a seed-exact share of the trees"
    requires: ClassVar[frozenset[str]] = frozenset({"sklearn", "mpi"})
    session_class = MPIForestSession
