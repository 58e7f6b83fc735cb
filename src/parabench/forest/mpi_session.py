"""The session of ``rf_mpi``: a scikit-learn forest grown by mpi4py ranks, a share each.

Usage::

    parabench run --workload random_forest --method rf_mpi --workers 4

``start()`` launches ``mpiexec -n workers python -m parabench.forest.mpi_rank`` once
(start-up = launch + every rank loading the data) and waits for rank 0 to connect back to a
command socket on 127.0.0.1. Each epoch sends one ``fit`` command: every rank grows its
contiguous, seed-exact share of the trees (:mod:`parabench.forest.split`), rank 0
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
import re
import signal
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
from parabench.core.clock import Stopwatch
from parabench.envinfo import THREAD_VARS
from parabench.forest.mpi_rank import KEY_ENV, Channel, ChannelRefused, new_key
from parabench.forest.session import ForestSession
from parabench.workload import Dataset, EstimatorWorkload

LOOPBACK = "127.0.0.1"
STOP_WAIT_S = 10.0
#: how long a connection to the command port has to prove it holds the key
PROOF_WAIT_S = 10.0
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
    #: "module:Class" of the ranks' :class:`~parabench.forest.mpi_rank.Rank` (None: that one)
    rank_class: ClassVar[str | None] = None

    def __init__(self, workload: EstimatorWorkload, config: RunConfig) -> None:
        super().__init__(workload, config)
        self.proc: subprocess.Popen[bytes] | None = None
        self.channel: Channel | None = None
        self.log: Any = None
        self.rank_pids: dict[int, float] = {}  # pid -> create_time
        self.rank_pid_list: list[int] = []  # every rank's pid, in rank order (also gone ones)
        #: connections refused on the command port (they did not hold the case's key)
        self.refused: list[str] = []

    def start_engine(self) -> None:
        key = new_key()
        listener = socket.create_server((LOOPBACK, 0))
        try:
            listener.settimeout(0.5)
            port = listener.getsockname()[1]
            self.log = tempfile.TemporaryFile()
            command = self._command(port)
            self.proc = subprocess.Popen(
                command, stdin=subprocess.DEVNULL, stdout=self.log, stderr=subprocess.STDOUT,
                env=self._env() | {KEY_ENV: key.hex()},  # not argv: every user can read that
            )
            self.notes["mpi_launcher"] = Path(command[0]).name
            deadline = time.monotonic() + min(self.config.timeout_s, 300.0)
            self.channel = self._accept(listener, key, deadline)
        finally:
            listener.close()
            if self.refused:
                self.notes["mpi_refused_connections"] = list(self.refused)
        kind, info = self.channel.recv(self._checker(deadline, "start-up"))
        assert kind == "ready", kind
        for pid in info["pids"]:
            try:
                self.rank_pids[pid] = psutil.Process(pid).create_time()
            except psutil.Error:
                pass  # already gone: the next command will say so
        self.rank_pid_list = list(info["pids"])
        self.notes["rank_pids"] = list(info["pids"])
        self.notes["rank_shares"] = [list(s) if s else None for s in info["shares"]]

    def _command(self, port: int) -> list[str]:
        return [
            launcher(), "-n", str(self.config.workers),
            sys.executable, "-m", "parabench.forest.mpi_rank",
            "--connect", f"{LOOPBACK}:{port}", "--config", json.dumps(self.config.to_dict()),
            *(["--rank-class", self.rank_class] if self.rank_class else []),
        ]

    def _env(self) -> dict[str, str]:
        env = dict(os.environ) | LOOPBACK_ENV
        env.update({var: "1" for var in THREAD_VARS})  # a rank grows one tree at a time
        return env

    def _accept(self, listener: socket.socket, key: bytes, deadline: float) -> Channel:
        """The first connection that proves it holds ``key``; any other is refused (closed
        before anything it sent is unpickled) and the wait goes on."""
        check = self._checker(deadline, "start-up")
        while True:
            try:
                conn, addr = listener.accept()
            except TimeoutError:
                check()
                continue
            conn.settimeout(0.5)
            proof_by = min(deadline, time.monotonic() + PROOF_WAIT_S)

            def within(proof_by: float = proof_by) -> None:
                check()
                if time.monotonic() > proof_by:
                    raise ChannelRefused(f"no proof of the key within {PROOF_WAIT_S:g}s")

            try:
                return Channel.accept(conn, key, within)
            except OSError as exc:  # ChannelRefused, ChannelClosed: a stranger, not the job
                conn.close()
                self.refused.append(f"{addr[0]}:{addr[1]}: {exc}")

    def _checker(self, deadline: float, phase: str) -> Any:
        def check() -> None:
            if self.proc is not None and self.proc.poll() is not None:
                raise MPIJobLost(self._ended(f"the MPI job ended during {phase}"))
            if time.monotonic() > deadline:
                raise MPIJobLost(f"the MPI job did not answer within the deadline ({phase})")

        return check

    def _ended(self, what: str) -> str:
        """Which rank died and how (from the launcher's report), then its last words."""
        rc = self.proc.poll() if self.proc is not None else None
        log = self._log_text()
        pids = self.rank_pid_list
        deaths = rank_deaths(log, pids) or self._vanished(pids)
        head = "; ".join(deaths) or self._launcher_end(rc)
        tail = " | ".join(line.strip() for line in log.splitlines()[-6:] if line.strip())
        return f"{head} ({what})\nlauncher (exit code {rc}) output: {tail}"

    def _launcher_end(self, rc: int | None) -> str:
        pid = self.proc.pid if self.proc is not None else "?"
        if rc is not None and rc < 0:
            return f"the MPI launcher (pid {pid}) was killed by {_signal_name(-rc)}"
        return f"the MPI launcher (pid {pid}) exited with code {rc}"

    def _vanished(self, pids: list[int]) -> list[str]:
        """Ranks whose process is gone, when the launcher did not say how they ended."""
        gone = []
        for rank, pid in enumerate(pids):
            try:
                alive = psutil.Process(pid).create_time() == self.rank_pids.get(pid)
            except psutil.Error:
                alive = False
            if not alive:
                gone.append(f"MPI rank {rank} (pid {pid}) is gone")
        return gone

    def _log_text(self) -> str:
        if self.log is None:
            return ""
        self.log.seek(0)
        return self.log.read().decode(errors="replace").strip()

    def fit(self, data: Dataset) -> Any:
        """The ranks grow their shares; rank 0 sends back the merged forest."""
        assert self.channel is not None, "start() first"
        epoch = self.epoch
        deadline = time.monotonic() + self.config.timeout_s
        watch = Stopwatch()  # the round trip, to split the harness's window into components
        try:
            self.channel.send(("fit",))
            reply = self.channel.recv(self._checker(deadline, f"fit of epoch {epoch}"))
        except OSError as exc:  # ChannelClosed: rank 0 is gone
            self._wait_exit()
            raise MPIJobLost(self._ended(f"lost the MPI job during epoch {epoch}")) from exc
        seconds = watch.seconds()
        if reply[0] == "error":
            raise MPIJobLost(f"a rank failed to grow its trees: {reply[1]}")
        _kind, forest, info = reply
        forest.set_params(n_jobs=self.config.workers)  # predict here with the case's cores
        slowest = max(info["rank_fit_s"])
        self.fit_components = {"slowest_rank_s": slowest, "gather_merge_s": seconds - slowest}
        return forest

    def _wait_exit(self, timeout: float = 5.0) -> None:
        """Give the launcher a moment to finish dying, so its exit code and log are final."""
        if self.proc is not None:
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                pass

    def close(self) -> None:
        channel, proc, self.channel, self.proc = self.channel, self.proc, None, None
        if channel is not None:
            try:
                channel.send(("stop",))
            except OSError:
                pass  # the job is already gone
        if proc is not None:
            try:
                proc.wait(timeout=STOP_WAIT_S)
            except subprocess.TimeoutExpired:
                pass
            _kill_tree(proc.pid)
            proc.wait()
        if channel is not None:
            channel.close()
        for pid, created in self.rank_pids.items():  # a rank the launcher lost track of
            _kill_tree(pid, created)
        self.rank_pids = {}
        if self.log is not None:
            self.log.close()
            self.log = None


#: gforker's report of each rank: "[0]1:Return code = 0, signaled with Killed"
_GFORKER_RANK = re.compile(r"^\[\d+\](\d+):Return code = (-?\d+)(?:, signaled with (.+))?$", re.M)
#: Hydra's: "... PID 1234 RUNNING AT host ... EXIT CODE: 9"
_HYDRA_RANK = re.compile(r"PID (\d+) RUNNING AT .*?EXIT CODE: (\d+)", re.S)
_HYDRA_SIGNAL = re.compile(r"EXIT STRING: .*\(signal (\d+)\)")
#: what the launcher does to the ranks that were still running after one died
_LAUNCHER_STOPS = {"Quit", "Terminated", "Interrupt"}


def rank_deaths(log: str, pids: list[int]) -> list[str]:
    """"MPI rank 1 (pid N) was killed by SIGKILL" for each rank the launcher reports as
    failed by itself (the ranks it stopped afterwards are left out)."""
    found = []
    for rank_s, code_s, sig_text in _GFORKER_RANK.findall(log):
        rank, code, sig_text = int(rank_s), int(code_s), sig_text.strip()
        who = f"MPI rank {rank}" + (f" (pid {pids[rank]})" if rank < len(pids) else "")
        if sig_text and sig_text not in _LAUNCHER_STOPS:
            found.append(f"{who} was killed by {_signal_name(sig_text)}")
        elif code != 0 and not sig_text:
            found.append(f"{who} exited with code {code}")
    if not found:
        signalled = _HYDRA_SIGNAL.search(log)
        for pid_s, code_s in _HYDRA_RANK.findall(log):
            pid = int(pid_s)
            who = f"MPI rank {pids.index(pid)}" if pid in pids else "an MPI rank"
            how = (f"was killed by {_signal_name(int(signalled.group(1)))}" if signalled
                   else f"exited with code {code_s}")
            found.append(f"{who} (pid {pid}) {how}")
    return found


def _signal_name(sig: str | int) -> str:
    """SIGKILL for 9 or for strsignal's "Killed"; the text itself when it is neither."""
    for member in signal.Signals:
        if sig == member.value or sig == signal.strsignal(member):
            return member.name
    return str(sig)


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
