"""``parabench run --dry-run``: the planned cases and an estimated time, before anything runs.

Usage::

    print(describe_plan(plan(grid), previous=list(read_results(out)), resume=False))

The estimate per case is the median wall time of earlier results of the same workload,
method, device, workers, profile and epochs in the ``--out`` file; cases with no such history
get a guess (:func:`guess_s`), and the total says how many estimates were guesses.

At ``tiny`` the guess is declared per case: the method's start-up (:data:`START_S`) plus
epochs x the workload's epoch (:data:`TINY_EPOCH_S`), the epoch stretched when the case uses
fewer than 2 cores. Both tables are rounded from the fastest ``tiny`` result of each case
recorded on a 2-core CPU, loaded records scaled towards a quiet machine; the records they
come from, with their dates and loads, are in docs/measurements.md ("Where the dry-run
guesses come from"). The
planner (:mod:`parabench.sweep.plan`) ranks workloads by the same guess to pick the cheapest. Other
profiles keep a flat per-profile guess (:data:`GUESS_S`).
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Sequence

from parabench.case.result import Result
from parabench.config import RunConfig

#: seconds per case when nothing similar was measured before (2-core CPU, 3 epochs)
GUESS_S = {"tiny": 20.0, "quick": 120.0, "full": 1800.0}
#: seconds per tiny epoch (a fit, for estimators) on 2 cores; unlisted workloads: 5
TINY_EPOCH_S = {"mlp": 0.5, "random_forest": 0.5, "nbow": 1.0, "cnn": 2.0,
                "conv_autoencoder": 8.0, "seq2seq": 5.0, "densenet121": 4.0, "vgg11": 2.5}
#: seconds a method takes to start a tiny case (imports, processes, clusters, JIT) and, for
#: the forest peers, to fit beyond sklearn's; unlisted: 10
START_S = {"serial": 5.0, "model_parallel": 5.0, "threads": 2.0, "processes": 6.0,
           "xgboost": 4.0, "lightgbm": 10.0, "numba": 8.0, "torch": 8.0, "threads+torch": 10.0,
           "ddp": 7.0, "fsdp": 9.0, "fedavg": 8.0, "pipeline": 7.0, "hybrid": 8.0,
           "mpi": 12.0, "dask": 12.0, "dask+threads": 12.0, "dask+threads+torch": 14.0,
           "torch+dask": 20.0, "cuml": 10.0, "spark": 90.0, "tf": 20.0, "tf_serial": 25.0,
           "tf_multiworker": 50.0, "tf_mirrored": 25.0}
#: the cores the tables were measured on
TABLE_CORES = 2


def guess_s(config: RunConfig) -> float:
    """A case's guessed wall time in seconds, start-up included (see the module docstring)."""
    if config.profile != "tiny":
        return GUESS_S.get(config.profile, 120.0) * max(config.epochs, 1) / 3
    cores = min(TABLE_CORES, config.workers * config.threads)
    epoch = TINY_EPOCH_S.get(config.workload, 5.0) * TABLE_CORES / max(cores, 1)
    return START_S.get(config.method, 8.0) + config.epochs * epoch


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
            est = guess_s(c)
            how, guessed = f"~{_clock(est)}?", guessed + 1
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
