"""The MPI rank program of the ``mpi`` forest method: ranks that grow their share of a forest.

Usage (what :mod:`parabench.methods.forest_mpi` runs; not meant to be started by hand)::

    mpiexec -n 4 python -m parabench.engines.mpi_forest_rank \\
        --connect 127.0.0.1:PORT --config '{"workload": "random_forest", ...}'

Every rank loads the case's data itself (the same seeded bytes) and keeps it for the life of
the job. Rank 0 connects back to the session's command socket on ``--connect`` and serves
commands until told to stop, so the job (and its start-up) outlives any number of fits:

- ``("fit",)``: every rank grows trees ``[lo, hi)`` of the workload's estimator (a seed-exact
  slice, see :mod:`parabench.engines.forest_split`); rank 0 gathers the slices in rank order,
  merges them and replies ``("fitted", forest, {"rank_fit_s": [...]})``, or
  ``("error", message)`` when any rank failed, naming the rank.
- ``("stop",)``: every rank leaves the loop and MPI finalizes.

Messages on the socket are length-prefixed pickles (:func:`send_msg` / :func:`recv_msg`; the
socket is loopback-only and both ends are this program). If the session goes away, rank 0
aborts the whole job, so no rank outlives it; a rank that dies takes the job down through the
launcher, and the session sees the socket close.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import socket
import struct
import sys
import time
import traceback
from collections.abc import Callable
from typing import Any

_HEADER = struct.Struct("!Q")


class ChannelClosed(ConnectionError):
    """The other end of the command channel went away."""


def send_msg(sock: socket.socket, obj: Any) -> None:
    payload = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    sock.sendall(_HEADER.pack(len(payload)) + payload)


def recv_msg(sock: socket.socket, check: Callable[[], None] | None = None) -> Any:
    """One message. With ``check``, the socket must have a timeout: ``check`` runs on every
    timeout tick and raises to give up (peer process gone, deadline passed)."""
    (size,) = _HEADER.unpack(_recv_exact(sock, _HEADER.size, check))
    return pickle.loads(_recv_exact(sock, size, check))


def _recv_exact(sock: socket.socket, size: int, check: Callable[[], None] | None) -> bytes:
    buf = bytearray()
    while len(buf) < size:
        try:
            chunk = sock.recv(min(size - len(buf), 1 << 22))
        except TimeoutError:
            if check is not None:
                check()
            continue
        if not chunk:
            raise ChannelClosed("the command channel closed")
        buf += chunk
    return bytes(buf)


class Rank:
    """One rank's state: the data, its slice of the trees, the communicator."""

    def __init__(self, comm: Any, config_json: str) -> None:
        from parabench.config import RunConfig
        from parabench.engines.forest_split import slices
        from parabench.registry import workloads

        self.comm = comm
        self.config = RunConfig.from_dict(json.loads(config_json))
        self.workload = workloads.get(self.config.workload)
        self.data = self.workload.dataset(self.config)
        self.template = self.workload.build_estimator(
            self.config.profile, self.config.seed, n_jobs=1
        )
        shares = slices(self.template.n_estimators, comm.size)
        self.share = shares[comm.rank] if comm.rank < len(shares) else None

    def fit(self) -> tuple[Any, float, str | None]:
        """(this rank's slice or None, seconds, error text or None)."""
        from parabench.engines.forest_split import grow_slice

        self.comm.Barrier()  # every rank's clock starts together
        t0 = time.perf_counter()
        try:
            part = None
            if self.share is not None:
                part = grow_slice(self.template, self.data.x_train, self.data.y_train, *self.share)
            return part, time.perf_counter() - t0, None
        except Exception:  # noqa: BLE001 - reported to rank 0, which reports to the session
            return None, time.perf_counter() - t0, traceback.format_exc(limit=4)

    def serve(self, sock: socket.socket | None) -> None:
        """The command loop: rank 0 reads the socket, every rank follows its broadcast."""
        while True:
            command = _next_command(self.comm, sock) if self.comm.rank == 0 else None
            command = self.comm.bcast(command, root=0)
            if command[0] == "stop":
                return
            if command[0] == "fit":
                part, seconds, error = self.fit()
                gathered = self.comm.gather((part, seconds, error), root=0)
                if self.comm.rank == 0:
                    assert sock is not None
                    send_msg(sock, _reply(gathered))


def _next_command(comm: Any, sock: socket.socket | None) -> tuple[Any, ...]:
    assert sock is not None
    try:
        return tuple(recv_msg(sock))
    except (ChannelClosed, OSError):
        # the session is gone: take every rank down rather than leave them waiting
        print("rank 0: command channel lost; aborting the MPI job", file=sys.stderr, flush=True)
        comm.Abort(3)
        raise


def _reply(gathered: list[tuple[Any, float, str | None]]) -> tuple[Any, ...]:
    from parabench.engines.forest_split import merge

    errors = [f"rank {r}: {err}" for r, (_, _, err) in enumerate(gathered) if err]
    if errors:
        return ("error", "; ".join(errors))
    forest = merge([part for part, _, _ in gathered if part is not None])
    return ("fitted", forest, {"rank_fit_s": [seconds for _, seconds, _ in gathered]})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m parabench.engines.mpi_forest_rank")
    parser.add_argument("--connect", required=True, help="HOST:PORT of the session's socket")
    parser.add_argument("--config", required=True, help="the case's RunConfig as JSON")
    args = parser.parse_args(argv)

    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    try:
        rank = Rank(comm, args.config)
    except Exception:
        traceback.print_exc()
        comm.Abort(2)  # one rank cannot load: no rank may hang in the barrier below
        return 2
    pids, shares = comm.gather(os.getpid(), root=0), comm.gather(rank.share, root=0)
    sock = None
    if comm.rank == 0:
        host, port = args.connect.rsplit(":", 1)
        sock = socket.create_connection((host, int(port)), timeout=60)
        sock.settimeout(None)  # rank 0 blocks on commands; the session owns the deadlines
        send_msg(sock, ("ready", {"pids": pids, "shares": shares}))
    rank.serve(sock)
    if sock is not None:
        sock.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
