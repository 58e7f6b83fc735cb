"""``parabench run --dry-run``: the planned cases and an estimated time, before anything runs.

Usage::

    print(describe_plan(plan(grid), previous=list(read_results(out)), resume=False))

The estimate per case is the median wall time of earlier results of the same workload,
method, device, workers, profile and epochs in the ``--out`` file; cases with no such history
get a guess (:func:`guess_s`), and the total says how many estimates were guesses.

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

import statistics
from collections import defaultdict
from collections.abc import Sequence

from parabench.case.result import Result
from parabench.config import RunConfig
from parabench.identity import CaseId
from parabench.registry import methods, workloads

#: seconds per case when nothing similar was measured before (2-core CPU, 3 epochs)
GUESS_S = {"tiny": 20.0, "quick": 120.0, "full": 1800.0}
#: the guesses of a method / workload that declares none (Method.startup_guess_s,
#: Workload.tiny_epoch_guess_s): used, and named on the case's line, never silently
FALLBACK_STARTUP_S = 8.0
FALLBACK_TINY_EPOCH_S = 5.0
#: the cores the declared guesses were measured on
TABLE_CORES = 2


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
    start, epoch_s = _declared(config)
    cores = min(TABLE_CORES, config.workers * config.threads)
    epoch = (FALLBACK_TINY_EPOCH_S if epoch_s is None else epoch_s) * TABLE_CORES / max(cores, 1)
    return (FALLBACK_STARTUP_S if start is None else start) + guess_epochs(config) * epoch


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


def describe_plan(cases: Sequence, previous: Sequence[Result], resume: bool = False) -> str:
    history: dict[tuple, list[float]] = defaultdict(list)
    for r in previous:
        if r.status == "ok" and r.wall_s:
            history[CaseId.recorded(r).history].append(r.wall_s)
    done = {r.case_key() for r in previous if r.status == "ok"} if resume else set()
    lines, total, guessed, runs = [], 0.0, 0, 0
    for case in cases:
        c = case.config
        if case.skip_reason is not None:
            lines.append(f"  skip  {c.label()}: {case.skip_reason.splitlines()[0]}")
            continue
        if c.key() in done:
            lines.append(f"  done  {c.label()} (recorded ok; --resume keeps it)")
            continue
        past = history.get(c.key().history)
        if past:
            est, how = statistics.median(past), f"~{_clock(statistics.median(past))}"
        else:
            est, fallback = guess_s(c), undeclared(c)
            how, guessed = f"~{_clock(est)}?", guessed + 1
            how += f" ({fallback})" if fallback else ""
        total += est
        runs += 1
        lines.append(f"  run   {c.label()}  {how}")
    skipped = sum(1 for c in cases if c.skip_reason is not None)
    if guessed == runs:
        note = "; guessed (no earlier results of these cases in --out)"
    elif guessed:
        note = (f"; {guessed} guessed (marked ?), the rest from earlier "
                "results of the same cases")
    else:
        note = "; from earlier results of the same cases"
    lines.append(f"\n{len(cases)} case(s) planned: {runs} to run, {skipped} skipped; "
                 f"estimated {_clock(total)}{note if runs else ''}. Nothing was run.")
    return "\n".join(["Planned cases:", *lines])
