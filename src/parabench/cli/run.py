"""``parabench run``: its flags, the grid they ask for, and the run.

Usage::

    from parabench.cli import build_parser
    from parabench.cli.run import grid_from
    grid = grid_from(build_parser().parse_args(["run", "--workload", "mlp"]))   # checked
    grid.stop                                   # the planner's stopping rule for the flags

``--dry-run`` prints the plan and an estimate (:func:`dry_run`); ``--report DIR`` and
``--tensorboard DIR`` write as the cases finish (:mod:`parabench.cli.report`,
:func:`tensorboard_log`).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from parabench.case.result import Result, read_results
from parabench.case.stopping import DEFAULT_MAX_EPOCHS
from parabench.case.windows import CI_TARGET, MAX_WINDOWS, WINDOW_TARGET_S, WINDOWS
from parabench.cli.calibrate import add_targets_flag, calibration_hints
from parabench.cli.common import EXIT_FAILED, EXIT_OK, EXIT_USAGE, UsageError, one_line
from parabench.cli.types import (
    batch,
    bool_value,
    choice,
    count,
    csv,
    non_negative_int,
    positive_int,
    target,
)
from parabench.config import DEVICES, PROFILES
from parabench.stopping import COVERAGE_EPOCHS, DEFAULT_EPOCHS, ToTarget

if TYPE_CHECKING:
    from parabench.sweep.plan import Grid


#: the full sweep's profile (--all, or any --workload/--method) and the coverage grid's
FULL_PROFILE, COVERAGE_PROFILE = "quick", "tiny"


def _coverage(args: argparse.Namespace) -> bool:
    """The coverage grid: neither --workload nor --method nor --all given."""
    return not (args.workload or args.method or args.all_cases)


def _profile(args: argparse.Namespace) -> str:
    return args.profile or (COVERAGE_PROFILE if _coverage(args) else FULL_PROFILE)


def add_parser(sub: argparse._SubParsersAction) -> None:
    from parabench.registry import methods, workloads

    p = sub.add_parser("run", help="run a grid of cases (default: the coverage grid, minutes)")
    p.add_argument("--workload", type=csv(str, "workload names"),
                   help=f"one or more of: {', '.join(workloads.names())} (default: all)")
    p.add_argument("--method", type=csv(str, "method names"),
                   help=f"one or more of: {', '.join(methods.names())} (default: all; "
                        "those that cannot run here are recorded as skipped)")
    p.add_argument("--all", action="store_true", dest="all_cases",
                   help="the full sweep: every workload x every method at each method's worker "
                        f"counts (default profile {FULL_PROFILE}, {DEFAULT_EPOCHS} epochs: hours "
                        "on 2 cores). Without it and without --workload/--method: the coverage "
                        "grid, every method once on its cheapest workload and every workload "
                        f"under serial and a data-parallel method ({COVERAGE_PROFILE}, "
                        f"{COVERAGE_EPOCHS} epoch: minutes)")
    p.add_argument("--device", type=csv(choice(DEVICES), "devices"),
                   help="cpu, cuda (default: cpu, plus cuda when a GPU is present)")
    p.add_argument("--workers", type=csv(positive_int, "worker counts"),
                   help="default: each method's own (1, 2, 4, .. up to the cores here); "
                        "2 in the coverage grid (see --all)")
    p.add_argument("--threads", type=positive_int, default=None,
                   help="threads per worker (default: cores // workers)")
    p.add_argument("--oversubscribe", action="store_true",
                   help="allow workers x threads > cores (otherwise such cases are skipped)")
    p.add_argument("--batch-size", type=csv(batch, "batch sizes"), default=[None],
                   help="N[,N..] or 'auto' (default: the workload's)")
    p.add_argument("--epochs", type=positive_int, default=None,
                   help="epochs per case, fixed: no target (default: to the workload's "
                        "measured target where it has one at the profile, tiny today, else "
                        f"{DEFAULT_EPOCHS}; {COVERAGE_EPOCHS} for the coverage grid); the first "
                        "is warm-up; not with --target-quality, which takes --max-epochs")
    p.add_argument("--steps", type=count(0), default=None, metavar="N",
                   help="speed: training steps per timed window (default: picked so a window "
                        f"takes about {WINDOW_TARGET_S:g} s; an estimator's window is one fit); "
                        "0: no windows, epoch times only")
    p.add_argument("--windows", type=count(2), default=None, metavar="W",
                   help="speed: steady windows per case after a warm-up window (default: "
                        f"{WINDOWS}, more while their CI is wider than "
                        f"{CI_TARGET * 100:.0f}%%, up to {MAX_WINDOWS}; throughput is their "
                        "median with a 95%% bootstrap CI)")
    p.add_argument("--target-quality", type=target, nargs="?", const=ToTarget(),
                   metavar="Q|default",
                   help="time-to-accuracy mode: evaluate up to 8 times an epoch (off the "
                        "clock), stop when held-out quality reaches Q (<= Q for lower-is-better "
                        "metrics); 'default' or the bare flag: serial's measured quality per "
                        "workload and profile (--targets FILE, the user's calibrated store, then "
                        "quality_targets.json; else 0.97 x its "
                        "quick-profile quality, said so). Without it or --epochs, a workload "
                        "with a measured target at the profile is run to that target anyway")
    p.add_argument("--max-epochs", type=positive_int, default=None,
                   help=f"to a target: most epochs a case trains (default: "
                        f"{DEFAULT_MAX_EPOCHS}, or the longest epoch budget of the selected "
                        f"workloads' measured targets)")
    p.add_argument("--profile", type=choice(PROFILES), default=None,
                   help=f"data/model size: tiny, quick, full (default: {FULL_PROFILE}; "
                        f"{COVERAGE_PROFILE} for the coverage grid)")
    p.add_argument("--repeats", type=positive_int, default=1,
                   help="repeats per case (default: 1)")
    p.add_argument("--seed", type=int, default=0,
                   help="model, batch-order and data seed (mlp's and gpt's data are the same at "
                        "every seed) (default: 0)")
    p.add_argument("--timeout", type=float, default=600.0,
                   help="per-case timeout in seconds (default: 600)")
    p.add_argument("--out", default="results.jsonl",
                   help="JSON Lines file results append to (default: results.jsonl)")
    p.add_argument("--resume", action="store_true",
                   help="skip cases already recorded as ok (--executor slurm: also gather the "
                        "jobs an earlier run submitted instead of submitting them again)")
    p.add_argument("--dry-run", action="store_true",
                   help="list the planned cases and an estimated time; run nothing")
    p.add_argument("--report", metavar="DIR",
                   help="write report.html / report.md / plots for this sweep into DIR")
    p.add_argument("--tensorboard", metavar="DIR",
                   help="write TensorBoard event files, one run per case, under DIR")
    p.add_argument("--executor", choices=("local", "slurm"), default="local",
                   help="where the cases run: local (default: one after another on this "
                        "machine) or slurm (each case a job through submitit; see --slurm-*)")
    add_targets_flag(p)
    _add_slurm_flags(p)
    p.add_argument("--wide", action="store_true",
                   help="every column of the summary table (default: a compact table within "
                        "120 columns; on a terminal with rich, the full one where it fits)")
    _add_option_flags(p)


def _add_slurm_flags(p: argparse.ArgumentParser) -> None:
    group = p.add_argument_group("--executor slurm: what each job asks for (default: from the "
                                 "case: workers x threads CPUs on one node, a GPU per worker "
                                 "on cuda, its timeout + 5 min)")
    group.add_argument("--slurm-partition", metavar="NAME")
    group.add_argument("--slurm-account", metavar="NAME")
    group.add_argument("--slurm-time", type=positive_int, metavar="MIN",
                       help="time limit of each job in minutes")
    group.add_argument("--slurm-cpus-per-task", type=positive_int, metavar="N")
    group.add_argument("--slurm-gpus-per-node", type=non_negative_int, metavar="N")
    group.add_argument("--slurm-nodes", type=positive_int, metavar="N",
                       help="nodes a case spans whose ranks can be torchrun's (ddp, fsdp, "
                            "pipeline, ..; workers split evenly): one torchrun agent per node "
                            "(default: 1; other cases run on one node)")
    group.add_argument("--slurm-sbatch", action="append", default=[], metavar="--NAME=VALUE",
                       help="a further #SBATCH option for every job (repeatable), e.g. "
                            "--slurm-sbatch=--constraint=a100")
    group.add_argument("--slurm-folder", metavar="DIR",
                       help="submitit's files and the ledger of jobs, on a file system the "
                            "nodes see (default: OUT.slurm beside --out)")


def slurm_options(args: argparse.Namespace) -> Any:
    """The ``--slurm-*`` flags as :class:`~parabench.sweep.slurm.SlurmOptions` (checked)."""
    from pathlib import Path

    from parabench.sweep.slurm import SlurmOptions, sbatch_parameters

    try:
        sbatch_parameters(args.slurm_sbatch)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    return SlurmOptions(
        partition=args.slurm_partition, account=args.slurm_account, time_min=args.slurm_time,
        cpus_per_task=args.slurm_cpus_per_task, gpus_per_node=args.slurm_gpus_per_node,
        nodes=args.slurm_nodes or 1, sbatch=tuple(args.slurm_sbatch),
        folder=Path(args.slurm_folder) if args.slurm_folder else None)


def executor_from(args: argparse.Namespace, cases: list[Any]) -> Any:
    """The executor ``--executor`` names, checked for the planned ``cases`` (exit 2 when SLURM
    cannot be used or would refuse their jobs)."""
    from parabench.sweep.executor import LocalExecutor

    slurm_flags = [f"--{k.replace('_', '-')}" for k, v in vars(args).items()
                   if k.startswith("slurm_") and v not in (None, [])]
    if args.executor == "local":
        if slurm_flags:
            raise UsageError(f"{', '.join(slurm_flags)} only apply with --executor slurm")
        return LocalExecutor()
    import shutil

    from parabench.sweep.slurm import SlurmExecutor
    from parabench.sweep.slurm_queue import queued_states

    options = slurm_options(args)  # the flags first: their errors hold anywhere
    if (missing := [c for c in ("sbatch", "squeue", "scancel") if not shutil.which(c)]):
        raise UsageError(f"--executor slurm: {', '.join(missing)} not found on PATH; run "
                         "parabench where SLURM's commands work (a login node), or start "
                         "the local one-node cluster: scripts/slurm_local.sh start")
    try:
        import submitit  # noqa: F401
    except ImportError:
        raise UsageError("--executor slurm needs submitit: pip install 'parabench[slurm]'"
                         ) from None
    executor = SlurmExecutor(options, out=args.out, resume=args.resume)
    try:
        queued_states()
        executor.check([c.config for c in cases if c.skip_reason is None])
    except (ConnectionError, ValueError) as exc:
        raise UsageError(f"--executor slurm: {exc}") from None
    return executor


def _add_option_flags(p: argparse.ArgumentParser) -> None:
    """One flag per option the registered methods and workloads declare: lists (grid axes)
    except free-text values."""
    from parabench.registry import option_specs

    group = p.add_argument_group("method and workload options (comma lists are grid axes)")
    for name, spec in option_specs().items():
        flag = "--" + name.replace("_", "-")
        if spec.kind is str and not spec.choices:
            group.add_argument(flag, dest=f"opt_{name}", help=spec.help,  # a path / address
                               metavar="DIR" if name.endswith("dir") else "URL")
            continue
        if spec.kind is bool:
            convert, what = bool_value, "on/off values"
            metavar = "on|off[,..]"
        elif spec.kind is int:
            convert = non_negative_int if spec.minimum == 0 else positive_int
            what, metavar = "integers", "N[,N..]"
        else:
            convert, what = choice(spec.choices), ", ".join(spec.choices)
            metavar = "|".join(spec.choices) + "[,..]"
        group.add_argument(flag, dest=f"opt_{name}", type=csv(convert, what),
                           metavar=metavar, help=spec.help)


def option_axes(args: argparse.Namespace) -> dict[str, list]:
    """The option flags given on the command line, each as a list of values to sweep."""
    axes = {}
    for key, value in vars(args).items():
        if key.startswith("opt_") and value is not None:
            axes[key[4:]] = value if isinstance(value, list) else [value]
    return axes


def grid_from(args: argparse.Namespace) -> Grid:
    """The grid ``parabench run``'s arguments ask for, checked before anything starts: the one
    place they become one (torchrun's entry point, :mod:`parabench.cli.torchrun`, uses it too).
    """
    from parabench.sweep import preflight
    from parabench.sweep.plan import Grid, stopping_rule

    preflight.check_timeout(args.timeout)
    grid = Grid(
        workloads=args.workload, methods=args.method, devices=args.device,
        workers=args.workers, batch_sizes=args.batch_size,
        stop=stopping_rule(epochs=args.epochs, target=args.target_quality,
                           max_epochs=args.max_epochs, coverage=_coverage(args),
                           names=args.workload, profile=_profile(args)),
        profile=_profile(args), coverage=_coverage(args), repeats=args.repeats, seed=args.seed,
        timeout_s=args.timeout,
        threads_per_worker=args.threads, oversubscribe=args.oversubscribe,
        options=option_axes(args), steps=args.steps, windows=args.windows,
        cores=_cluster_cores(args),
    )
    preflight.check_options(grid)
    preflight.check_batch_sizes(grid)
    preflight.check_target(grid)
    preflight.check_data_dirs(grid)
    return grid


def _cluster_cores(args: argparse.Namespace) -> int | None:
    """With ``--executor slurm``: the cores of the partition's smallest node, which the cases
    are planned for (None: this machine's)."""
    if getattr(args, "executor", "local") != "slurm":
        return None
    from parabench.sweep.slurm_queue import node_cores

    return node_cores(args.slurm_partition)


def cmd_run(args: argparse.Namespace) -> int:
    from parabench.analysis.wall import wall_lines
    from parabench.case.result import FAILED_STATUSES
    from parabench.engines.probe import check_external_engines
    from parabench.sweep import preflight
    from parabench.sweep.plan import plan
    from parabench.sweep.run import run_grid
    from parabench.sweep.table import format_table, summarize, terminal_width, wrap_lines

    preflight.check_timeout(args.timeout)  # before --out, as ever (grid_from checks it too)
    preflight.check_out(args.out)
    preflight.check_out_dir("--report", args.report)
    preflight.check_out_dir("--tensorboard", args.tensorboard)
    calibration_hints(args, _profile)
    grid = grid_from(args)
    if args.dry_run:
        return dry_run(grid, args)
    check_external_engines(grid.options)  # nothing answers: exit 2 in seconds, not minutes
    with servers_started_early(args, grid):
        cases = plan(grid)
        preflight.check_runnable(cases)  # all before the first case starts
        executor = executor_from(args, cases)
        baselines = earlier_baselines(args.out)
        tensorboard = tensorboard_log(args.tensorboard, args.out)
        results = run_grid(grid, out=args.out, resume=args.resume, on_result=tensorboard,
                           executor=executor)
    print(format_table(summarize(results, baselines), wide=args.wide, width=terminal_width()))
    if wall := wall_lines(results):  # where the time went
        print("\n" + "\n".join(wrap_lines(wall)))
    print(f"\n{len(results)} case(s); results in {args.out}")
    if args.tensorboard:
        print(f"TensorBoard event files: tensorboard --logdir {args.tensorboard}")
    if args.report:
        from parabench.cli.report import write_report_and_say

        write_report_and_say(results, args.report, baselines=baselines,
                             sources=[args.out])
    bad_input = sorted({r.reason for r in results if r.facts.config_error})
    for reason in bad_input:  # e.g. a --data-dir that does not hold the expected layout
        print(f"parabench: error: {reason}", file=sys.stderr)
    if bad_input:
        return EXIT_USAGE
    return EXIT_FAILED if any(r.status in FAILED_STATUSES for r in results) else EXIT_OK


@contextmanager
def servers_started_early(args: argparse.Namespace, grid: Any) -> Iterator[None]:
    """A local run's pre-start servers (:mod:`parabench.core.prestart`), for its CPU cases,
    start importing torch before the sweep is planned: planning probes the devices, which
    imports torch in this process too, so the two imports run side by side instead of one
    after the other. The sweep then forks its cases from these servers; all end with the
    block."""
    from parabench.case.isolate import launch
    from parabench.core.prestart import prestarted
    from parabench.sweep.plan import plan, product_configs

    with prestarted():
        devices = ["cpu"] if grid.devices is None else [d for d in grid.devices if d == "cpu"]
        if args.executor == "local" and not args.resume and devices:
            cpu = dataclasses.replace(grid, devices=devices)  # no device probe
            # before the checks, some of which build a model (torch imported); the coverage
            # grid's choice of cases rests on the checks, so its cases are checked first
            configs = ([c.config for c in plan(cpu) if c.skip_reason is None] if grid.coverage
                       else product_configs(cpu))
            launch([c for c in configs if c.device == "cpu"])
        yield


def dry_run(grid: Any, args: argparse.Namespace) -> int:
    from parabench.sweep.dryrun import describe_plan
    from parabench.sweep.plan import plan

    cases = plan(grid)
    print(describe_plan(cases, list(read_results(args.out)), resume=args.resume))
    if args.executor == "slurm":  # what each job would ask for
        from parabench.sweep.slurm import describe_jobs

        print("\n".join(describe_jobs([c.config for c in cases if c.skip_reason is None],
                                       slurm_options(args))))
    return EXIT_OK


def earlier_baselines(out: str) -> list[Result]:
    """Baseline results already in --out: parity uses them, so the table's speedup does too."""
    from parabench.analysis.ratios import is_baseline

    return [r for r in read_results(out) if is_baseline(r.method) and r.status == "ok"]


def tensorboard_log(log_dir: str | None, out: str = "results.jsonl"
                    ) -> Callable[[Result], None] | None:
    """What writes each result's event files under ``log_dir`` (None without it). A write
    that fails (a full disk) stops the run with one line saying the results in ``out`` stay."""
    if log_dir is None:
        return None
    from parabench.sweep.tensorboard import TensorBoardLog

    try:
        log = TensorBoardLog(log_dir)
    except ImportError as exc:
        raise UsageError(str(exc)) from None

    def write(result: Result) -> None:
        try:
            log.write(result)
        except OSError as exc:
            raise OSError(f"--tensorboard {log_dir}: could not write event files "
                          f"({one_line(exc)}); the run stopped, the results written to "
                          f"{out} so far are kept") from exc

    return write
