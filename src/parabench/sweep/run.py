"""Run a planned grid: each case isolated, results appended, progress shown.

Usage::

    from parabench.stopping import Epochs
    grid = Grid(workloads=["mlp"], methods=["serial"], profile="tiny", stop=Epochs(1))
    results = run_grid(grid, out="results.jsonl", resume=True)   # runs only what is not ok

The cases come from :func:`parabench.sweep.plan.plan`. Each is either runnable or carries the
reason it is not (unsupported workload, missing engine or hardware, unfair thread budget); the
latter are recorded as ``skipped`` without starting anything. ``resume`` skips cases whose
identity is already recorded ``ok`` in ``out`` and returns those recorded results in their place;
a result recorded under another version of its workload (:mod:`parabench.workloads.version`:
its model or data code changed since) is not taken as done: the case runs again, and a line
per workload says so (:func:`resumable`).

Each result written carries its ratios in ``extra["ratios"]`` (:func:`with_ratios`): speedup and
scaling efficiency (:func:`parabench.analysis.ratios.ratios`) with the baseline runs they are
against, or the hint naming a missing one, as the table shows them. The planner puts the
baselines first, so a case's baselines of this sweep have finished when it is written; a
baseline configuration this sweep does not run comes from the results already in ``out``.

Each case that ran ok is also appended to this machine's cost history
(:func:`parabench.sweep.costs.append_costs`), which the dry run's estimates are fitted to; a
history that cannot be written costs one warning line, never the sweep.
"""

from __future__ import annotations

import dataclasses
import sys
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from pathlib import Path

from parabench.analysis.figures import group_key, median_times, seconds_per_sample
from parabench.analysis.parity import assess, work_options
from parabench.analysis.ratios import is_baseline, ratios
from parabench.case.audit import audited
from parabench.case.execute import skipped
from parabench.case.result import Result, append_result, read_results
from parabench.config import ConfigError, RunConfig
from parabench.core.tempdirs import runner_tempdir
from parabench.identity import CaseId, baseline_of
from parabench.registry import methods, workloads
from parabench.sweep.costs import append_costs
from parabench.sweep.executor import Executor, LocalExecutor
from parabench.sweep.plan import Case, Grid, plan
from parabench.sweep.progress import Progress
from parabench.workloads.version import versions_differ, workload_version

# the planner's names, where callers knew them, and with_ratios
__all__ = ["Case", "Grid", "plan", "record", "recorded_baselines", "resumable", "run_grid",
           "with_ratios"]


def with_ratios(result: Result, swept: Iterable[Result], earlier: Iterable[Result] = ()
                ) -> Result:
    """``result`` with ``extra["ratios"]`` (:meth:`~parabench.analysis.ratios.Ratios.as_dict`).

    Its own median steady seconds per sample against the baseline runs' medians: those of
    ``swept`` (this sweep's results so far), else of ``earlier`` (results already in the output
    file), as the table picks them. A result that did not finish ok, or has no steady time or
    samples per epoch, is returned as it is.
    """
    if (mine := seconds_per_sample(result)) is None:
        return result
    key = group_key(result)
    times = {**median_times(earlier), **median_times(swept), key: mine}
    return dataclasses.replace(result, extra={**result.extra,
                                              "ratios": ratios(key, times).as_dict()})


def recorded_baselines(results: Iterable[Result]) -> list[Result]:
    """The baseline runs among ``results`` (an output file's), in their order."""
    return [r for r in results if is_baseline(r.method)]


def record(result: Result, out: str | Path, *, baselines: Sequence[Result],
           swept: Iterable[Result] = (), earlier: Iterable[Result] = ()) -> Result:
    """Check a finished case's figures (:func:`parabench.case.audit.audited`), grade it and
    append it to ``out``: the runner's tail, also torchrun's.

    Parity against ``baselines`` (:func:`parabench.analysis.parity.assess`: the first that
    fits wins) and the ratios against ``swept`` (this sweep's results so far), else
    ``earlier`` (:func:`with_ratios`). A case run on its own (under torchrun) passes the
    baselines already in ``out`` as both ``baselines`` and ``earlier``.
    """
    result = audited(result)  # the figures checked against their evidence, at the file
    result = dataclasses.replace(result, parity=assess(result, list(baselines)))
    result = with_ratios(result, [*swept, result], earlier)
    append_result(out, result)
    return result


def resumable(previous: Iterable[Result], names: Collection[str],
              say: Callable[[str], None] = print) -> dict[tuple | None, Result]:
    """The recorded ok results ``--resume`` takes as done, by case key: all but those of a
    workload in ``names`` recorded under another version than its code's now, whose cases
    run again (``say`` gets one line per such workload). A result without a version (older)
    is taken as done, as before."""
    now = {name: workload_version(workloads.get(name)) for name in names if name in workloads}
    done: dict[tuple | None, Result] = {}
    stale: Counter[tuple[str, str | None, str]] = Counter()
    for r in previous:
        if r.status != "ok":
            continue
        if r.workload in now and versions_differ([r.workload_version], [now[r.workload]]):
            stale[(r.workload, r.workload_version, now[r.workload])] += 1
        else:
            done[r.case_key()] = r
    for (name, old, new), n in sorted(stale.items()):
        say(f"{name} changed since its recorded results (version {old} -> {new}): "
            f"{n} recorded ok result(s) not taken as done, run again")
    return done


def crossing_hint(config: RunConfig, baselines: Sequence[Result]) -> RunConfig:
    """``config`` with ``eval_from``: serial's crossing, where this is a time-to-target case
    graded exactly and its baseline ran before it in this sweep (``baselines``, the newest
    first: the same device, training and target, none of :func:`work_options`) and reached
    the target. Such a method trains serial's mathematics, so it is at the target exactly
    there: it skips every evaluation before it and stops there,
    where parity compares it with serial at the same samples
    (:attr:`~parabench.case.tracker.TargetTracker.eval_from`). Else ``config`` unchanged."""
    if (config.target_quality is None or is_baseline(config.method)
            or config.method not in methods or config.workload not in workloads):
        return config
    grading = methods.get(config.method).grading(workloads.get(config.workload), config)
    if grading.kind != "exact":
        return config
    slot, name = CaseId.of(config).parity_slot, baseline_of(config.method)
    for b in baselines:
        hit = b.time_to_target
        if (b.method != name or b.status != "ok" or b.device != config.device or hit is None
                or not hit.reached or not hit.samples_to_target or work_options(b)
                or (b.config or {}).get("target_quality") != config.target_quality):
            continue
        try:
            planned = RunConfig.from_dict(dict(b.config))
        except (ConfigError, TypeError):  # a result of an older format: no hint from it
            continue
        if CaseId.of(planned).parity_slot == slot:
            return config.replace(eval_from=int(hit.samples_to_target))
    return config


def run_grid(
    grid: Grid,
    *,
    out: str | Path,
    resume: bool = False,
    progress: Progress | None = None,
    on_result: Callable[[Result], None] | None = None,
    executor: Executor | None = None,
) -> list[Result]:
    """Run ``grid``'s cases through ``executor`` (default: :class:`LocalExecutor`), grade and
    append each result to ``out`` and return them all in the planned order.

    An executor that yields results as they finish (``ordered`` False: SLURM) has each one held
    until every baseline case planned before it is recorded (:class:`_Release`), so parity and
    ratios are judged as in a local run. Closing early (Ctrl-C, SIGTERM, a failed write) closes
    the executor, which stops what it runs; what was recorded stays.
    """
    executor = executor or LocalExecutor()
    cases = plan(grid)
    previous = list(read_results(out))
    stream = progress.stream if progress is not None else sys.stderr
    recorded = (resumable(previous, {c.config.workload for c in cases},
                          lambda line: print(line, file=stream, flush=True)) if resume else {})
    baselines = recorded_baselines(previous)
    earlier = list(baselines)  # ratios prefer this sweep's baseline runs (``swept``)
    swept: list[Result] = []
    to_run = [c for c in cases if c.skip_reason is None and c.config.key() not in recorded]
    progress = progress or Progress(total=len(cases), runnable=len(to_run))
    results: dict[int, Result] = {}
    release = _Release(cases, to_run, ordered=executor.ordered)
    where = {id(c): i for i, c in enumerate(cases)}
    unwritten: list[str] = []  # why the cost history could not be written: said once

    def finish(index: int, result: Result, ran: bool) -> None:
        case = cases[index]
        if ran:
            result = record(result, out, baselines=baselines, swept=swept, earlier=earlier)
            if is_baseline(result.method):
                baselines.insert(0, result)  # the newest baseline wins
            if (problem := append_costs(result)) is not None and not unwritten:
                unwritten.append(problem)
                print(f"parabench: warning: the dry run's cost history was not written "
                      f"({problem}); the sweep goes on", file=stream, flush=True)
        elif previous_result(case) is None:  # unrunnable: recorded skipped
            append_result(out, result)
        results[index] = result
        swept.append(result)
        # cases run at once (a cluster's jobs) are timed by their own wall time
        progress.case_done(case.config.label(), result,
                           seconds=result.wall_s if ran and not executor.ordered else None)
        if on_result is not None:  # e.g. TensorBoard event files, written as cases end
            on_result(result)

    def previous_result(case: Case) -> Result | None:
        return recorded.get(case.config.key())

    for index, case in enumerate(cases):  # resumed and unrunnable cases take no time
        if (done := previous_result(case)) is not None:
            release.arrive(index, done, ran=False)
        elif case.skip_reason is not None:
            release.arrive(index, skipped(case.config, case.skip_reason), ran=False)
    for item in release.ready():
        finish(*item)
    # removed on every exit (stale ones of dead runners too)
    with runner_tempdir() as tmp:
        finished = executor.gather(to_run, workdir=tmp, progress=progress,
                                   hint=lambda config: crossing_hint(config, baselines))
        try:
            for case, result in finished:
                release.arrive(where[id(case)], result, ran=True)
                for item in release.ready():
                    finish(*item)
        finally:  # also on Ctrl-C: the executor stops what it still runs
            finished.close()
    progress.finish()
    return [results[i] for i in sorted(results)]


class _Release:
    """When a finished case may be graded and written: in the planned order (``ordered``), or
    as soon as every runnable baseline case planned before it has been (results that come as
    jobs finish), so that a case is judged against the same baselines as in a local run."""

    def __init__(self, cases: list[Case], to_run: list[Case], *, ordered: bool) -> None:
        self._count = len(cases)
        self._ordered = ordered
        runnable = {id(c) for c in to_run}
        #: indices of the baseline cases this sweep runs, not yet released
        self._baselines = {i for i, c in enumerate(cases)
                           if id(c) in runnable and is_baseline(c.config.method)}
        self._arrived: dict[int, tuple[Result, bool]] = {}
        self._next = 0  # ordered: the next index to release

    def arrive(self, index: int, result: Result, *, ran: bool) -> None:
        self._arrived[index] = (result, ran)

    def ready(self) -> Iterator[tuple[int, Result, bool]]:
        """(index, result, ran) of every arrived case that may now be released."""
        while True:
            index = self._next_ready()
            if index is None:
                return
            result, ran = self._arrived.pop(index)
            self._baselines.discard(index)
            yield index, result, ran

    def _next_ready(self) -> int | None:
        if self._ordered:
            if self._next in self._arrived:
                self._next += 1
                return self._next - 1
            return None
        first_pending = min(self._baselines, default=self._count)
        waiting = [i for i in self._arrived if i <= first_pending]
        return min(waiting, default=None)
