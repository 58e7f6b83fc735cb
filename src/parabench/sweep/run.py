"""Run a planned grid: each case isolated, results appended, progress shown.

Usage::

    grid = Grid(workloads=["mlp"], methods=["serial"], profile="tiny", repeats=3)
    results = run_grid(grid, out="results.jsonl", resume=True)

The cases come from :func:`parabench.sweep.plan.plan`. Each is either runnable or carries the
reason it is not (unsupported workload, missing engine or hardware, unfair thread budget); the
latter are recorded as ``skipped`` without starting anything. ``resume`` skips cases whose
identity is already recorded ``ok`` in ``out`` and returns those recorded results in their place.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

from parabench.case.execute import skipped
from parabench.case.isolate import run_isolated
from parabench.case.result import Result, append_result, read_results
from parabench.case.tempdirs import runner_tempdir
from parabench.sweep.compare import is_baseline
from parabench.sweep.parity import assess
from parabench.sweep.plan import Case, Grid, plan
from parabench.sweep.progress import Progress

__all__ = ["Case", "Grid", "plan", "run_grid"]  # the planner's names, where callers knew them


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
    baselines = [r for r in previous if is_baseline(r.method)]
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
                if is_baseline(result.method):
                    baselines.insert(0, result)  # the newest baseline wins
            results.append(result)
            progress.case_done(label, result)
            if on_result is not None:  # e.g. TensorBoard event files, written as cases end
                on_result(result)
    progress.finish()
    return results

