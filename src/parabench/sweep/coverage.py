"""The coverage grid: every method once and every workload under a data-parallel method, in
minutes.

Usage::

    from parabench.stopping import Epochs
    from parabench.sweep.plan import Grid, plan
    cases = plan(Grid(coverage=True, profile="tiny", stop=Epochs(1)))   # what `parabench run` runs
    coverage(Grid(coverage=True, profile="tiny", stop=Epochs(1)))       # the same cases
    data_parallel_methods()                                       # ['ddp', 'rf_threads', ...]

The coverage grid (``Grid(coverage=True)``: what ``parabench run`` plans when given neither
``--workload`` nor ``--method``; ``--all`` gives the full product of
:func:`parabench.sweep.plan.plan`) answers "does every method
run, and how fast is each workload in parallel" in minutes instead of hours (:func:`coverage`):

* every registered method once, on its cheapest workload (the smallest guessed case time,
  :func:`parabench.sweep.dryrun.guess_s`; ties by name) among those it can run here, at the
  smallest worker count that exercises it (:data:`COVERAGE_WORKERS` = 2, capped by the
  method's ``max_workers``: 1 for the baselines and model_parallel). A method that can run
  nothing here is planned on its cheapest supported workload anyway, so it is a skipped row
  with its reason (no GPU, engine not installed), as in the full sweep.
* every workload under its baseline and one data-parallel method, the first of
  :func:`data_parallel_methods` (by their declared ``coverage_rank``) that trains it (ddp
  for torch workloads, rf_threads for estimators; TensorFlow's data-parallel method
  covers itself on mlp, the cheapest workload with a Keras model).
* the baseline of every runnable case (serial, tf_serial for the TensorFlow methods) at the
  grid's threads, and every other baseline run its ratios read
  (:func:`parabench.analysis.ratios.baseline_keys`, the comparer's own rule: serial at 1
  thread for 2 x 1's scaling efficiency), so every row has its parity, its speedup at equal
  cores and its scaling efficiency, and the run ends with no "missing baseline" hint.
  That cost four runs (conv_autoencoder, densenet121, seq2seq and tf_serial at 1 thread,
  ~1.5 minutes guessed); to stay within the run's 10 minutes densenet121 left the grid
  (``Workload.in_coverage``: after one tiny epoch it is near chance, so its rows said
  little, and vgg11 covers a BatchNorm image classifier under ddp; ``--all`` or
  ``--workload densenet121`` runs it).
* 1 epoch at the ``tiny`` profile unless told otherwise (the CLI's defaults), except a
  workload where a statistical method's quality verdict would be blind after so few epochs
  and its converged check is cheap (:func:`_held_to_target`: mlp at tiny, fedavg): its cases
  run in time-to-target mode, to the workload's measured target, with the target's epoch
  budget as their most epochs, so the statistical row trains on to that budget and is judged
  against serial's measured seeds (its stated blind spot shrinks from one epoch's seed
  spread to the converged one's), and the workload's answer ranks by time to the target.
  Where that hold is guessed to take more than :data:`COVERAGE_HOLD_MAX_S` (vgg11's and
  seq2seq's BatchNorm or dropout ddp), the row keeps its one-epoch verdict and
  states its wider blind spot; ``--target-quality`` holds them all.
  ``parabench run --dry-run`` shows how many cases that is and the estimate from the guesses
  of :mod:`parabench.sweep.dryrun`, most of it start-up (Spark, TensorFlow); adding or
  slowing a workload or method moves it, and the tests keep the coverage. The measured time
  of the default run is in docs/measurements.md.

The first device of ``grid.devices`` (default: cpu, then cuda) a method runs the workload on
is used. ``--workers`` replaces the worker count; ``--workload``/``--method`` narrow nothing
here (they select the product instead). The result is deterministic: workloads in registry
order, each with its baseline first, then the methods by name.
"""

from __future__ import annotations

import itertools
from typing import Any

from parabench.case.stopping import at_measured_target, default_max_epochs, hold_epochs
from parabench.config import BatchSize, RunConfig, available_cores
from parabench.identity import baseline_of, is_baseline
from parabench.registry import methods, workloads
from parabench.stopping import Epochs
from parabench.sweep.grid import (
    Case,
    Grid,
    default_devices,
    option_sets,
    skip_reason,
    with_ratio_baselines,
)

__all__ = ["COVERAGE_HOLD_MAX_S", "COVERAGE_WORKERS", "coverage",
           "data_parallel_methods"]


#: worker count of the coverage grid's multi-worker cases: the smallest that parallelises
COVERAGE_WORKERS = 2
#: the coverage grid holds a workload to its target (:func:`_held_to_target`) only when its
#: statistical case, trained to the target's epoch budget, is guessed to take at most this
#: long: at tiny, mlp's fedavg (24 epochs, ~20 s); not vgg11 (27 s), densenet121 (39 s) or
#: seq2seq (47 s), whose ddp is graded statistically
COVERAGE_HOLD_MAX_S = 25.0


def data_parallel_methods() -> list[str]:
    """The methods that may stand for data parallelism on a workload in the coverage grid,
    in the order they are tried: those declaring a ``coverage_rank`` on their own class."""
    ranked = [(rank, m.name) for m in methods
              if (rank := vars(type(m)).get("coverage_rank")) is not None]
    return [name for _, name in sorted(ranked)]


def coverage(grid: Grid) -> list[Case]:
    """The coverage grid (see the module docstring): every method once, every workload under
    its baseline and a data-parallel method, and the baselines their ratios need."""
    cores = grid.cores or available_cores()
    out: list[Case] = []
    for batch, options, repeat in itertools.product(
            grid.batch_sizes, option_sets(grid.options), range(grid.repeats)):
        def judged(workload: str, method: str, workers: int, device: str | None = None,
                   batch: BatchSize = batch, options: dict = options, repeat: int = repeat,
                   ) -> Case:
            config = grid.config(workload=workload, method=method, workers=workers,
                                 device=device or _device(grid, workload, method),
                                 batch_size=batch, options=options, repeat=repeat)
            return Case(config=config, skip_reason=skip_reason(
                config, oversubscribe=grid.oversubscribe, cores=cores))

        out += with_ratio_baselines(_coverage_slot(grid, judged), grid, cores)
    return _held_to_target(out) if isinstance(grid.stop, Epochs) else out


def _held_to_target(cases: list[Case]) -> list[Case]:
    """The coverage grid's cases with every case of a workload that needs it in time-to-target
    mode: a workload with a runnable statistical case whose converged check (training on to
    the measured target's epoch budget, :func:`parabench.case.stopping.hold_epochs`) is guessed
    to take at most :data:`COVERAGE_HOLD_MAX_S`. The whole workload, so its answer ranks every
    row by time to the same target; its most epochs are the budget (or more, if asked)."""
    from parabench.sweep.dryrun import guess_s

    def held(config: RunConfig) -> RunConfig | None:
        return at_measured_target(config, max(config.epochs, default_max_epochs(
            [config.workload], config.profile)))

    def cheap_hold(config: RunConfig) -> bool:
        workload = workloads.get(config.workload)
        if methods.get(config.method).grading(workload, config).kind != "statistical":
            return False
        target = held(config)
        return (target is not None and hold_epochs(workload, target) is not None
                and guess_s(target) <= COVERAGE_HOLD_MAX_S)

    chosen = {c.config.workload for c in cases if c.skip_reason is None and cheap_hold(c.config)}
    return [Case(config=held(c.config), skip_reason=c.skip_reason)
            if c.config.workload in chosen else c for c in cases]


def _coverage_slot(grid: Grid, judged: Any) -> list[Case]:
    """One coverage grid at one batch size, option set and repeat; ``judged`` makes a Case."""
    picked: dict[tuple[str, str], list[Case]] = {}
    for method in methods:
        counts = _coverage_workers(grid, method.name)
        workload = _cheapest_workload(grid, method.name, counts[0], judged)
        picked.setdefault((workload, method.name), [judged(workload, method.name, w)
                                                    for w in counts])
    for workload in _covered():
        dp = next((m for m in data_parallel_methods()
                   if methods.get(m).supports(workloads.get(workload))), None)
        for name in [m for m in [dp] if m]:
            picked.setdefault((workload, name), [judged(workload, name, w)
                                                 for w in _coverage_workers(grid, name)])
    for (workload, name), cases in list(picked.items()):  # each runnable case's baseline
        base = baseline_of(name)
        if any(c.skip_reason is None for c in cases) and base in methods.names():
            picked.setdefault((workload, base), [judged(workload, base, 1,
                                                        device=cases[0].config.device)])
    order = {name: i for i, name in enumerate(workloads.names())}
    keys = sorted(picked, key=lambda k: (order[k[0]], not is_baseline(k[1]), k[1]))
    return [case for key in keys for case in picked[key]]


def _coverage_workers(grid: Grid, method: str) -> list[int]:
    cap = methods.get(method).max_workers
    if is_baseline(method) or cap == 1:
        return [1]
    counts = list(grid.workers or [COVERAGE_WORKERS])
    return [min(n, cap) for n in counts] if cap else counts


def _device(grid: Grid, workload: str, method: str) -> str:
    """The first of the grid's devices the method runs the workload on, else its own first."""
    own = methods.get(method).devices_for(workloads.get(workload))
    return next((d for d in grid.devices or default_devices() if d in own), own[0])


def _covered() -> list[str]:
    """The workloads the coverage grid may train (``Workload.in_coverage``)."""
    return [n for n in workloads.names() if workloads.get(n).in_coverage]


def _cheapest_workload(grid: Grid, method: str, workers: int, judged: Any) -> str:
    """The cheapest workload the method runs here; else the cheapest it supports (a skipped
    row saying why); else the cheapest of all (a row saying it supports none)."""
    from parabench.sweep.dryrun import guess_s

    def cost(name: str) -> tuple[float, str]:  # at tiny whatever the profile: one ranking
        config = grid.config(workload=name, method=method, device="cpu", workers=workers)
        return guess_s(config.replace(profile="tiny")), name

    names = sorted(_covered(), key=cost)
    supported = [n for n in names if methods.get(method).supports(workloads.get(n))]
    runnable = [n for n in supported if judged(n, method, workers).skip_reason is None]
    return (runnable or supported or names)[0]
