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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from parabench import hardware
from parabench.analysis.ratios import baseline_keys
from parabench.case.target import default_max_epochs, resolve
from parabench.config import DEVICES, BatchSize, ConfigError, RunConfig, available_cores
from parabench.identity import (
    BASELINE_METHOD,
    CaseId,
    baseline_threads,
    is_baseline,
    slug,
    work_options,
)
from parabench.registry import methods, workloads
from parabench.stopping import COVERAGE_EPOCHS, DEFAULT_EPOCHS, Epochs, StoppingRule, ToTarget
from parabench.workloads.targets import quality_target


@dataclass(frozen=True, kw_only=True)
class Grid:
    """The axes of a sweep. ``None`` means "everything sensible here" for that axis."""

    workloads: Sequence[str] | None = None
    methods: Sequence[str] | None = None
    devices: Sequence[str] | None = None
    workers: Sequence[int] | None = None
    batch_sizes: Sequence[BatchSize] = (None,)
    #: when each case stops (:mod:`parabench.stopping`), resolved per workload by
    #: :meth:`config`; :func:`stopping_rule` is what ``parabench run`` decides from its flags
    stop: StoppingRule = Epochs(DEFAULT_EPOCHS)
    profile: str = "quick"
    repeats: int = 1
    seed: int = 0
    timeout_s: float = 600.0
    threads_per_worker: int | None = None
    oversubscribe: bool = False
    #: option name -> values to sweep (each a grid axis); each declared by a method or workload
    #: (parabench.config.OptionSpec, listed by parabench.registry.option_specs)
    options: Mapping[str, Sequence[Any]] = field(default_factory=dict)
    #: plan the coverage grid (parabench.sweep.coverage) instead of the full product
    coverage: bool = False
    #: speed windows (RunConfig.steps / windows; None: calibrated / the default count)
    steps: int | None = None
    windows: int | None = None

    def config(self, *, workload: str, method: str, device: str, workers: int,
               batch_size: BatchSize = None, options: dict[str, Any] | None = None,
               repeat: int = 0) -> RunConfig:
        """The RunConfig of one point of the grid: the only place one is built from axes."""
        options = options if options is not None else {}
        stop = resolve(self.stop, workloads.get(workload), self.profile,
                       own_data=bool(options.get("data_dir")))
        return RunConfig(
            workload=workload, method=method, device=device, workers=workers,
            threads_per_worker=self.threads_per_worker, batch_size=batch_size,
            epochs=stop.n if isinstance(stop, Epochs) else stop.max_epochs,
            target_quality=stop.quality if isinstance(stop, ToTarget) else None,
            profile=self.profile, seed=self.seed, repeat=repeat, timeout_s=self.timeout_s,
            options=options, steps=self.steps, windows=self.windows,
        )


def stopping_rule(*, epochs: int | None = None, target: ToTarget | None = None,
                  max_epochs: int | None = None, coverage: bool = False,
                  names: Sequence[str] | None = None, profile: str = "quick") -> StoppingRule:
    """A sweep's stopping rule from what its user gave (None: not given): ``--epochs N``,
    ``--target-quality`` (``target``: a number, or each workload's own), ``--max-epochs N``,
    for the workloads ``names`` (None: all) at ``profile``; the coverage grid (``coverage``)
    trains :data:`COVERAGE_EPOCHS`. Given neither ``--epochs`` nor ``--target-quality``, a
    sweep trains each workload with a measured target at the profile to it and the others
    :data:`DEFAULT_EPOCHS`. A numeric or default target without ``--max-epochs`` is capped at
    :func:`~parabench.case.target.default_max_epochs` of the workloads. Contradictions raise
    :class:`~parabench.config.ConfigError` saying which flag to use."""
    selected = list(names or workloads.names())
    if target is not None:
        if epochs is not None:
            raise ConfigError("--epochs N trains exactly N epochs, --target-quality stops "
                              "when the target is reached; give its cap as --max-epochs N "
                              f"(default {default_max_epochs([], profile)})")
        return ToTarget(target.quality,
                        max_epochs=max_epochs or default_max_epochs(selected, profile))
    if epochs is None and not coverage:
        if max_epochs is not None and not any(
                w in workloads and quality_target(w, profile) is not None for w in selected):
            named = ",".join(names or []) or "the workloads"
            raise ConfigError(f"--max-epochs caps a --target-quality run (or a run to a "
                              f"workload's measured target: none of {named} has one at "
                              f"{profile}); for a fixed count use --epochs N")
        return ToTarget(max_epochs=max_epochs, otherwise=Epochs(DEFAULT_EPOCHS))
    if max_epochs is not None:
        raise ConfigError("--max-epochs caps a run to the target quality; for a fixed count "
                          "use --epochs N (not both)" if epochs else
                          "--max-epochs caps a --target-quality run; the coverage grid "
                          "takes --epochs N")
    return Epochs(epochs or COVERAGE_EPOCHS)


def case_id(workload: str, method: str, device: str, workers: int) -> str:
    """The pytest-benchmark id of a case (asv's parameters are the same four values):
    :meth:`parabench.identity.CaseKey.slug`'s ``mlp-ddp-cpu-w2``."""
    return slug(workload, method, device, f"w{workers}")


def case_markers(workload: str, method: str, device: str, workers: int) -> set[str]:
    """pytest markers of a case: its requirements' markers, plus ``cpu`` or ``cuda``."""
    needs = set(methods.get(method).requires) | set(workloads.get(workload).requires)
    if device == "cuda":
        needs.add("multigpu" if workers > 1 else "cuda")
    table = hardware.REQUIREMENTS
    marks = {marker for n in needs if n in table and (marker := table[n].marker) is not None}
    return marks | {"cuda" if device == "cuda" else "cpu"}


def _axes(config: RunConfig) -> tuple[str, str, str, int]:
    return config.workload, config.method, config.device, config.workers


def skip_reason(config: RunConfig, *, oversubscribe: bool = False,
                cores: int | None = None) -> str | None:
    """Why this case cannot run here (None: it can): the method's check, then the cores."""
    cores = cores or available_cores()
    reason = methods.get(config.method).check(workloads.get(config.workload), config)
    if reason is None and not oversubscribe and config.oversubscribed(cores):
        reason = (
            f"{config.workers} worker(s) x {config.threads} thread(s) exceeds the {cores} cores "
            "here; use fewer workers/threads or pass --oversubscribe"
        )
    return reason


@dataclass(frozen=True, kw_only=True)
class Case:
    """A planned case of a sweep: its config, and why it cannot run (None: it can)."""

    config: RunConfig
    skip_reason: str | None = None

    @property
    def id(self) -> str:
        return case_id(*_axes(self.config))

    @property
    def markers(self) -> set[str]:
        return case_markers(*_axes(self.config))


def default_devices() -> list[str]:
    return [d for d in DEVICES if d == "cpu" or hardware.probe("cuda") is None]


def option_sets(options: Mapping[str, Sequence[Any]]) -> list[dict[str, Any]]:
    """Every combination of the swept options, those with fewer work options on (compile,
    checkpointing, DataLoader knobs away from their defaults) first: a serial run with them
    is graded on the plain serial run, which must have been recorded before it."""
    names = sorted(options)
    combos = [dict(zip(names, values, strict=True))
              for values in itertools.product(*(options[n] for n in names))]
    return sorted(combos, key=lambda combo: len(work_options(combo)))


def plan(grid: Grid) -> list[Case]:
    """Every case of the grid, in a stable order; names are checked before anything runs."""
    if grid.coverage:
        from parabench.sweep.coverage import coverage  # it plans with this module's pieces

        return coverage(grid)
    wl_names = list(grid.workloads or workloads.names())
    m_names = list(grid.methods or methods.names())
    for name in m_names:
        methods.get(name)  # UnknownNameError lists the valid ones
    for name in wl_names:
        workloads.get(name)
    m_names.sort(key=lambda name: not is_baseline(name))
    cores = available_cores()
    cases: list[Case] = []
    axes = itertools.product(wl_names, m_names, grid.devices or default_devices(),
                             grid.batch_sizes, option_sets(grid.options))
    for wl_name, m_name, device, batch, options in axes:
        counts = list(grid.workers or methods.get(m_name).default_workers(cores))
        if is_baseline(m_name):  # the baseline runs as itself whatever workers are swept
            counts = [1]
        for workers, repeat in itertools.product(counts, range(grid.repeats)):
            config = grid.config(workload=wl_name, method=m_name, device=device,
                                 workers=workers, batch_size=batch, options=options,
                                 repeat=repeat)
            reason = skip_reason(config, oversubscribe=grid.oversubscribe, cores=cores)
            cases.append(Case(config=config, skip_reason=reason))
    return with_ratio_baselines(cases, grid, cores)


def with_ratio_baselines(cases: list[Case], grid: Grid, cores: int) -> list[Case]:
    """``cases`` plus, before each planned baseline run, the same baseline at every other
    thread count the runnable cases' ratios need (none when no baseline run is planned)."""
    needed: dict[tuple, set[int]] = {}
    for case in cases:
        c = case.config
        if case.skip_reason is None and not is_baseline(c.method):
            cid = CaseId.of(c)  # the runs ratios() will look for: the comparer's own rule
            for want in baseline_keys(cid.group):
                needed.setdefault(cid.baseline_slot(want.method), set()).add(want.threads)
    out: list[Case] = []
    for case in cases:
        c = case.config
        if is_baseline(c.method) and (own := baseline_threads(c.workload, c.method,
                                                              c.threads)) != c.threads:
            c = c.replace(threads_per_worker=own)  # what it records: one run, not two
            case = Case(config=c, skip_reason=case.skip_reason)
        if is_baseline(c.method):
            slot = CaseId.of(c).baseline_slot(c.method)
            for threads in sorted(needed.get(slot, set()) - {c.threads}):
                extra = c.replace(threads_per_worker=threads)
                out.append(Case(config=extra, skip_reason=skip_reason(
                    extra, oversubscribe=grid.oversubscribe, cores=cores)))
        out.append(case)
    return out


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
