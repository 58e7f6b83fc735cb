"""``parabench run --dry-run``: the planned cases and an estimated time, before anything runs.

Usage::

    print(describe_plan(plan(grid), previous=list(read_results(out)), resume=False))

The estimate per case is the median wall time of earlier results of the same workload,
method, device, workers, profile and epochs in the ``--out`` file; cases with no such history
get a rough per-profile guess, and the total says how many estimates were guesses.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Sequence

from parabench.case.result import Result

#: seconds per case when nothing similar was measured before (2-core CPU, 3 epochs)
GUESS_S = {"tiny": 20.0, "quick": 120.0, "full": 1800.0}


def _key(workload: str, method: str, device: str, workers: int, profile: str,
         epochs: int) -> tuple:
    return (workload, method, device, workers, profile, epochs)


def _clock(seconds: float) -> str:
    m, s = divmod(int(seconds), 60)
    h, m = divmod(m, 60)
    return f"{h}h{m:02d}m" if h else f"{m}m{s:02d}s"


def describe_plan(cases: Sequence, previous: Sequence[Result], resume: bool = False) -> str:
    history: dict[tuple, list[float]] = defaultdict(list)
    for r in previous:
        if r.status == "ok" and r.wall_s:
            history[_key(r.workload, r.method, r.device, r.workers, r.profile,
                         r.epochs)].append(r.wall_s)
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
        past = history.get(_key(c.workload, c.method, c.device, c.workers, c.profile,
                                c.epochs))
        if past:
            est, how = statistics.median(past), f"~{_clock(statistics.median(past))}"
        else:
            est = GUESS_S.get(c.profile, 120.0) * max(c.epochs, 1) / 3
            how, guessed = f"~{_clock(est)}?", guessed + 1
        total += est
        runs += 1
        lines.append(f"  run   {c.label()}  {how}")
    skipped = sum(1 for c in cases if c.skip_reason is not None)
    if guessed == runs:
        note = "; guessed from the profile (no earlier results of these cases in --out)"
    elif guessed:
        note = (f"; {guessed} guessed from the profile (marked ?), the rest from earlier "
                "results of the same cases")
    else:
        note = "; from earlier results of the same cases"
    lines.append(f"\n{len(cases)} case(s) planned: {runs} to run, {skipped} skipped; "
                 f"estimated {_clock(total)}{note if runs else ''}. Nothing was run.")
    return "\n".join(["Planned cases:", *lines])
