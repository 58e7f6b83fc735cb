"""A sweep's axes and its cases: the pieces both planners use.

Usage::

    from parabench.sweep.grid import Grid, skip_reason
    grid = Grid(workloads=["mlp"], methods=["serial", "ddp"], profile="tiny")
    config = grid.config(workload="mlp", method="ddp", device="cpu", workers=2)
    skip_reason(config)                       # None: it can run here

:class:`Grid` (the axes and the stopping rule, :func:`stopping_rule`), :class:`Case` (a
planned RunConfig with its skip reason and markers), :func:`skip_reason`,
:func:`case_markers`, :func:`option_sets` and :func:`with_ratio_baselines`. The full product
(:func:`parabench.sweep.plan.plan`) and the coverage grid (:mod:`parabench.sweep.coverage`)
both build from them, so neither imports the other's planner.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from parabench import hardware
from parabench.analysis.ratios import baseline_keys
from parabench.case.stopping import default_max_epochs, resolve
from parabench.config import DEVICES, BatchSize, ConfigError, RunConfig, available_cores
from parabench.identity import (
    CaseId,
    baseline_threads,
    is_baseline,
    slug,
    work_options,
)
from parabench.registry import methods, workloads
from parabench.stopping import COVERAGE_EPOCHS, DEFAULT_EPOCHS, Epochs, StoppingRule, ToTarget
from parabench.workloads.quality_targets import quality_target


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
    #: RunConfig.train_seed of every case (None: the seed's own training)
    train_seed: int | None = None
    timeout_s: float = 600.0
    threads_per_worker: int | None = None
    oversubscribe: bool = False
    #: the cores of the machine each case runs on (None: this one's): a cluster's nodes, when
    #: the sweep is planned on a login node (``--executor slurm``); the fair thread share and
    #: the oversubscription check use them
    cores: int | None = None
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
                       own_data=bool(options.get("data_dir")),
                       data_dir=options.get("data_dir"), device=device)
        threads = self.threads_per_worker
        if threads is None and self.cores is not None:  # the fair share of those cores
            threads = max(1, self.cores // workers)
        return RunConfig(
            workload=workload, method=method, device=device, workers=workers,
            threads_per_worker=threads, batch_size=batch_size,
            profile=self.profile, seed=self.seed, train_seed=self.train_seed, repeat=repeat,
            timeout_s=self.timeout_s, options=options, steps=self.steps, windows=self.windows,
        ).with_stop(stop)


def stopping_rule(*, epochs: int | None = None, target: ToTarget | None = None,
                  max_epochs: int | None = None, coverage: bool = False,
                  names: Sequence[str] | None = None, profile: str = "quick") -> StoppingRule:
    """A sweep's stopping rule from what its user gave (None: not given): ``--epochs N``,
    ``--target-quality`` (``target``: a number, or each workload's own), ``--max-epochs N``,
    for the workloads ``names`` (None: all) at ``profile``; the coverage grid (``coverage``)
    trains :data:`COVERAGE_EPOCHS`. Given neither ``--epochs`` nor ``--target-quality``, a
    sweep trains each workload with a measured target at the profile to it and the others
    :data:`DEFAULT_EPOCHS`. A numeric or default target without ``--max-epochs`` is capped at
    :func:`~parabench.case.stopping.default_max_epochs` of the workloads. Contradictions raise
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
