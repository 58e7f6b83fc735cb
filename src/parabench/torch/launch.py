"""Ranks from torchrun: the launcher and rank group a case's session gets under ``torchrun``.

Usage (what :mod:`parabench.cli.torchrun`, torchrun's entry point, does on every rank)::

    from parabench.case.execute import execute
    result = execute(config, launcher=TorchrunLauncher())   # this process is one rank

:class:`TorchrunLauncher` gives the session a :class:`TorchrunGroup`: this process is the rank;
``call`` runs the program method here and all-gathers the replies, so the method's own
session, rank program and timing are exactly what :class:`~parabench.core.pool.WorkerPool`
runs on one machine.
"""

from __future__ import annotations

import os
import socket
import traceback
from typing import TYPE_CHECKING, Any, ClassVar

from parabench.core.clock import Stopwatch
from parabench.core.launcher import Launcher
from parabench.core.pool import WorkerError, resolve_program
from parabench.core.rank import RankContext, default_backend, init_group

if TYPE_CHECKING:
    from parabench.config import RunConfig


class TorchrunGroup:
    """The WorkerPool interface for a process that *is* one torchrun rank."""

    def __init__(self, program: str | type, args: dict[str, Any], *, device: str,
                 timeout_s: float) -> None:
        self.program_class, self.args = program, args  # a class, or its "module:Class"
        self.device, self.timeout_s = device, timeout_s
        self.rank = int(os.environ["RANK"])
        self.world_size = int(os.environ["WORLD_SIZE"])
        self.local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        self.startup_s: float | None = None
        self.rank_info: list[dict[str, Any]] = []
        self.running = False
        self.program: Any = None

    def start(self) -> TorchrunGroup:
        import torch

        from parabench.core.sampler import TreeSampler

        self.sampler = TreeSampler(os.getpid(), cpu=False).__enter__()  # this rank's PSS peak
        watch = Stopwatch()
        backend = default_backend(self.device)
        init_group(rank=self.rank, world_size=self.world_size, local_rank=self.local_rank,
                   device=self.device, backend=backend, timeout_s=self.timeout_s)
        self.running = True
        self.ctx = RankContext(rank=self.rank, world_size=self.world_size,
                               local_rank=self.local_rank, device=self.device, backend=backend,
                               threads=torch.get_num_threads(), launcher="torchrun")
        self.program = _Builder(resolve_program(self.program_class), self.ctx, self.args)
        self.call("build")  # every rank learns if one failed, so rank 0 can record it
        self.program = self.program.built
        self.rank_info = self.ctx.all_gather({
            "pid": os.getpid(), "threads": self.ctx.threads, "host": socket.gethostname(),
            "device": str(self.ctx.torch_device()),
        })
        self.startup_s = watch.seconds()
        return self

    def call(self, name: str, /, **kwargs: Any) -> list[Any]:
        """Run ``program.<name>`` here; every rank's reply, gathered in rank order.

        A rank that raises before its next collective still reaches the gather, so all ranks
        raise the same WorkerError. A rank that dies, or raises inside a collective, leaves
        the others waiting until torchrun tears the job down (run it with --max-restarts 0).
        """
        try:
            reply: tuple[str, Any] = ("ok", getattr(self.program, name)(**kwargs))
        except Exception:  # noqa: BLE001 - sent to every rank below
            reply = ("error", traceback.format_exc())
        replies = self.ctx.all_gather(reply)
        errors = {r: payload for r, (status, payload) in enumerate(replies) if status != "ok"}
        if errors:
            text = "\n".join(f"--- rank {r} ---\n{tb}" for r, tb in errors.items())
            raise WorkerError(f"rank(s) {sorted(errors)} raised during {name!r}\n{text}", errors)
        return [payload for _, payload in replies]

    def final_notes(self) -> dict[str, Any]:
        """Per-rank peak RSS and PSS and hosts, gathered while the group still exists."""
        from parabench.core.measure import self_max_rss_mb

        pss = self.sampler.peak_pss_mb
        mine = (round(self_max_rss_mb(), 1), None if pss is None else round(pss, 1),
                self.sampler.pss_source)
        rss, pss_mb, sources = zip(*self.ctx.all_gather(mine), strict=True)
        return {"rank_max_rss_mb": list(rss), "rank_peak_pss_mb": list(pss_mb),
                "rank_pss_source": list(sources),
                "rank_hosts": [i["host"] for i in self.rank_info]}

    def close(self) -> None:
        if getattr(self, "sampler", None) is not None:
            self.sampler.__exit__(None, None, None)
            self.sampler = None
        if not self.running:
            return
        self.running = False
        import torch.distributed as dist

        if callable(getattr(self.program, "close", None)):
            self.program.close()
        if dist.is_initialized():
            dist.destroy_process_group()


class TorchrunLauncher(Launcher):
    """Ranks are the processes torchrun started: this process is one, its group is in-process."""

    name: ClassVar[str] = "torchrun"

    def local_ranks(self, workers: int) -> int:
        """Only this node's ranks share its GPUs (torchrun's ``LOCAL_WORLD_SIZE``)."""
        return int(os.environ.get("LOCAL_WORLD_SIZE", workers))

    def group(self, program: str | type, args: dict[str, Any], config: RunConfig) -> Any:
        return TorchrunGroup(program, args, device=config.device, timeout_s=config.timeout_s)


class _Builder:
    """Constructs the program through ``call``, so a failing constructor is gathered too."""

    def __init__(self, cls: type, ctx: RankContext, args: dict[str, Any]) -> None:
        self.cls, self.ctx, self.args, self.built = cls, ctx, args, None

    def build(self) -> None:
        self.built = self.cls(self.ctx, **self.args)
