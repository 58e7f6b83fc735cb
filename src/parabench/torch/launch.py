"""Run one case under ``torchrun`` (one node or many): every rank runs the same session.

Usage::

    torchrun --nnodes 2 --nproc-per-node 4 --rdzv-backend c10d \\
        --rdzv-endpoint HOST:29500 --max-restarts 0 \\
        -m parabench.torch.launch --workload cnn --method ddp --epochs 3 \\
        --profile quick --out results.jsonl

Every rank builds the same :class:`~parabench.config.RunConfig` (``workers`` = ``WORLD_SIZE``)
and runs :func:`parabench.case.execute.execute` on it - the one case lifecycle - so the method's
own session, rank program, timing (the slowest rank's epoch between barriers) and evaluation
are exactly what the single-machine :class:`~parabench.case.pool.WorkerPool` runs; only the
launcher differs: :class:`TorchrunLauncher` gives the session a :class:`TorchrunGroup` (this
process is the rank; ``call`` runs the program method here and all-gathers the replies).
Rank 0 appends ONE result to ``--out``.

Threads: torchrun sets ``OMP_NUM_THREADS=1`` for its workers. ``--threads`` (default: that
variable, else torch's default) is applied with ``torch.set_num_threads`` and the count torch
then reports is what the result records. On CUDA each rank uses ``cuda:<LOCAL_RANK>``.

Memory: ``peak_rss_mb`` is the sum over ranks of each process's own peak (``ru_maxrss``), an
upper bound of the simultaneous peak. ``cpu_efficiency`` is left empty: one process cannot
see the CPU time of ranks on other nodes.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import socket
import sys
import traceback
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, ClassVar

from parabench.case.clock import now
from parabench.case.launcher import Launcher
from parabench.case.pool import WorkerError, resolve_program
from parabench.case.rank import RankContext, default_backend, init_group, set_threads

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

        t0 = now()
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
        self.startup_s = now() - t0
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
        """Per-rank peak RSS and hosts, gathered while the group still exists."""
        from parabench.case.measure import self_max_rss_mb

        return {"rank_max_rss_mb": self.ctx.all_gather(round(self_max_rss_mb(), 1)),
                "rank_hosts": [i["host"] for i in self.rank_info]}

    def close(self) -> None:
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


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m parabench.torch.launch",
                                description="one parabench case, run by torchrun on every rank")
    p.add_argument("--workload", required=True)
    p.add_argument("--method", required=True, help="a multi-process torch method (ddp, fsdp)")
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    p.add_argument("--epochs", type=int, default=3,
                   help="epochs; with --target-quality the most epochs tried")
    p.add_argument("--target-quality", default=None, metavar="Q|default",
                   help="time-to-accuracy mode (see parabench.case.target)")
    p.add_argument("--profile", default="quick")
    p.add_argument("--batch-size", default=None, help="global batch: N or auto")
    p.add_argument("--threads", type=int, default=None,
                   help="torch threads per rank (default: $OMP_NUM_THREADS, which torchrun sets)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--timeout", type=float, default=1800.0, help="collective timeout, seconds")
    p.add_argument("--option", action="append", default=[], metavar="NAME=VALUE",
                   help="a method/workload option (int/bool/str as in RunConfig.options)")
    p.add_argument("--out", required=True, help="JSON Lines file rank 0 appends the result to")
    return p.parse_args(argv)


def _option(text: str) -> tuple[str, Any]:
    name, _, raw = text.partition("=")
    value: Any = raw
    if raw.lstrip("-").isdigit():
        value = int(raw)
    elif raw.lower() in ("on", "true", "off", "false"):
        value = raw.lower() in ("on", "true")
    return name.replace("-", "_"), value


def config_from(args: argparse.Namespace, threads: int) -> Any:
    from parabench.case.target import DEFAULT, resolve_target
    from parabench.config import RunConfig
    from parabench.registry import workloads

    batch: Any = args.batch_size
    if batch is not None and batch != "auto":
        batch = int(batch)
    target = args.target_quality
    target = resolve_target(target if target in (None, DEFAULT) else float(target),
                            workloads.get(args.workload))
    return RunConfig(
        workload=args.workload, method=args.method, device=args.device,
        workers=int(os.environ["WORLD_SIZE"]), threads_per_worker=threads, batch_size=batch,
        epochs=args.epochs, profile=args.profile, seed=args.seed, timeout_s=args.timeout,
        options=dict(_option(o) for o in args.option), target_quality=target,
    )


def finish(result: Any, wall_s: float) -> Any:
    """The result as rank 0 writes it: summed rank peaks, environment, time stamp."""
    from parabench.envinfo import fingerprint, git_commit

    peaks = result.extra.get("rank_max_rss_mb") or []
    return dataclasses.replace(
        result,
        peak_rss_mb=round(sum(peaks), 1) if peaks else None,
        cpu_efficiency=None,
        wall_s=wall_s,
        extra={**result.extra, "launcher": "torchrun",
               "world_size": int(os.environ["WORLD_SIZE"]),
               "nnodes": len(set(result.extra.get("rank_hosts") or [])) or None},
        env=fingerprint(),
        git_commit=git_commit(),
        timestamp=datetime.now(timezone.utc).isoformat(timespec="seconds"),
    )


def main(argv: list[str] | None = None) -> int:
    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        print("run me under torchrun (RANK / WORLD_SIZE are not set); on one machine "
              "`parabench run --method ddp --workers N` does the same", file=sys.stderr)
        return 2
    args = parse_args(argv)
    threads = set_threads(args.threads or int(os.environ.get("OMP_NUM_THREADS") or 0)
                          or _torch_default_threads())
    from parabench.case.execute import execute
    from parabench.case.result import append_result

    rank = int(os.environ["RANK"])
    t0 = now()
    say = (lambda msg: print(msg, flush=True)) if rank == 0 else None
    # the one case lifecycle, with its ranks taken from torchrun instead of a spawned pool
    result = execute(config_from(args, threads), progress=say, launcher=TorchrunLauncher())
    if rank == 0:
        result = finish(result, now() - t0)
        append_result(args.out, result)
        print(f"{result.status}: {args.workload}/{args.method} x{result.workers} -> {args.out}"
              + (f" ({result.reason})" if result.reason else ""), flush=True)
    return 0 if result.status in ("ok", "skipped") else 1


def _torch_default_threads() -> int:
    import torch

    return torch.get_num_threads()


if __name__ == "__main__":
    sys.exit(main())
