"""Where a sweep's cases run: one interface, the local processes by default, SLURM for a cluster.

Usage::

    from parabench.sweep.executor import LocalExecutor
    from parabench.sweep.run import run_grid
    run_grid(grid, out="results.jsonl", executor=LocalExecutor())     # what `parabench run` does

An executor takes the sweep's runnable cases and yields ``(case, result)`` as each finishes:
:meth:`Executor.gather`. The runner (:func:`parabench.sweep.run.run_grid`) grades and appends
each result; an executor only runs cases. ``ordered`` says whether results come in the order of
the cases given (the local executor: one case after another) or as they finish (SLURM: many jobs
at once); for the latter the runner holds a result back until the baseline cases planned before
it are recorded, so parity and ratios are judged exactly as in a local run.

The local executor runs each case in its own process group on this machine
(:func:`parabench.case.isolate.run_isolated`). The SLURM executor
(:class:`parabench.sweep.slurm.SlurmExecutor`) submits each case as a job through submitit. A
third (Dask, Ray) implements :class:`Executor` and is passed to ``run_grid``.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from pathlib import Path
from typing import Protocol

from parabench.case.isolate import prepare, run_isolated
from parabench.case.result import Result
from parabench.config import RunConfig
from parabench.core.prestart import prestarted
from parabench.sweep.grid import Case
from parabench.sweep.progress import Progress

#: what the runner may change in a case's config just before it starts
Hint = Callable[[RunConfig], RunConfig]


class Executor(Protocol):
    """Runs a sweep's cases and yields each one's result as it finishes."""

    name: str
    ordered: bool

    def gather(self, cases: Sequence[Case], *, workdir: Path, progress: Progress,
               hint: Hint | None = None) -> Generator[tuple[Case, Result], None, None]:
        """Run ``cases`` (all runnable, none recorded yet); yield each with its raw result
        (not yet graded), saying on ``progress`` what runs. Closing the iterator early
        (Ctrl-C, SIGTERM) stops what is running. ``hint``, where the executor starts a case
        after the results before it were recorded (``ordered``), is applied to its config
        just before it starts (:func:`parabench.sweep.run.crossing_hint`)."""
        ...


class LocalExecutor:
    """Each case on this machine, one after another, in its own process group."""

    name = "local"
    ordered = True

    def gather(self, cases: Sequence[Case], *, workdir: Path, progress: Progress,
               hint: Hint | None = None) -> Generator[tuple[Case, Result], None, None]:
        # cases forked from interpreters that imported torch once (core.prestart, opt-in),
        # ended with the sweep
        with prestarted():
            prepare([c.config for c in cases])
            for case in cases:
                label = case.config.label()
                progress.show(label)
                config = hint(case.config) if hint is not None else case.config
                yield case, run_isolated(config, workdir=workdir,
                                         on_tick=lambda line, lb=label: progress.show(lb, line))
