"""Expand a grid of cases, run each one isolated, append results, show progress.

Usage::

    grid = Grid(workloads=["mlp"], methods=["serial"], profile="tiny", repeats=3)
    results = run_grid(grid, out="results.jsonl", resume=True)

Each planned case is either runnable or carries the reason it is not (unsupported workload,
missing engine or hardware, unfair thread budget); the latter are recorded as ``skipped``
without starting anything. ``resume`` skips cases whose identity is already recorded ``ok``
in ``out`` and returns those recorded results in their place.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from parabench.case.execute import skipped
from parabench.case.isolate import run_isolated
from parabench.case.target import resolve_target
from parabench.case.tempdirs import runner_tempdir
from parabench.config import DEVICES, BatchSize, RunConfig, available_cores
from parabench.registry import methods, workloads
from parabench.sweep.parity import assess
from parabench.sweep.progress import Progress
from parabench.sweep.result import Result, append_result, read_results


@dataclass(frozen=True, kw_only=True)
class Grid:
    """The axes of a sweep. ``None`` means "everything sensible here" for that axis."""

    workloads: Sequence[str] | None = None
    methods: Sequence[str] | None = None
    devices: Sequence[str] | None = None
    workers: Sequence[int] | None = None
    batch_sizes: Sequence[BatchSize] = (None,)
    epochs: int = 3
    profile: str = "quick"
    repeats: int = 1
    seed: int = 0
    timeout_s: float = 600.0
    threads_per_worker: int | None = None
    oversubscribe: bool = False
    #: option name -> values to sweep (each a grid axis); see config.OPTIONS
    options: Mapping[str, Sequence[Any]] = field(default_factory=dict)
    #: time-to-target mode: a quality, or "default" for each workload's own (parabench.case.target);
    #: ``epochs`` is then the most epochs a case trains
    target_quality: float | str | None = None


@dataclass(frozen=True, kw_only=True)
class Case:
    config: RunConfig
    skip_reason: str | None = None


def default_devices() -> list[str]:
    from parabench import hardware

    return [d for d in DEVICES if d == "cpu" or hardware.probe("cuda") is None]


def plan(grid: Grid) -> list[Case]:
    """Every case of the grid, in a stable order; names are checked before anything runs."""
    wl_names = list(grid.workloads or workloads.names())
    m_names = list(grid.methods or methods.names())
    # the baseline runs first, so every later case of the sweep can be checked against it
    m_names.sort(key=lambda name: methods.get(name).parity != "baseline")
    for name in wl_names:
        workloads.get(name)  # UnknownNameError lists the valid ones
    for name in m_names:
        methods.get(name)
    cores = available_cores()
    cases: list[Case] = []
    names = sorted(grid.options)
    option_sets = [dict(zip(names, values, strict=True))
                   for values in itertools.product(*(grid.options[n] for n in names))]
    axes = itertools.product(wl_names, m_names, grid.devices or default_devices(),
                             grid.batch_sizes, option_sets)
    for wl_name, m_name, device, batch, options in axes:
        method = methods.get(m_name)
        counts = list(grid.workers or method.default_workers(cores))
        if method.parity == "baseline":  # the baseline runs as itself whatever workers are swept
            counts = [1]
        for workers in counts:
            for repeat in range(grid.repeats):
                config = RunConfig(
                    workload=wl_name, method=m_name, device=device, workers=workers,
                    threads_per_worker=grid.threads_per_worker, batch_size=batch,
                    epochs=grid.epochs, profile=grid.profile, seed=grid.seed, repeat=repeat,
                    timeout_s=grid.timeout_s, options=options,
                    target_quality=resolve_target(grid.target_quality, workloads.get(wl_name)),
                )
                cases.append(Case(config=config, skip_reason=_skip_reason(config, grid, cores)))
    return cases


def _skip_reason(config: RunConfig, grid: Grid, cores: int) -> str | None:
    reason = methods.get(config.method).check(workloads.get(config.workload), config)
    if reason is None and not grid.oversubscribe and config.oversubscribed(cores):
        reason = (
            f"{config.workers} worker(s) x {config.threads} thread(s) exceeds the {cores} cores "
            "here; use fewer workers/threads or pass --oversubscribe"
        )
    return reason


def run_grid(
    grid: Grid,
    *,
    out: str | Path,
    resume: bool = False,
    progress: Progress | None = None,
    on_result: Callable[[Result], None] | None = None,
) -> list[Result]:
    cases = plan(grid)
    previous = list(read_results(out))
    recorded = {r.case_key(): r for r in previous if r.status == "ok"} if resume else {}
    baselines = [r for r in previous if _is_baseline(r)]
    runnable = sum(1 for c in cases
                   if c.skip_reason is None and c.config.key() not in recorded)
    progress = progress or Progress(total=len(cases), runnable=runnable)
    results: list[Result] = []
    with runner_tempdir() as tmp:  # removed on every exit; stale ones of dead runners too
        for case in cases:
            label = case.config.label()
            if (previous := recorded.get(case.config.key())) is not None:
                result = previous
            elif case.skip_reason is not None:
                result = skipped(case.config, case.skip_reason)
                append_result(out, result)
            else:
                progress.show(label)
                result = run_isolated(
                    case.config, workdir=tmp, on_tick=lambda d, lb=label: progress.show(lb, d)
                )
                result = dataclasses.replace(result, parity=assess(result, baselines))
                append_result(out, result)
                if _is_baseline(result):
                    baselines.insert(0, result)  # the newest baseline wins
            results.append(result)
            progress.case_done(label, result)
            if on_result is not None:  # e.g. TensorBoard event files, written as cases end
                on_result(result)
    progress.finish()
    return results


def _is_baseline(result: Result) -> bool:
    return result.method in methods and methods.get(result.method).parity == "baseline"
