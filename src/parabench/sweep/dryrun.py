"""``parabench run --dry-run``: the planned cases and an estimated time, before anything runs.

Usage::

    print(describe_plan(plan(grid), previous=list(read_results(out)), resume=False))

Where this machine recorded cases (its cost history, :mod:`parabench.sweep.costs`, and the ok
results in ``--out``), each case's estimate comes from the cost model fitted to them
(:mod:`parabench.sweep.costmodel`: start-up, seconds per epoch, per evaluation and for the
windows, by workload, method and size, backing off to coarser keys), with the epochs and
evaluations planned as the case will run (:func:`planned`); its line says how many recorded
cases the model drew on and how many of them were this case (a component no recorded run
gave is a declared guess, named, and the estimate marked ``?``), and the total adds the
sweep's own overhead and says the model's leave-one-out error (``± 7 % (leave-one-out over
41 recorded cases ...)``). The model replaces the median of earlier results of the same case: at
its most specific key it is that case's own figures, with the counts the code plans now (an
earlier run may have evaluated more often). A case this machine has not recorded is
estimated from the shipped reference table (:mod:`parabench.sweep.costref`: the default grid
and the main job as they ran on the machine it names), scaled by the cases this machine has
recorded, and marked ``*``; that error does not cover it, and the total says whether it was
scaled.

Where this machine recorded nothing, the estimate per case is the median wall time of earlier
results of the same workload, method, device, workers, profile and epochs in the ``--out``
file; cases with no such history get a guess (:func:`guess_s`), and the total says how many
estimates were guesses.

At ``tiny`` the guess is declared by the case's method and workload: the method's start-up
(``Method.startup_guess_s``) plus epochs x the workload's epoch (``Workload.tiny_epoch_guess_s``),
the epoch stretched when the case uses fewer than 2 cores (in time-to-target mode, the epochs
to the target that serial's measured seeds took, or a statistical method's hold:
:func:`guess_epochs`); one that declares none gets
:data:`FALLBACK_STARTUP_S` / :data:`FALLBACK_TINY_EPOCH_S`, named on its line. The declared
figures are rounded from the fastest ``tiny`` result of each case recorded on a 2-core CPU,
loaded records scaled towards a quiet machine; the records they come from, with their dates
and loads, are in docs/measurements.md ("Where the dry-run guesses come from"). The
planner (:mod:`parabench.sweep.plan`) ranks workloads by the same guess to pick the cheapest. Other
profiles keep a flat per-profile guess (:data:`GUESS_S`).
"""

from __future__ import annotations

import os
import statistics
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from parabench.case.isolate import forks
from parabench.case.result import Result
from parabench.config import RunConfig, available_cores
from parabench.identity import CaseId, is_baseline
from parabench.registry import methods, workloads
from parabench.sweep.costmodel import (
    CASE_OVERHEAD_S,
    SWEEP_OVERHEAD_S,
    CostModel,
    Plan,
    fallback_counts,
)
from parabench.sweep.costref import reference_rows
from parabench.sweep.costs import cost_row, merged, read_costs, this_machine

#: seconds per case when nothing similar was measured before (2-core CPU, 3 epochs)
GUESS_S = {"tiny": 20.0, "quick": 120.0, "full": 1800.0}
#: the guesses of a method / workload that declares none (Method.startup_guess_s,
#: Workload.tiny_epoch_guess_s): used, and named on the case's line, never silently
FALLBACK_STARTUP_S = 8.0
FALLBACK_TINY_EPOCH_S = 5.0
#: the cores the declared guesses were measured on
TABLE_CORES = 2


def declared_parts(config: RunConfig) -> tuple[float, float]:
    """(start-up, seconds per epoch) of a ``tiny`` case's guess (:func:`guess_s`), the epoch
    stretched when the case uses fewer than :data:`TABLE_CORES` cores."""
    start, epoch_s = _declared(config)
    cores = min(TABLE_CORES, config.workers * config.threads)
    epoch = (FALLBACK_TINY_EPOCH_S if epoch_s is None else epoch_s) * TABLE_CORES / max(cores, 1)
    return (FALLBACK_STARTUP_S if start is None else start), epoch


def declared_for(plan: Plan) -> tuple[float, float] | None:
    """:func:`declared_parts` of a cost model's planned case (``tiny`` only: other profiles
    declare none; None for a method or workload no longer registered)."""
    if plan.profile != "tiny":
        return None
    try:
        return declared_parts(RunConfig(workload=plan.workload, method=plan.method,
                                        workers=plan.workers, threads_per_worker=plan.threads,
                                        profile=plan.profile))
    except Exception:  # noqa: BLE001 - a row of a method or workload not registered here
        return None


def _declared(config: RunConfig) -> tuple[float | None, float | None]:
    """(the method's start-up guess, the workload's tiny epoch guess), None where undeclared."""
    method = methods.get(config.method) if config.method in methods else None
    workload = workloads.get(config.workload) if config.workload in workloads else None
    return (getattr(method, "startup_guess_s", None),
            getattr(workload, "tiny_epoch_guess_s", None))


def guess_s(config: RunConfig) -> float:
    """A case's guessed wall time in seconds, start-up included (see the module docstring)."""
    if config.profile != "tiny":
        return GUESS_S.get(config.profile, 120.0) * max(config.epochs, 1) / 3
    start, epoch = declared_parts(config)
    return start + guess_epochs(config) * epoch


def guess_epochs(config: RunConfig) -> float:
    """The epochs a case is guessed to train: ``epochs``, or in time-to-target mode the
    statistical hold's budget (:func:`parabench.case.stopping.hold_epochs`), else the epochs
    serial's measured seeds took to the target (at most ``epochs``)."""
    from parabench.case.stopping import hold_epochs
    from parabench.workloads.quality_targets import epochs_to_target

    if config.target_quality is None or config.workload not in workloads:
        return config.epochs
    workload = workloads.get(config.workload)
    if (held := hold_epochs(workload, config)) is not None:
        return held
    reach = epochs_to_target(config.workload, config.profile, config.target_quality,
                             workload.quality.higher_is_better)
    return config.epochs if reach is None else min(config.epochs, reach)


def undeclared(config: RunConfig) -> str | None:
    """Which fallback :func:`guess_s` used for ``config`` (None: every guess was declared)."""
    if config.profile != "tiny":
        return None
    start, epoch_s = _declared(config)
    missing = [f"{config.method} declares no startup_guess_s: {FALLBACK_STARTUP_S:g} s assumed"
               ] if start is None else []
    if epoch_s is None:
        missing.append(f"{config.workload} declares no tiny_epoch_guess_s: "
                       f"{FALLBACK_TINY_EPOCH_S:g} s assumed")
    return "; ".join(missing) or None


def _clock(seconds: float) -> str:
    m, s = divmod(int(seconds), 60)
    h, m = divmod(m, 60)
    return f"{h}h{m:02d}m" if h else f"{m}m{s:02d}s"


def planned(config: RunConfig, cores: int | None = None) -> Plan:
    """``config`` as the cost model plans it (:class:`parabench.sweep.costmodel.Plan`): the
    rules of its counts (:func:`parabench.case.stopping.mid_epoch_from`, ``hold_epochs``),
    the declared guesses, and the epochs to its target and evaluations per epoch to assume
    where no recorded run tells (:func:`~parabench.sweep.costmodel.fallback_counts`)."""
    from parabench.case.stopping import EVAL_ALL_PARTS, hold_epochs, mid_epoch_from
    from parabench.identity import math_options

    workload = workloads.get(config.workload) if config.workload in workloads else None
    mid, hold, crossing = 0, None, False
    if config.target_quality is not None and workload is not None:
        mid, hold = mid_epoch_from(workload, config), hold_epochs(workload, config)
        crossing = (not is_baseline(config.method) and not os.environ.get(EVAL_ALL_PARTS)
                    and methods.get(config.method).grading(workload, config).kind == "exact")
    reach, per_epoch = fallback_counts(config.workload, config.method, config.workers,
                                       config.profile, config.target_quality, config.epochs)
    declared = (declared_parts(config) if config.profile == "tiny"
                else (0.0, GUESS_S.get(config.profile, 120.0) / 3))
    return Plan(workload=config.workload, method=config.method, device=config.device,
                workers=config.workers, threads=config.threads, profile=config.profile,
                epochs=config.epochs, target=config.target_quality, seed=config.seed,
                batch=config.batch_size,
                math=tuple(sorted(k for k in config.options if k in math_options())),
                mid_from=mid, hold=hold, crossing=crossing, cores=cores or available_cores(),
                declared=declared,
                reach_guess=reach, per_epoch_guess=per_epoch)


#: how a case's line names its components
_SHOWN = {"fixed": "start-up", "train": "epochs", "evaluate": "evaluations",
          "windows": "windows"}


def describe_plan(cases: Sequence, previous: Sequence[Result], resume: bool = False, *,
                  history: Sequence[dict] | None = None, machine: str | None = None,
                  reference: Sequence[dict] | None = None) -> str:
    """The dry run's text: a line per planned case with its estimate, and the total.

    With recorded cases of this machine (``history``, default the cost history
    :func:`parabench.sweep.costs.read_costs`, and the ok results in ``previous``, the
    ``--out`` file), estimates come from :class:`~parabench.sweep.costmodel.CostModel` and the
    total says its leave-one-out error; without, from earlier results of the same cases in
    ``previous``, else the declared guesses (marked ``?``). ``machine``: this machine's
    :func:`~parabench.sweep.costs.machine_key` (found when needed). ``reference``: the
    reference table's rows (default the shipped one,
    :func:`parabench.sweep.costref.reference_rows`), read for what this machine has not
    recorded (marked ``*``)."""
    estimator = _estimator(previous, history, machine, reference)
    done = {r.case_key() for r in previous if r.status == "ok"} if resume else set()
    lines, total, marks, runs = [], 0.0, [], []
    for case in cases:
        if (line := _not_run(case, done)) is not None:
            lines.append(line)
            continue
        seconds, how, mark = estimator.estimate(case.config)
        total = total + seconds
        marks.append(mark)
        runs.append(case.config)
        lines.append(f"  run   {case.config.label()}  {how}")
    total += estimator.overhead(runs)
    skipped = sum(1 for c in cases if c.skip_reason is not None)
    note = estimator.note(len(runs), marks.count("?"), marks.count("*")) if runs else ""
    lines.append(f"\n{len(cases)} case(s) planned: {len(runs)} to run, {skipped} skipped; "
                 f"estimated {_clock(total)}{note}. Nothing was run.")
    return "\n".join(["Planned cases:", *lines])


def estimated_s(cases: Sequence, previous: Sequence[Result] = ()) -> tuple[float, bool]:
    """(seconds, partly guessed) of the cases that would run, as :func:`describe_plan`
    totals them (the machine's cost model where it has recorded cases; partly guessed: a
    part of some case is a declared guess or from the reference table)."""
    estimator = _estimator(previous, None, None, None)
    configs = [c.config for c in cases if c.skip_reason is None]
    runs = [estimator.estimate(c) for c in configs]
    return (sum(r[0] for r in runs) + estimator.overhead(configs),
            any(r[2] for r in runs))


def _estimator(previous: Sequence[Result], history: Sequence[dict] | None,
               machine: str | None, reference: Sequence[dict] | None
               ) -> _Modelled | _Earlier:
    """The cost model fitted to this machine's recorded cases and the reference table,
    else earlier results."""
    rows = merged(list(read_costs()) if history is None else history,
                  (row for r in previous if (row := cost_row(r)) is not None))
    table = reference_rows() if reference is None else reference
    model = None
    if rows or table:
        model = CostModel.fit(rows, machine or this_machine(), declared=declared_for,
                              reference=table)
    usable_model = model is not None and (model.rows or model.reference is not None)
    return _Modelled(model) if usable_model else _Earlier.of(previous)


def _not_run(case: Any, done: set) -> str | None:
    """The line of a case the sweep will not run (skipped, or done under --resume)."""
    c = case.config
    if case.skip_reason is not None:
        return f"  skip  {c.label()}: {case.skip_reason.splitlines()[0]}"
    if c.key() in done:
        return f"  done  {c.label()} (recorded ok; --resume keeps it)"
    return None


@dataclass
class _Modelled:
    """Estimates from the cost model fitted to this machine's recorded cases."""

    model: CostModel

    def estimate(self, c: RunConfig) -> tuple[float, str, str]:
        """(seconds, the case's text, its mark: ``?`` a declared guess in it, ``*`` a part
        from the reference table, else empty)."""
        est = self.model.estimate(planned(c))
        what = (f"model: {len(self.model.rows)} case(s) of this machine"
                + (f", {est.same} of this case" if est.same else ""))
        if est.referenced:
            what += "; reference table: " + ", ".join(_SHOWN[g] for g in est.referenced)
        if est.guessed:
            what += "; guessed: " + ", ".join(_SHOWN[g] for g in est.guessed)
            if fallback := undeclared(c):
                what += f"; {fallback}"
        mark = "?" if est.guessed else "*" if est.referenced else ""
        return est.seconds, f"~{_clock(est.seconds)}{mark} ({what})", mark

    def overhead(self, runs: Sequence[RunConfig]) -> float:
        """The sweep's own seconds beyond its cases: once, per case, and the pre-started
        interpreters' imports once where a case forks from one."""
        if not runs:
            return 0.0
        forked = any(forks(c.workload, c.method) for c in runs)
        return (SWEEP_OVERHEAD_S + CASE_OVERHEAD_S * len(runs)
                + (self.model.prestart_s if forked else 0.0))

    def note(self, runs: int, guessed: int, referenced: int = 0) -> str:
        err, n = self.model.error(), len(self.model.rows)
        spread = (f" ± {err.median * 100:.0f} % (leave-one-out over {err.n} recorded cases of "
                  "this machine)" if err is not None else
                  f" ± ? ({n} recorded case{'' if n == 1 else 's'} of this machine: too few to "
                  "measure the error)")
        if referenced and (ref := self.model.reference) is not None:
            scaled = (f"scaled by this machine's newest of {ref.matched} recorded case(s) "
                      "it also holds"
                      if ref.matched else "not scaled: this machine has recorded none of its "
                      "cases, so they are that machine's times")
            spread += (f"; {referenced} partly from the reference table (marked *: "
                       f"{', '.join(ref.machines)}, {ref.recorded}; {scaled}), which that "
                       "error does not cover")
        return spread + (f"; {guessed} partly guessed (marked ?), which that error does not "
                         "cover" if guessed else "")


@dataclass
class _Earlier:
    """Where this machine recorded nothing: the median wall time of earlier results of the
    same case in ``--out``, else the declared guesses."""

    history: dict[tuple, list[float]]

    @classmethod
    def of(cls, previous: Sequence[Result]) -> _Earlier:
        history: dict[tuple, list[float]] = defaultdict(list)
        for r in previous:
            if r.status == "ok" and r.wall_s:
                history[CaseId.recorded(r).history].append(r.wall_s)
        return cls(history)

    def estimate(self, c: RunConfig) -> tuple[float, str, str]:
        if past := self.history.get(c.key().history):
            est = statistics.median(past)
            return est, f"~{_clock(est)}", ""
        est, fallback = guess_s(c), undeclared(c)
        return est, f"~{_clock(est)}?" + (f" ({fallback})" if fallback else ""), "?"

    def overhead(self, runs: Sequence[RunConfig]) -> float:
        return 0.0

    def note(self, runs: int, guessed: int, referenced: int = 0) -> str:
        if guessed == runs:
            return "; guessed (no earlier results of these cases in --out)"
        if guessed:
            return (f"; {guessed} guessed (marked ?), the rest from earlier results of the "
                    "same cases")
        return "; from earlier results of the same cases"
