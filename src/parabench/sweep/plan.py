"""The one planner: axes expand into cases, each with its skip reason and its pytest markers.

Usage::

    grid = Grid(workloads=["mlp"], methods=["serial", "ddp"], profile="tiny")
    for case in plan(grid):                    # what `parabench run` runs
        case.config, case.skip_reason, case.markers
    for case in bench_cases():                 # what pytest-benchmark and asv measure
        case.id                                # "mlp-ddp-cpu-w2"
        case.markers                           # {"cpu", "torch"}
        case.config("tiny"), case.skip_reason("tiny")

A sweep (:func:`plan`) takes every named method x workload x device x batch x option set x
worker count x repeat, and gives an unrunnable combination the reason it cannot run (it is
recorded ``skipped``). The benchmark cases (:func:`bench_cases`) are every combination a
method *supports* at its default worker counts, profile-free; ``$PARABENCH_WORKLOADS`` /
``$PARABENCH_METHODS`` (comma-separated) restrict them. Both build their RunConfigs with
:meth:`Grid.config`, judge them with :func:`skip_reason` and mark them with
:func:`case_markers`, whose markers come from :data:`parabench.hardware.REQUIREMENTS`.
Baselines come first, so every later case can be checked against them. When a sweep selects
the baseline method, it also gets the baseline runs its ratios need, as
:func:`parabench.analysis.ratios.baseline_keys` names them (the keys
:func:`~parabench.analysis.ratios.ratios` looks up: one rule, so planner and comparer cannot
disagree): for each runnable case of ``w`` workers x ``t`` threads, the baseline at ``w x t``
threads (speedup at equal cores) and at ``t`` threads (scaling efficiency), at the same
workload, device, batch, options and repeat. The run at the grid's own threads stays last,
so it is the one parity checks against, as before.

**The coverage grid** (``Grid(coverage=True)``: what ``parabench run`` plans when given neither
``--workload`` nor ``--method``) is planned by :mod:`parabench.sweep.coverage`.
"""

from __future__ import annotations

import itertools
import os
from typing import NamedTuple

from parabench.config import RunConfig, available_cores
from parabench.identity import (
    BASELINE_METHOD,
    is_baseline,
)
from parabench.registry import methods, workloads
from parabench.stopping import Epochs
from parabench.sweep.coverage import coverage
from parabench.sweep.grid import (
    Case,
    Grid,
    case_id,
    case_markers,
    default_devices,
    option_sets,
    skip_reason,
    stopping_rule,
    with_ratio_baselines,
)

__all__ = ["BenchCase", "Case", "Grid", "bench_cases", "case_markers", "option_sets", "plan",
           "product_configs", "skip_reason", "stopping_rule", "with_ratio_baselines"]


def plan(grid: Grid) -> list[Case]:
    """Every case of the grid, in a stable order; names are checked before anything runs."""
    if grid.coverage:
        return coverage(grid)
    cores = grid.cores or available_cores()
    cases = [Case(config=config,
                  skip_reason=skip_reason(config, oversubscribe=grid.oversubscribe, cores=cores))
             for config in product_configs(grid)]
    return with_ratio_baselines(cases, grid, cores)


def product_configs(grid: Grid) -> list[RunConfig]:
    """The configs :func:`plan` judges (not for a coverage grid), in its order, before any
    check: nothing is probed or built but the devices where ``grid.devices`` is None."""
    wl_names = list(grid.workloads or workloads.names())
    m_names = list(grid.methods or methods.names())
    for name in m_names:
        methods.get(name)  # UnknownNameError lists the valid ones
    for name in wl_names:
        workloads.get(name)
    m_names.sort(key=lambda name: not is_baseline(name))
    cores = grid.cores or available_cores()
    configs: list[RunConfig] = []
    axes = itertools.product(wl_names, m_names, grid.devices or default_devices(),
                             grid.batch_sizes, option_sets(grid.options))
    for wl_name, m_name, device, batch, options in axes:
        counts = list(grid.workers or methods.get(m_name).default_workers(cores))
        if is_baseline(m_name):  # the baseline runs as itself whatever workers are swept
            counts = [1]
        configs += [grid.config(workload=wl_name, method=m_name, device=device, workers=workers,
                                batch_size=batch, options=options, repeat=repeat)
                    for workers, repeat in itertools.product(counts, range(grid.repeats))]
    return configs


class BenchCase(NamedTuple):
    """A benchmark case: profile-free, so the fixture or asv picks the profile at run time.

    Its four fields are asv's parameters (``workload``, ``method``, ``device``, ``workers``),
    in that order, and make its pytest id. A named tuple, so pytest-benchmark's ``params``
    hold it as JSON (``["mlp", "ddp", "cpu", 2]``) instead of an unserialisable object.
    """

    workload: str
    method: str
    device: str
    workers: int

    def config(self, profile: str = "tiny") -> RunConfig:
        """One epoch per call of the lifecycle's ``step``; everything else the defaults."""
        return Grid(profile=profile, stop=Epochs(1)).config(
            workload=self.workload, method=self.method, device=self.device,
            workers=self.workers)

    @property
    def id(self) -> str:
        return case_id(self.workload, self.method, self.device, self.workers)

    @property
    def markers(self) -> set[str]:
        return case_markers(self.workload, self.method, self.device, self.workers)

    def skip_reason(self, profile: str = "tiny") -> str | None:
        """Why this case cannot run here (None: it can)."""
        return skip_reason(self.config(profile))


#: comma-separated names restricting :func:`bench_cases` (pytest-benchmark and asv alike)
SELECT_ENV = {"workloads": "PARABENCH_WORKLOADS", "methods": "PARABENCH_METHODS"}


def _selected(kind: str) -> list[str] | None:
    """Names from ``$PARABENCH_WORKLOADS`` / ``$PARABENCH_METHODS`` (checked), or None."""
    text = os.environ.get(SELECT_ENV[kind], "").strip()
    if not text:
        return None
    registry = workloads if kind == "workloads" else methods
    names = [n.strip() for n in text.split(",") if n.strip()]
    for name in names:
        registry.get(name)  # UnknownNameError lists the valid names
    return names


def bench_cases(cores: int | None = None) -> list[BenchCase]:
    """Every supported (workload, method, device, workers) combination, baseline first."""
    only_w, only_m = _selected("workloads"), _selected("methods")
    cases = []
    for method, workload in itertools.product(methods, workloads):
        if (only_m is not None and method.name not in only_m
                or only_w is not None and workload.name not in only_w
                or not method.supports(workload)):
            continue
        for device in method.devices_for(workload):
            for workers in method.default_workers(cores or max(2, available_cores())):
                cases.append(BenchCase(workload=workload.name, method=method.name,
                                       device=device, workers=workers))
    return sorted(cases, key=lambda c: (c.method != BASELINE_METHOD, not is_baseline(c.method),
                                        c.method, c.workload, c.device, c.workers))
