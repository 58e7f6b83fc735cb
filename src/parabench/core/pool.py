"""A persistent pool of rank processes for one case: spawn once, then call methods on all ranks.

Usage::

    # echo_program.py: a rank program is any importable class (the ranks import its module)
    from parabench.core.rank import RankContext

    class Echo:
        def __init__(self, ctx: RankContext, scale: int) -> None:
            self.ctx, self.scale = ctx, scale
        def work(self, x: int) -> int:
            return x * self.scale + self.ctx.rank

    from parabench.core.pool import WorkerPool   # the parent; program: a class or "module:Class"
    with WorkerPool(2, program="echo_program:Echo", args={"scale": 10}, threads=1) as pool:
        pool.startup_s              # spawn + rendezvous + construction, measured once
        pool.call("work", x=1)      # [10, 11]: every rank runs program.work(x=1); rank order
        pool.pids                   # the rank processes (children of this process)
    # close() ran: the ranks got a graceful shutdown, and were killed if they did not exit

``start()`` spawns ``world_size`` processes (children of this process, so a runner's sampler
and its group kill reach them; in a pre-started case, forked from its copy instead:
:mod:`parabench.core.rankfork`) with the thread variables set to ``threads`` before they
start, each bound to its own cores where they fit (:func:`~parabench.core.rank.rank_cores`;
``PARABENCH_PIN=off``: unbound), rendezvouses them through a TCP store this process hosts on
127.0.0.1 (gloo on the loopback too), binds ``cuda:<rank>`` on CUDA, and builds
``Class(ctx, **args)`` on every rank (``program`` pickled by reference; ``"module:Class"``
works too). ``backend="none"``: no torch group (TensorFlow's workers rendezvous by
themselves; ``rank_env``: each rank's own variables, e.g. ``TF_CONFIG``).

``call(name, **kwargs)`` sends one command per rank over its own Pipe and waits on the pipes
*and* the process sentinels, so:

* a rank that raises -> :class:`WorkerError` with its traceback; the pool stays usable if the
  others answer within ``grace_s``, else (stuck in a collective) it is torn down;
* a rank that dies (killed, segfault, OOM killer) -> ``WorkerError("rank 1 died (exit -9)
  ...")`` at once, and the remaining ranks are killed rather than left hanging in a collective;
* a call running past ``timeout_s`` -> :class:`WorkerTimeout`; the pool is torn down.

``close()`` is idempotent: a shutdown command (the program's ``close()``, then
``destroy_process_group``), a join with a deadline, then SIGKILL. Ranks also die with this
process (``PR_SET_PDEATHSIG`` on Linux, and a parent-pid watchdog).

Replies and arguments travel pickled; keep them small (numbers, dicts, CPU tensors).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import sys
import time
import traceback
from dataclasses import dataclass, field
from datetime import timedelta
from multiprocessing.connection import Connection, wait
from typing import Any

from parabench.core import rankfork
from parabench.core.clock import Stopwatch
from parabench.core.rank import (
    RankContext,
    checked_program,
    default_backend,
    die_with_parent,
    init_group,
    loopback_gloo,
    loopback_store,
    pin,
    rank_cores,
    resolve_program,
    set_threads,
    thread_env,
)

#: ``backend`` of a pool whose ranks form no torch process group (other engines' workers)
NO_GROUP = "none"


class WorkerError(RuntimeError):
    """A rank raised, died or timed out; ``tracebacks`` maps rank -> its traceback text."""

    def __init__(self, message: str, tracebacks: dict[int, str] | None = None) -> None:
        super().__init__(message)
        self.tracebacks = tracebacks or {}


class WorkerTimeout(WorkerError):
    """A call (or start-up) ran past the pool's timeout."""


@dataclass(frozen=True, kw_only=True)
class _Spec:
    """Everything a rank needs to set itself up (pickled to the child)."""

    world_size: int
    program: str | type
    args: dict[str, Any] = field(default_factory=dict)
    backend: str
    device: str
    threads: int
    store_port: int
    parent_pid: int
    timeout_s: float
    rank_env: tuple[dict[str, str], ...] = ()
    cores: list[list[int]] | None = None  # rank -> its own cores (rank.rank_cores)


class WorkerPool:
    """``world_size`` rank processes running one program object each; see the module doc."""

    def __init__(
        self,
        world_size: int,
        program: str | type,
        args: dict[str, Any] | None = None,
        *,
        backend: str | None = None,
        device: str = "cpu",
        threads: int = 1,
        timeout_s: float = 600.0,
        grace_s: float = 3.0,
        close_timeout_s: float = 15.0,
        rank_env: list[dict[str, str]] | None = None,
    ) -> None:
        if world_size < 1:
            raise ValueError(f"world_size must be >= 1, got {world_size}")
        if device not in ("cpu", "cuda"):
            raise ValueError(f"device must be cpu or cuda, got {device!r}")
        self.world_size = world_size
        #: the program class, or the "module:Class" string it was given as
        self.program = checked_program(program)
        self.args = dict(args or {})
        self.backend = backend or default_backend(device)
        self.device, self.threads, self.timeout_s = device, threads, timeout_s
        self.grace_s, self.close_timeout_s = grace_s, close_timeout_s
        self.rank_env = tuple(rank_env or ())
        self.startup_s: float | None = None
        #: whether the ranks were forked from the case's zygote (core.rankfork), not spawned
        self.forked = False
        #: what each rank reported after set-up (threads really used, device, pid, cores)
        self.rank_info: list[dict[str, Any]] = []
        self._procs: list[Any] = []
        self._conns: list[Connection] = []
        self._store: Any = None
        self._state = "new"  # new -> running -> closed

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> WorkerPool:
        if self._state != "new":
            raise RuntimeError(f"pool already {self._state}")
        watch = Stopwatch()
        self._state = "running"
        atexit.register(self.close)
        if self.backend != NO_GROUP:
            import torch.distributed as dist
            import torch.multiprocessing as mp  # its pickler shares tensors in replies

            self._store = loopback_store(dist, self.timeout_s)
        else:
            import multiprocessing as mp
        spec = _Spec(
            world_size=self.world_size, program=self.program, args=self.args,
            backend=self.backend, device=self.device, threads=self.threads,
            store_port=0 if self._store is None else self._store.port, parent_pid=os.getpid(),
            timeout_s=self.timeout_s, rank_env=self.rank_env,
            cores=rank_cores(self.world_size, self.threads),
        )
        ctx = mp.get_context("spawn")
        zygote = rankfork.take(backend=self.backend, device=self.device, threads=self.threads,
                               rank_env=self.rank_env)
        try:
            with thread_env(self.threads), loopback_gloo():
                for rank in range(self.world_size):
                    parent, child = ctx.Pipe(duplex=True)
                    proc = None
                    if zygote is not None:  # a pre-started case: forked, torch imported
                        try:
                            proc = zygote.fork(_rank_main, (rank, spec), child)
                        except OSError:  # the zygote is gone: this rank and the rest spawn
                            zygote.close()
                            zygote = None
                    if proc is None:
                        proc = ctx.Process(
                            target=_rank_main, args=(rank, spec, child),
                            name=f"parabench-rank{rank}", daemon=False,  # may own DataLoaders
                        )
                        proc.start()
                    child.close()
                    self._procs.append(proc)
                    self._conns.append(parent)
            if zygote is not None:
                zygote.close()
            self.rank_info = self._gather("start-up", time.monotonic() + self.timeout_s)
        except BaseException:
            if zygote is not None:
                zygote.close()
            self._teardown()
            raise
        self.forked = zygote is not None
        self.startup_s = watch.seconds()
        return self

    def close(self) -> None:
        """Graceful shutdown, then join with a deadline, then kill. Safe to call again."""
        if self._state != "running":
            self._state = "closed"
            return
        for conn in self._conns:
            with contextlib.suppress(OSError, ValueError):
                conn.send(("close",))
        deadline = time.monotonic() + self.close_timeout_s
        for proc in self._procs:
            proc.join(max(0.0, deadline - time.monotonic()))
        self._teardown()

    def __enter__(self) -> WorkerPool:
        return self.start() if self._state == "new" else self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self._procs]

    @property
    def running(self) -> bool:
        return self._state == "running"

    # -- commands ----------------------------------------------------------------------------

    def call(self, name: str, /, **kwargs: Any) -> list[Any]:
        """Run ``program.<name>(**kwargs)`` on every rank; the replies in rank order."""
        if self._state != "running":
            raise WorkerError(f"cannot call {name!r}: the pool is {self._state}")
        for rank, conn in enumerate(self._conns):
            try:
                conn.send(("call", name, kwargs))
            except OSError as exc:  # the rank is gone: _gather reports how it died
                if self._procs[rank].is_alive():
                    self._teardown()
                    raise WorkerError(f"rank {rank}: cannot send {name!r}: {exc}") from exc
        return self._gather(repr(name), time.monotonic() + self.timeout_s)

    def _gather(self, what: str, deadline: float) -> list[Any]:
        n = self.world_size
        replies: list[Any] = [None] * n
        pending = set(range(n))
        errors: dict[int, str] = {}
        grace_until: float | None = None
        by_conn = {id(c): r for r, c in enumerate(self._conns)}
        by_sentinel = {p.sentinel: r for r, p in enumerate(self._procs)}
        while pending:
            limit = deadline if grace_until is None else min(deadline, grace_until)
            remaining = limit - time.monotonic()
            if remaining <= 0:
                break
            waitables = [self._conns[r] for r in sorted(pending)] + list(by_sentinel)
            for obj in wait(waitables, timeout=remaining):
                if isinstance(obj, int):  # a sentinel: that rank's process has ended
                    rank = by_sentinel[obj]
                    if rank in pending and self._conns[rank].poll():
                        continue  # its reply is waiting; read it first, then notice the death
                    self._died(rank, what)
                rank = by_conn[id(obj)]
                try:
                    status, payload = obj.recv()
                except (EOFError, OSError):
                    self._died(rank, what)
                pending.discard(rank)
                if status == "ok":
                    replies[rank] = payload
                else:
                    errors[rank] = payload
                    grace_until = grace_until or time.monotonic() + self.grace_s
        if errors:
            stuck = sorted(pending)
            if stuck:  # the others wait in a collective the failed rank will never join
                self._teardown()
            raise WorkerError(_error_text(what, errors, stuck), errors)
        if pending:
            self._teardown()
            raise WorkerTimeout(
                f"{what} exceeded the pool timeout of {self.timeout_s:g}s on rank(s) "
                f"{sorted(pending)}; the pool was shut down"
            )
        return replies

    def _died(self, rank: int, what: str) -> None:
        proc = self._procs[rank]
        proc.join(1.0)
        code = proc.exitcode
        how = f"exit {code}" if code is None or code >= 0 else f"exit {code}, {_signame(-code)}"
        self._teardown()
        raise WorkerError(
            f"rank {rank} died ({how}) during {what}; the other ranks were shut down"
        )

    def _teardown(self) -> None:
        """Kill whatever still runs, reap it, release pipes and the store. Idempotent."""
        self._state = "closed"
        for proc in self._procs:
            if proc.is_alive():
                with contextlib.suppress(OSError):
                    proc.kill()
        for proc in self._procs:
            proc.join(5.0)
            if isinstance(proc, rankfork.ForkedRank):
                proc.release()
        for conn in self._conns:
            conn.close()
        self._conns = []
        self._store = None
        atexit.unregister(self.close)


def _error_text(what: str, errors: dict[int, str], stuck: list[int]) -> str:
    head = ", ".join(f"rank {r}" for r in sorted(errors))
    parts = [f"{head} raised during {what}"]
    if stuck:
        parts[0] += f"; rank(s) {stuck} did not answer and the pool was shut down"
    for rank, text in sorted(errors.items()):
        parts.append(f"--- rank {rank} ---\n{text.rstrip()}")
    return "\n".join(parts)


def _signame(sig: int) -> str:
    try:
        return signal.Signals(sig).name
    except ValueError:
        return f"signal {sig}"


# -- the rank process ------------------------------------------------------------------------


def _rank_main(rank: int, spec: _Spec, conn: Connection) -> None:
    die_with_parent(spec.parent_pid)
    group = spec.backend != NO_GROUP
    try:
        os.environ.update(spec.rank_env[rank] if spec.rank_env else {})
        cores = pin(spec.cores[rank] if spec.cores else None)  # before any thread starts
        threads = spec.threads  # without a group the thread variables alone say it
        if group:
            threads = set_threads(spec.threads)
            import torch.distributed as dist

            store = dist.TCPStore("127.0.0.1", spec.store_port, is_master=False,
                                  timeout=timedelta(seconds=spec.timeout_s))
            init_group(rank=rank, world_size=spec.world_size, local_rank=rank,
                       device=spec.device, backend=spec.backend, timeout_s=spec.timeout_s,
                       store=store)
        ctx = RankContext(rank=rank, world_size=spec.world_size, local_rank=rank,
                          device=spec.device, backend=spec.backend, threads=threads)
        program = resolve_program(spec.program)(ctx, **spec.args)
    except BaseException:
        conn.send(("error", traceback.format_exc()))
        return
    device = str(ctx.torch_device()) if group else spec.device
    conn.send(("ok", {"pid": os.getpid(), "threads": threads, "device": device, "cores": cores}))
    try:
        _serve(program, conn)
    finally:
        if group:
            with contextlib.suppress(Exception):
                dist.destroy_process_group()
    # Skip the interpreter's teardown of torch (seconds under load): the program's close()
    # and destroy_process_group already released what matters.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _serve(program: Any, conn: Connection) -> None:
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            return  # the pool is gone
        if message[0] == "close":
            if callable(getattr(program, "close", None)):
                with contextlib.suppress(Exception):
                    program.close()
            return
        _, name, kwargs = message
        try:
            reply = ("ok", getattr(program, name)(**kwargs))
        except BaseException:  # noqa: BLE001 - every failure goes back to the caller
            reply = ("error", traceback.format_exc())
        try:
            conn.send(reply)
        except Exception:  # noqa: BLE001 - an unpicklable reply is the program's error
            conn.send(("error", f"reply of {name!r} could not be sent:\n{traceback.format_exc()}"))
