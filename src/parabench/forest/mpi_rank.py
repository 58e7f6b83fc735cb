"""The MPI rank program of the ``rf_mpi`` forest method: ranks that grow their share of a forest.

Usage (what :mod:`parabench.forest.mpi_session` runs; not meant to be started by hand)::

    PARABENCH_MPI_KEY=<hex key> mpiexec -n 4 python -m parabench.forest.mpi_rank \\
        --connect 127.0.0.1:PORT --config '{"workload": "random_forest", ...}'

Every rank loads the case's data itself (the same seeded bytes) and keeps it for the life of
the job. Rank 0 connects back to the session's command socket on ``--connect`` and serves
commands until told to stop, so the job (and its start-up) outlives any number of fits:

- ``("fit",)``: every rank grows trees ``[lo, hi)`` of the workload's estimator (a seed-exact
  slice, see :mod:`parabench.forest.split`); rank 0 gathers the slices in rank order,
  merges them and replies ``("fitted", forest, {"rank_fit_s": [...]})``, or
  ``("error", message)`` when any rank failed, naming the rank.
- ``("stop",)``: every rank leaves the loop and MPI finalizes.

The socket is a :class:`Channel`: loopback only, and authenticated with a per-case secret that
the session hands the launcher in the environment (``PARABENCH_MPI_KEY``, hex; never on the
command line, which every local user can read). Before anything else both ends prove they hold
the key (a challenge-response over fresh nonces, HMAC-SHA256); a peer that fails is refused
before a single byte of it is unpickled. Every message after that is a length-prefixed pickle
carrying an HMAC over the connection's nonces, its direction and its sequence number, checked
before unpickling. If the session goes away, rank 0 aborts the whole job, so no rank outlives
it; a rank that dies takes the job down through the launcher, and the session sees the socket
close.
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import importlib
import json
import os
import pickle
import secrets
import socket
import struct
import sys
import traceback
from collections.abc import Callable
from typing import Any

#: the environment variable that carries the channel key (hex) from the session to rank 0
KEY_ENV = "PARABENCH_MPI_KEY"
_HEADER = struct.Struct("!Q")
_NONCE = 32
_MAC = hashlib.sha256().digest_size


class ChannelClosed(ConnectionError):
    """The other end of the command channel went away."""


class ChannelRefused(ConnectionError):
    """The peer did not prove it holds the case's key, or a message failed its check."""


def new_key() -> bytes:
    return secrets.token_bytes(32)


class Channel:
    """An authenticated message channel over one connected socket; see the module doc.

    ``Channel.accept(sock, key)`` (the listening side, which speaks first) and
    ``Channel.connect(sock, key)`` run the handshake and raise :class:`ChannelRefused` when
    the peer does not hold ``key``; nothing the peer sent has been unpickled by then.
    """

    def __init__(self, sock: socket.socket, key: bytes, *, side: bytes, nonces: bytes) -> None:
        self.sock = sock
        self._key = hmac.new(key, b"session-key" + nonces, hashlib.sha256).digest()
        self._out, self._in = side, (b"R" if side == b"S" else b"S")
        self._sent = self._received = 0

    @classmethod
    def accept(cls, sock: socket.socket, key: bytes, check: Callable[[], None] | None = None
               ) -> Channel:
        mine = secrets.token_bytes(_NONCE)
        sock.sendall(mine)
        answer = _recv_exact(sock, _MAC + _NONCE, check)
        theirs = answer[_MAC:]
        if not hmac.compare_digest(answer[:_MAC], _proof(key, b"R", mine)):
            raise ChannelRefused("the peer does not hold the case's key")
        sock.sendall(_proof(key, b"S", theirs))
        return cls(sock, key, side=b"S", nonces=mine + theirs)

    @classmethod
    def connect(cls, sock: socket.socket, key: bytes, check: Callable[[], None] | None = None
                ) -> Channel:
        theirs = _recv_exact(sock, _NONCE, check)
        mine = secrets.token_bytes(_NONCE)
        sock.sendall(_proof(key, b"R", theirs) + mine)
        if not hmac.compare_digest(_recv_exact(sock, _MAC, check), _proof(key, b"S", mine)):
            raise ChannelRefused("the listening side does not hold the case's key")
        return cls(sock, key, side=b"R", nonces=theirs + mine)

    def _mac(self, direction: bytes, seq: int, payload: bytes) -> bytes:
        head = direction + seq.to_bytes(8, "big")
        return hmac.new(self._key, head + payload, hashlib.sha256).digest()

    def send(self, obj: Any) -> None:
        payload = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
        mac = self._mac(self._out, self._sent, payload)
        self._sent += 1
        self.sock.sendall(_HEADER.pack(len(payload)) + mac + payload)

    def recv(self, check: Callable[[], None] | None = None) -> Any:
        """One message. With ``check``, the socket must have a timeout: ``check`` runs on every
        timeout tick and raises to give up (peer process gone, deadline passed)."""
        head = _recv_exact(self.sock, _HEADER.size + _MAC, check)
        (size,) = _HEADER.unpack(head[: _HEADER.size])
        payload = _recv_exact(self.sock, size, check)
        if not hmac.compare_digest(head[_HEADER.size:], self._mac(self._in, self._received,
                                                                  payload)):
            raise ChannelRefused("a message failed its authentication check")
        self._received += 1
        return pickle.loads(payload)

    def close(self) -> None:
        self.sock.close()


def _proof(key: bytes, role: bytes, nonce: bytes) -> bytes:
    return hmac.new(key, role + nonce, hashlib.sha256).digest()


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
        from parabench.core.clock import Clock
        from parabench.forest.split import slices
        from parabench.registry import workloads

        self.comm = comm
        self.clock = Clock()  # the rank's clock: each fit's seconds (rank_fit_s)
        self.config = RunConfig.from_dict(json.loads(config_json))
        self.workload = workloads.get(self.config.workload)
        self.data = self.workload.dataset(self.config)
        self.template = self.workload.build_estimator(
            self.config.profile, self.config.training_seed, n_jobs=1
        )
        shares = slices(self.template.n_estimators, comm.size)
        self.share = shares[comm.rank] if comm.rank < len(shares) else None

    def fit(self) -> tuple[Any, float, str | None]:
        """(this rank's slice or None, seconds, error text or None)."""
        from parabench.forest.split import grow_slice

        self.comm.Barrier()  # every rank's clock starts together
        part, error = None, None
        with self.clock.region() as took:
            try:
                if self.share is not None:
                    part = grow_slice(self.template, self.data.x_train, self.data.y_train,
                                      *self.share)
            except Exception:  # noqa: BLE001 - reported to rank 0, which reports to the session
                part, error = None, traceback.format_exc(limit=4)
        return part, took[0], error

    def serve(self, channel: Channel | None) -> None:
        """The command loop: rank 0 reads the channel, every rank follows its broadcast."""
        while True:
            command = _next_command(self.comm, channel) if self.comm.rank == 0 else None
            command = self.comm.bcast(command, root=0)
            if command[0] == "stop":
                return
            if command[0] == "fit":
                part, seconds, error = self.fit()
                gathered = self.comm.gather((part, seconds, error), root=0)
                if self.comm.rank == 0:
                    assert channel is not None
                    channel.send(self.reply(gathered))

    def reply(self, gathered: list[tuple[Any, float, str | None]]) -> tuple[Any, ...]:
        """Rank 0's answer to a fit from every rank's (slice, seconds, error), in rank order."""
        return _reply(gathered)


def _next_command(comm: Any, channel: Channel | None) -> tuple[Any, ...]:
    assert channel is not None
    try:
        return tuple(channel.recv())
    except (ChannelClosed, ChannelRefused, OSError):
        # the session is gone: take every rank down rather than leave them waiting
        print("rank 0: command channel lost; aborting the MPI job", file=sys.stderr, flush=True)
        comm.Abort(3)
        raise


def _reply(gathered: list[tuple[Any, float, str | None]]) -> tuple[Any, ...]:
    from parabench.forest.split import merge

    errors = [f"rank {r}: {err}" for r, (_, _, err) in enumerate(gathered) if err]
    if errors:
        return ("error", "; ".join(errors))
    forest = merge([part for part, _, _ in gathered if part is not None])
    return ("fitted", forest, {"rank_fit_s": [seconds for _, seconds, _ in gathered]})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m parabench.forest.mpi_rank")
    parser.add_argument("--connect", required=True, help="HOST:PORT of the session's socket")
    parser.add_argument("--config", required=True, help="the case's RunConfig as JSON")
    parser.add_argument("--rank-class", default=None,
                        help="module:Class of a Rank subclass (tests plant bugs this way)")
    args = parser.parse_args(argv)

    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    try:
        rank = _rank_class(args.rank_class)(comm, args.config)
    except Exception:
        traceback.print_exc()
        comm.Abort(2)  # one rank cannot load: no rank may hang in the barrier below
        return 2
    pids, shares = comm.gather(os.getpid(), root=0), comm.gather(rank.share, root=0)
    channel = None
    if comm.rank == 0:
        try:
            channel = _connect(args.connect)
            channel.send(("ready", {"pids": pids, "shares": shares}))
        except (OSError, ValueError):
            traceback.print_exc()
            comm.Abort(4)  # no session to serve: no rank may wait for commands
            return 4
    rank.serve(channel)
    if channel is not None:
        channel.close()
    return 0


def _rank_class(path: str | None) -> type[Rank]:
    if path is None:
        return Rank
    module, _, name = path.partition(":")
    cls = getattr(importlib.import_module(module), name)
    if not (isinstance(cls, type) and issubclass(cls, Rank)):
        raise TypeError(f"--rank-class {path} is not a Rank subclass")
    return cls


def _connect(address: str) -> Channel:
    """Rank 0's authenticated channel to the session (the key from the environment)."""
    key = bytes.fromhex(os.environ.pop(KEY_ENV, ""))
    if not key:
        raise ChannelRefused(f"{KEY_ENV} is not set: the session's channel needs its key")
    host, port = address.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=60)
    channel = Channel.connect(sock, key)
    sock.settimeout(None)  # rank 0 blocks on commands; the session owns the deadlines
    return channel


if __name__ == "__main__":
    # run the importable module's main, so that its Rank is the class a --rank-class
    # subclass (imported from parabench.forest.mpi_rank) derives from, not __main__'s copy
    from parabench.forest import mpi_rank

    sys.exit(mpi_rank.main())
