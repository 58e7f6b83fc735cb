"""Run one case under ``torchrun`` (one node or many): every rank runs the same session.

Usage::

    torchrun --nnodes 2 --nproc-per-node 4 --rdzv-backend c10d \\
        --rdzv-endpoint HOST:29500 --max-restarts 0 \\
        -m parabench.cli.torchrun --workload cnn --method ddp --epochs 3 \\
        --profile quick --out results.jsonl

Every rank builds the same :class:`~parabench.config.RunConfig` (``workers`` = ``WORLD_SIZE``)
and runs :func:`parabench.case.execute.execute` on it - the one case lifecycle - so the method's
own session, rank program, timing (the slowest rank's epoch between barriers) and evaluation
are exactly what the single-machine :class:`~parabench.core.pool.WorkerPool` runs; only the
launcher differs: :class:`~parabench.torch.launch.TorchrunLauncher` gives the session a
:class:`~parabench.torch.launch.TorchrunGroup` (this
process is the rank; ``call`` runs the program method here and all-gathers the replies).
Rank 0 appends ONE result to ``--out``.

A sweep's multi-node SLURM job (:mod:`parabench.sweep.slurm_job`) names its case in
``$PARABENCH_CASE`` (a RunConfig's JSON; ``workers`` must be ``WORLD_SIZE``) and gives only
``--threads`` and ``--out``.

Arguments: ``parabench run``'s own (one parser, :func:`parabench.cli.build_parser`; one case,
so one value per axis; ``--workers`` is torchrun's ``WORLD_SIZE``; the device defaults to
cpu; ``--timeout`` is also the collective timeout). Rank 0 finishes the result as the runner
does: stamped by :func:`parabench.case.isolate.stamped`, then graded (parity and ratios
against the baseline runs already in ``--out``) and appended by
:func:`parabench.sweep.run.record`, so a torchrun result is graded like any other.

Threads: torchrun sets ``OMP_NUM_THREADS=1`` for its workers. ``--threads`` (default: that
variable, else torch's default) is applied with ``torch.set_num_threads`` and the count torch
then reports is what the result records. On CUDA each rank uses ``cuda:<LOCAL_RANK>``.

Memory: ``peak_rss_mb`` is the sum over ranks of each process's own peak (``ru_maxrss``), an
upper bound of the simultaneous peak. ``peak_pss_mb`` is the sum over ranks of each rank's
sampled PSS peak (its own process tree, :class:`~parabench.core.sampler.TreeSampler`): pages
shared between ranks on one node count once, and a sum of per-rank peaks is again an upper
bound of the simultaneous one; ``extra.peak_pss_source`` says whether every rank's PSS was
readable. ``cpu_efficiency`` is left empty: one process cannot see the CPU time of ranks on
other nodes.

Machine: ``OMP_WAIT_POLICY`` defaults to PASSIVE as for the runner's cases (set here before
torch loads its OpenMP runtime, unless the user set it; see :mod:`parabench.case.machine`).
``machine`` is rank 0's node: its load before and after, the thread settings, and ``busy``
judged from the load before (the other processes' CPU share needs every local rank's CPU
time, which this process does not see: ``other_cores`` is null).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from typing import TYPE_CHECKING, Any

from parabench.cli.common import UsageError
from parabench.core.clock import Stopwatch
from parabench.core.rank import set_threads
from parabench.torch.launch import TorchrunLauncher

if TYPE_CHECKING:
    from parabench.config import RunConfig
    from parabench.core.records import Facts


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """``parabench run``'s own arguments (one parser: :func:`parabench.cli.build_parser`)."""
    from parabench.cli import build_parser

    return build_parser().parse_args(["run", *(sys.argv[1:] if argv is None else argv)])


#: `parabench run` flags that mean a sweep, not the one case torchrun runs
_SWEEP_ONLY = {"all_cases": "--all", "dry_run": "--dry-run", "resume": "--resume",
               "report": "--report", "tensorboard": "--tensorboard"}


def config_from(args: argparse.Namespace, threads: int) -> RunConfig:
    """The one case the arguments name, built as ``parabench run`` builds a case
    (:func:`parabench.cli.run.grid_from`, then :meth:`~parabench.sweep.plan.Grid.config`), with
    ``workers`` = ``WORLD_SIZE`` and ``threads`` per rank. Each axis takes one value; the
    device defaults to cpu. Raises :class:`~parabench.cli.common.UsageError` otherwise."""
    from parabench.cli.run import grid_from, option_axes
    from parabench.sweep.slurm_job import CASE_ENV

    world = int(os.environ["WORLD_SIZE"])
    if case := os.environ.get(CASE_ENV):  # a sweep's job (parabench.sweep.slurm_job)
        from parabench.config import RunConfig

        config = RunConfig.from_dict(json.loads(case))
        if config.workers != world:
            raise UsageError(f"${CASE_ENV} names {config.workers} workers; WORLD_SIZE is {world}")
        return config.replace(threads_per_worker=threads)
    given = [flag for name, flag in _SWEEP_ONLY.items() if getattr(args, name)]
    if given or args.repeats != 1:
        raise UsageError(f"torchrun runs one case: {', '.join(given) or '--repeats'} is for "
                         "`parabench run`")
    if args.workers not in (None, [world]):
        raise UsageError(f"--workers is torchrun's WORLD_SIZE here ({world})")
    axes = {"--workload": args.workload, "--method": args.method, "--device": args.device,
            "--batch-size": args.batch_size, **{f"--{k.replace('_', '-')}": v
                                                for k, v in option_axes(args).items()}}
    for flag, values in axes.items():
        if values is not None and len(values) != 1:
            raise UsageError(f"torchrun runs one case: give one {flag}")
    if not args.workload or not args.method:
        raise UsageError("torchrun runs one case: give --workload and --method")
    grid = dataclasses.replace(grid_from(args), threads_per_worker=threads)
    return grid.config(workload=args.workload[0], method=args.method[0],
                       device=(args.device or ["cpu"])[0], workers=world,
                       batch_size=args.batch_size[0],
                       options={k: v[0] for k, v in option_axes(args).items()})


def summed_pss(facts: Facts | dict[str, Any]) -> tuple[float | None, dict[str, Any]]:
    """The ranks' PSS peaks summed, and the source (every rank's, or RSS where PSS was not)."""
    from parabench.core.measure import pss_source
    from parabench.core.records import Facts

    facts = Facts.from_dict(facts) or Facts()
    pss, rss = facts.rank_peak_pss_mb or [], facts.rank_max_rss_mb or []
    read = sum(p is not None for p in pss)
    if not pss or read == 0 or len(pss) != len(rss):
        return None, {"peak_pss_source": "rss"}
    total = sum(p if p is not None else r for p, r in zip(pss, rss, strict=True))
    source = pss_source(read, len(pss) - read)
    return round(total, 1), {"peak_pss_source": source,
                             "peak_pss_processes": {"pss": read, "rss": len(pss) - read}}


def finish(result: Any, wall_s: float, watch: Any = None, policy_source: str = "user") -> Any:
    """The result as rank 0 records it, stamped as the runner stamps its cases
    (:func:`parabench.case.isolate.stamped`): summed rank peaks, machine, environment, time."""
    from parabench.case.isolate import stamped
    from parabench.case.machine import thread_settings

    peaks = result.facts.rank_max_rss_mb or []
    pss, pss_extra = summed_pss(result.facts)
    hosts = result.facts.rank_hosts or []
    local = sum(h == hosts[0] for h in hosts) if hosts else 1  # ranks on rank 0's node
    memory = {"peak_rss_mb": round(sum(peaks), 1) if peaks else None, "peak_pss_mb": pss,
              "extra": {**pss_extra, "launcher": "torchrun",
                        "world_size": int(os.environ["WORLD_SIZE"]),
                        "nnodes": len(set(hosts)) or None}}
    # one rank's process tree is not the case's: its cores would read as a serial run
    result = dataclasses.replace(result, window_cores=None)
    return stamped(result, memory=memory,
                   measured=None if watch is None else watch.finish(case_cpu_s=None),
                   settings=thread_settings(os.environ, policy_source,
                                            result.facts.rank_threads),
                   workers=local, wall_s=wall_s, cpu_efficiency=None)


def default_wait_policy() -> str:
    """Set PASSIVE unless the user chose, as the runner does; returns where it came from.

    Only before torch loads its OpenMP runtime, which reads the variable once.
    """
    from parabench.case.machine import wait_policy

    policy, source = wait_policy(os.environ)
    if "torch" in sys.modules and source != "user":
        return "runtime default (torch was loaded before parabench could set it)"
    os.environ["OMP_WAIT_POLICY"] = policy
    return source


def main(argv: list[str] | None = None) -> int:
    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        print("run me under torchrun (RANK / WORLD_SIZE are not set); on one machine "
              "`parabench run --method ddp --workers N` does the same", file=sys.stderr)
        return 2
    policy_source = default_wait_policy()
    from parabench.config import ConfigError
    from parabench.registry import UnknownNameError

    try:
        args = parse_args(argv)
        threads = set_threads(args.threads or int(os.environ.get("OMP_NUM_THREADS") or 0)
                              or _torch_default_threads())
        config = config_from(args, threads)
    except (UsageError, UnknownNameError, ConfigError) as exc:
        print(f"parabench.cli.torchrun: error: {exc}", file=sys.stderr)
        return 2
    from parabench.case.execute import execute
    from parabench.case.machine import MachineWatch
    from parabench.sweep.run import record, recorded_baselines

    rank = int(os.environ["RANK"])
    machine_watch = MachineWatch() if rank == 0 else None
    elapsed = Stopwatch()
    say = (lambda msg: print(msg, flush=True)) if rank == 0 else None
    # the one case lifecycle, with its ranks taken from torchrun instead of a spawned pool
    result = execute(config, progress=say, launcher=TorchrunLauncher())
    if rank == 0:  # the runner's tail: stamped, graded against the baselines in --out, appended
        from parabench.case.result import read_results

        baselines = recorded_baselines(read_results(args.out))
        result = record(finish(result, elapsed.seconds(), machine_watch, policy_source),
                        args.out, baselines=baselines, earlier=baselines)
        print(f"{result.status}: {config.label()} -> "
              f"{args.out}" + (f" ({result.reason})" if result.reason else ""), flush=True)
    return 0 if result.status in ("ok", "skipped") else 1


def _torch_default_threads() -> int:
    import torch

    return torch.get_num_threads()


if __name__ == "__main__":
    sys.exit(main())
