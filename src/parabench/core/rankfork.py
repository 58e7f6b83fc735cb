"""A pre-started case's pool ranks, forked from a copy of the case taken before it ran anything.

Usage (:mod:`parabench.case.execute` makes the copy, :class:`~parabench.core.pool.WorkerPool`
takes it)::

    start_if_asked(config)      # first thing in a case the runner forked (ENV names a listing)
    zygote = take(backend="gloo", device="cpu", threads=1)   # in the pool; None: spawn ranks
    if zygote is not None:
        proc = zygote.fork(entry, (rank, spec), child_conn)  # pid, sentinel, join, kill, ...
        zygote.close()          # once the pool's ranks are forked: the copy exits

A pool's ranks are spawned: each starts an interpreter and imports torch (2-3 s a case on two
cores, every pool case of a sweep). A case forked from a pre-started interpreter
(:mod:`parabench.core.prestart`) has torch imported already, but cannot fork its ranks when
its pool starts: by then it may have run an OpenMP region, and libgomp's threads do not
survive a fork. So, first thing, before any torch operation or thread, it forks a copy of
itself (the *zygote*), which waits. When the pool starts, the zygote forks each rank (through
an intermediate that exits at once, so the rank's parent becomes the case: a child subreaper,
``PR_SET_CHILD_SUBREAPER``, as a spawned rank's is), hands it the rank's end of its pipe
(``SCM_RIGHTS``) and the environment a spawned rank would have had, then exits. A rank maps in
the library pages the case held (:func:`parabench.core.prestart_server.populate`), waits until
the case is its parent, and runs the pool's rank entry as a spawned rank does. Ranks are
children of the case, so the pool reads their exit codes and sentinels (``pidfd``) as before,
and the case's process-group kill reaches them.

Memory reads as spawned ranks' would: the file the runner names (``PARABENCH_RANK_FORK``)
lists the zygote (left out of the case's memory, as it holds nothing of its own) and the ranks;
the runner's sampler counts the anonymous pages a rank still shares with the case in full, as
a spawned rank holds its own copy of them (:class:`parabench.core.sampler.TreeSampler`).

Only where nothing read at import differs from a spawned rank's: a torch process group
(gloo), on the CPU (CUDA is initialised per process and is not forked here), the thread
variables the case imported with equal to the ranks' own, and no per-rank environment. A
zygote that died while it waited (killed from outside) is not the case's end: the pool finds
it dead, or its first fork fails, and the ranks left to start spawn.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import pickle
import select
import signal
import socket
import sys
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

#: the runner names the file the case lists its zygote and ranks in; unset: ranks spawn
ENV = "PARABENCH_RANK_FORK"
_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36
_MAX_REQUEST = 64 * 1024  # a rank's pickled entry and arguments (a larger one spawns)
_PARENT_WAIT_S = 10.0


def _prctl(option: int, value: int) -> int:
    return int(ctypes.CDLL(None, use_errno=True).prctl(option, value))


def record(path: Path, kind: str, pid: int) -> None:
    """Add ``kind pid`` to the list the runner's sampler reads (``zygote`` or ``rank``)."""
    with open(path, "a") as out:
        out.write(f"{kind} {pid}\n")


def read_record(path: Path | None) -> dict[str, set[int]]:
    """The pids listed in ``path`` by kind (``zygote``, ``rank``); empty when unreadable."""
    out: dict[str, set[int]] = {"zygote": set(), "rank": set()}
    if path is None:
        return out
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return out
    for line in lines:
        kind, _, pid = line.partition(" ")
        if kind in out and pid.strip().isdigit():
            out[kind].add(int(pid))
    return out


class ForkedRank:
    """A rank forked by the zygote, now this process's child: what the pool uses of
    ``multiprocessing.Process`` (``pid``, ``sentinel``, ``is_alive``, ``join``, ``kill``,
    ``exitcode``)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.sentinel = os.pidfd_open(pid)  # readable once the rank has ended
        self.exitcode: int | None = None

    def _reap(self) -> bool:
        if self.exitcode is not None:
            return True
        try:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
        except ChildProcessError:  # reaped elsewhere: how it ended is unknown
            self.exitcode = -int(signal.SIGKILL)
            return True
        if pid == 0:
            return False
        self.exitcode = os.waitstatus_to_exitcode(status)
        return True

    def is_alive(self) -> bool:
        return not self._reap()

    def join(self, timeout: float | None = None) -> None:
        if not self._reap() and self.sentinel >= 0:
            select.select([self.sentinel], [], [], timeout)
            self._reap()

    def kill(self) -> None:
        if not self._reap():
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)

    def release(self) -> None:
        """Close the pidfd (after the pool has finished with the rank)."""
        if self.sentinel >= 0:
            os.close(self.sentinel)
            self.sentinel = -1


class Zygote:
    """The case's copy, forked before it ran anything; forks ranks on request."""

    def __init__(self, listing: Path) -> None:
        from parabench.core.prestart_server import resident_file_pages

        self.listing = listing
        runs = resident_file_pages()  # the pages the case holds: a fork child holds none
        _prctl(_PR_SET_CHILD_SUBREAPER, 1)  # a rank whose parent exits becomes our child
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        case = os.getpid()
        pid = os.fork()
        if pid == 0:
            ours.close()
            try:
                _serve(theirs, runs, case)
            finally:
                os._exit(0)
        theirs.close()
        self.pid, self._sock = pid, ours
        self.environ = dict(os.environ)  # what the zygote (and each rank) imported with
        record(listing, "zygote", pid)

    def fork(self, entry: Callable[..., Any], args: tuple[Any, ...],
             conn: Connection) -> ForkedRank:
        """A rank running ``entry(*args, conn_of_the_rank)``, with this process's environment
        as it is now (the pool's thread and gloo variables)."""
        payload = pickle.dumps((entry, args, dict(os.environ)))
        if len(payload) > _MAX_REQUEST:
            raise OSError(f"rank request of {len(payload)} bytes")
        socket.send_fds(self._sock, [payload], [conn.fileno()])
        answer = self._sock.recv(64)
        if not answer.isdigit():
            raise OSError(f"the zygote did not fork the rank ({answer!r})")
        pid = int(answer)
        record(self.listing, "rank", pid)
        return ForkedRank(pid)

    def alive(self) -> bool:
        """Whether the zygote still runs (one that ended is reaped here)."""
        try:
            return os.waitpid(self.pid, os.WNOHANG) == (0, 0)
        except ChildProcessError:
            return False

    def close(self) -> None:
        """The zygote exits (its end of the socket closes) and is reaped."""
        if self._sock.fileno() < 0:
            return
        self._sock.close()
        with contextlib.suppress(ChildProcessError):
            os.waitpid(self.pid, 0)


def _serve(sock: socket.socket, runs: list[tuple[int, int]], case: int) -> None:
    """The zygote: fork a rank per request until the case closes the socket."""
    _prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL))
    if os.getppid() != case:
        return
    while True:
        try:
            payload, fds, _, _ = socket.recv_fds(sock, _MAX_REQUEST, 1)
        except OSError:
            return
        if not payload or not fds:
            return
        read_end, write_end = os.pipe()
        middle = os.fork()
        if middle == 0:  # exits at once, so that the rank's parent becomes the case
            os.close(read_end)
            rank = os.fork()
            if rank == 0:
                os.close(write_end)
                sock.close()
                _rank(payload, fds[0], runs, case)
            os.write(write_end, str(rank).encode())
            os._exit(0)
        os.close(write_end)
        os.close(fds[0])
        os.waitpid(middle, 0)
        pid = os.read(read_end, 32)
        os.close(read_end)
        sock.send(pid or b"error")


def _rank(payload: bytes, fd: int, runs: list[tuple[int, int]], case: int) -> None:
    """A forked rank: wait to be the case's child, map the library pages in, run the entry
    (never returns)."""
    code = 1
    try:
        waited = time.monotonic()
        while os.getppid() != case:  # the intermediate is exiting; then the case adopts us
            if time.monotonic() - waited > _PARENT_WAIT_S:
                os._exit(1)
            time.sleep(0.001)
        # as a spawned rank: the case's handlers (SIGTERM kills the case's group) are not its
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        from parabench.core.prestart_server import populate

        populate(runs)
        entry, args, environ = pickle.loads(payload)  # noqa: S301 - our own case's request
        os.environ.clear()
        os.environ.update(environ)
        entry(*args, Connection(fd))
        code = 0
    except BaseException:  # noqa: BLE001 - printed as a spawned rank would, then the exit
        import traceback

        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


_zygote: Zygote | None = None


def start_if_asked(config: Any) -> None:
    """In a case the runner forked for a pool method on the CPU (``ENV`` names the listing):
    fork the zygote now, before anything runs. Without ``ENV``, or where it cannot (no pidfd,
    not Linux), the ranks spawn."""
    global _zygote
    listing = os.environ.get(ENV)
    if not listing or _zygote is not None or not hasattr(os, "pidfd_open"):
        return
    if not sys.platform.startswith("linux") or config.device != "cpu":
        return
    try:
        _zygote = Zygote(Path(listing))
    except OSError:
        _zygote = None


def take(*, backend: str, device: str, threads: int, rank_env: tuple[Any, ...] = ()
         ) -> Zygote | None:
    """The zygote for a pool about to start, once (a second pool spawns its ranks); None when
    there is none or a spawned rank would import with other settings than it did."""
    global _zygote
    from parabench.envinfo import THREAD_VARS

    zygote = _zygote
    if zygote is None or backend in ("none", "nccl") or device != "cpu" or rank_env:
        return None
    if any(zygote.environ.get(var) != str(threads) for var in THREAD_VARS):
        return None
    _zygote = None
    if not zygote.alive():  # it died while it waited (killed from outside): ranks spawn
        zygote.close()
        return None
    return zygote
