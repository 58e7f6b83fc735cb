"""What a rank program sees: its :class:`RankContext`, and the process-group set-up both
launchers share (the :class:`~parabench.core.pool.WorkerPool` and ``torchrun``).

Usage (inside a rank program; see :mod:`parabench.core.pool` for the pool side)::

    class MyProgram:
        def __init__(self, ctx: RankContext, **args) -> None:
            self.ctx = ctx
            self.device = ctx.torch_device()        # cuda:<local_rank> or cpu
        def train_epoch(self, epoch: int) -> dict:
            value, seconds = self.ctx.timed(self._work)   # barrier; t0; work; sync; t1; barrier
            return {"seconds": seconds}
        def _work(self) -> None: ...

``timed`` is the one way an epoch is timed on a rank: all ranks leave the first barrier
together, the device is synchronised before the second clock read, and the caller takes the
*slowest* rank's seconds (see :func:`parabench.torch.session.fold_epochs`).
"""

from __future__ import annotations

import contextlib
import importlib
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any, TypeVar

from parabench.envinfo import THREAD_VARS

if TYPE_CHECKING:
    import torch

T = TypeVar("T")



@dataclass(frozen=True, kw_only=True)
class RankContext:
    """Identity of one rank and the few collective helpers every rank program needs."""

    rank: int
    world_size: int
    #: index of this rank on its node (cuda:<local_rank>); equals ``rank`` in a pool
    local_rank: int
    #: "cpu" or "cuda"
    device: str
    backend: str
    #: torch intra-op threads this rank really uses (torch.get_num_threads() after set-up)
    threads: int
    #: "pool" (spawned by WorkerPool) or "torchrun"
    launcher: str = "pool"

    def torch_device(self) -> torch.device:
        import torch

        return torch.device(f"cuda:{self.local_rank}" if self.device == "cuda" else "cpu")

    def barrier(self) -> None:
        import torch.distributed as dist

        if self.backend == "nccl":  # names the device, so NCCL does not guess (and warn)
            dist.barrier(device_ids=[self.local_rank])
        else:
            dist.barrier()

    def synchronize(self) -> None:
        if self.device == "cuda":
            import torch

            torch.cuda.synchronize(self.local_rank)

    def timed(self, fn: Callable[[], T]) -> tuple[T, float]:
        """``fn()`` timed between barriers: (its value, this rank's seconds).

        barrier; t0; fn(); device sync; t1; barrier. The first barrier starts all ranks
        together, so the slowest rank's ``t1 - t0`` is the step's wall time; the second keeps
        a fast rank from starting the next timed region while others are still inside this one.
        """
        from parabench.core.clock import Clock

        value, seconds = Clock(sync=self.synchronize, barrier=self.barrier).time(fn)
        return value, seconds

    def all_gather(self, obj: Any) -> list[Any]:
        """Every rank's ``obj`` in rank order (a collective: all ranks must call it)."""
        import torch.distributed as dist

        out: list[Any] = [None] * self.world_size
        dist.all_gather_object(out, obj)
        return out


@contextmanager
def thread_env(threads: int) -> Iterator[None]:
    """Set the thread variables for processes started inside the block, then restore them.

    Spawned children copy the parent's environment when they start, so OpenMP / MKL read the
    right values before torch is even imported there.
    """
    saved = {var: os.environ.get(var) for var in THREAD_VARS}
    os.environ.update({var: str(threads) for var in THREAD_VARS})
    try:
        yield
    finally:
        for var, value in saved.items():
            if value is None:
                os.environ.pop(var, None)
            else:
                os.environ[var] = value


def set_threads(threads: int) -> int:
    """Size this process's torch thread pool; returns the count torch reports afterwards."""
    for var in THREAD_VARS:
        os.environ[var] = str(threads)
    import torch

    torch.set_num_threads(threads)
    return torch.get_num_threads()


#: ``PARABENCH_PIN=off`` leaves a pool's ranks wherever the OS schedules them
PIN_VAR = "PARABENCH_PIN"


def rank_cores(world_size: int, threads: int,
               allowed: set[int] | None = None) -> list[list[int]] | None:
    """Each rank's own cores: rank r gets the r-th block of ``threads`` of the cores this
    process may use, as ``mpiexec --bind-to core`` or Intel's CPU DDP launcher pin ranks.

    Ranks in lockstep (a collective every step) wait for the slowest: unpinned, the OS moves
    them between cores and, whenever any other task wakes, parks one behind it while the other
    spins; pinning narrowed mlp ddp x2's windows and cost no speed (the runs are in
    docs/measurements.md). None: the ranks do not fit one block each (oversubscribed), the OS
    gives no affinity, or ``PARABENCH_PIN=off``.
    """
    if os.environ.get(PIN_VAR, "").lower() == "off" or not hasattr(os, "sched_setaffinity"):
        return None
    cores = sorted(allowed if allowed is not None else os.sched_getaffinity(0))
    if world_size < 2 or threads < 1 or world_size * threads > len(cores):
        return None
    return [cores[r * threads:(r + 1) * threads] for r in range(world_size)]


def pin(cores: list[int] | None) -> list[int] | None:
    """Bind this process (and the threads it starts) to ``cores``; the cores it may use."""
    if not hasattr(os, "sched_getaffinity"):
        return None
    if cores:
        os.sched_setaffinity(0, cores)
    return sorted(os.sched_getaffinity(0))


def default_backend(device: str) -> str:
    return "nccl" if device == "cuda" else "gloo"


def init_group(
    *,
    rank: int,
    world_size: int,
    local_rank: int,
    device: str,
    backend: str,
    timeout_s: float,
    store: Any = None,
) -> None:
    """``init_process_group`` for this rank: from ``store`` (a pool) or ``env://`` (torchrun).

    On CUDA the rank binds ``cuda:<local_rank>`` first and passes it as ``device_id``, so
    NCCL initialises eagerly on the right GPU.
    """
    import torch
    import torch.distributed as dist

    kwargs: dict[str, Any] = {"timeout": timedelta(seconds=timeout_s)}
    if device == "cuda":
        torch.cuda.set_device(local_rank)
        kwargs["device_id"] = torch.device("cuda", local_rank)
    if store is not None:
        kwargs.update(store=store, rank=rank, world_size=world_size)
    else:
        kwargs.update(init_method="env://", rank=rank, world_size=world_size)
    dist.init_process_group(backend, **kwargs)


def die_with_parent(parent_pid: int) -> None:
    """Kill this rank when the pool's process dies, even mid-collective."""
    if sys.platform.startswith("linux"):
        import ctypes

        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, int(signal.SIGKILL))

    def watch() -> None:  # also covers non-Linux, and a parent gone before prctl took effect
        while True:
            if os.getppid() != parent_pid:
                os.kill(os.getpid(), signal.SIGKILL)
            time.sleep(0.5)

    threading.Thread(target=watch, name="parent-watchdog", daemon=True).start()


def loopback_store(dist: Any, timeout_s: float) -> Any:
    """The rendezvous store, listening on 127.0.0.1 only.

    ``TCPStore(host, ...)`` binds its server to every interface whatever ``host`` says
    (``host`` is only where clients connect), so the socket is bound here and handed over.
    The OS picks the port, so no other process can take it between "find a free port" and
    "bind" (the classic race). The store has no authentication (torch offers none): loopback
    keeps it off the network, not away from other local users.
    """
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    fd = listener.detach()  # the store owns the descriptor from here on
    try:
        return dist.TCPStore(
            "127.0.0.1", port, is_master=True, wait_for_workers=False,
            timeout=timedelta(seconds=timeout_s), master_listen_fd=fd,
        )
    except BaseException:
        os.close(fd)
        raise


@contextlib.contextmanager
def loopback_gloo() -> Any:
    """Gloo on the loopback interface unless the user chose one (a pool is one machine)."""
    if "GLOO_SOCKET_IFNAME" in os.environ or not os.path.exists("/sys/class/net/lo"):
        yield
        return
    os.environ["GLOO_SOCKET_IFNAME"] = "lo"
    try:
        yield
    finally:
        os.environ.pop("GLOO_SOCKET_IFNAME", None)


def checked_program(program: str | type) -> str | type:
    """A program class as is, or a ``"module:Class"`` string checked for its shape only."""
    if not isinstance(program, type) and ":" not in program:
        raise ValueError(f"program must be a class or 'module:Class', got {program!r}")
    return program


def resolve_program(path: str | type) -> type:
    """The program class: ``path`` itself if it is one, else imported from ``"module:Class"``."""
    if isinstance(path, type):
        return path
    module, _, name = path.partition(":")
    obj: Any = importlib.import_module(module)
    for part in name.split("."):
        obj = getattr(obj, part)
    return obj
