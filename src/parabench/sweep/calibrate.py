"""Measure serial over seeds for time-to-quality mode: the target, the epoch budget, the power.

Usage::

    from parabench.sweep.calibrate import plateau_budget
    plateau_budget([[0.5, 0.8, 0.9, 0.9], [0.6, 0.82, 0.91, 0.9]], higher_is_better=True)
    # (3, "the first epoch whose median and 10th percentile over 2 seeds are within ...")
    # measure("tiny_logreg", "tiny", seeds=[0, 1, 2], max_epochs=8, partial=path) -> entry

``parabench calibrate`` (:mod:`parabench.cli.calibrate`) and ``scripts/quality_targets.py``
(the shipped table) both measure through :func:`measure`: ``serial`` (1 worker, 1 thread)
once per seed through the real harness (:func:`parabench.sweep.run.run_grid`, each case
isolated), in time-to-target mode against an unreachable target, so held-out quality is
evaluated during every epoch and each epoch's last evaluation is the seed's curve.

The epoch budget (``plateau=True``, calibrate's) is where serial's curves stop rising beyond
their seed noise, the slow seeds' too (:func:`plateau_budget`), within the maximum run
(``max_epochs``); the script keeps a fixed budget (``plateau=False``: every seed's last
epoch). An estimator, which refits the same model every epoch, gets one epoch (one fit). The
target is the 10th percentile (numpy's linear interpolation) over seeds of serial's quality
at the budget's last epoch (90th for a lower-is-better metric). The entry keeps the shipped
table's fields (target, percentile, values, curves, seeds, epochs, ...) and adds
``samples_to_target`` per seed (the samples trained up to the first evaluation at the
target, None where none within the budget), ``budget_rule`` (the rule and its figures, in
words), the code, data and device the entry is valid for and the machine.

Each finished seed is written at once to a partial file (``partial``), keyed by everything
that defines the measurement; a rerun with the same key skips those seeds, so an interrupted
calibration (Ctrl-C) resumes where it stopped.
"""

from __future__ import annotations

import math
import statistics
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from parabench.core.clock import Stopwatch
from parabench.registry import workloads
from parabench.stopping import ToTarget
from parabench.sweep.plan import Grid
from parabench.sweep.run import run_grid
from parabench.workloads.targetstore import (
    current_libraries,
    current_version,
    data_fingerprint,
    read_store,
    write_json,
)

#: the most epochs a calibration runs by default (``--max-epochs``)
MAX_EPOCHS = 8
PERCENTILE = 10
#: the training-seed offset of each seed's second run under ``--paired``
PAIR_OFFSET = 1000
#: a target no quality reaches, so every epoch is evaluated (a finite number, as configs want)
NEVER = 1e9


def plateau_budget(curves: list[list[float | None]], higher_is_better: bool = True
                   ) -> tuple[int, str]:
    """(budget, the rule in words): the first epoch at which both the median and the 10th
    percentile (:data:`PERCENTILE`, the target's own) over seeds of their curves are within
    one seed standard deviation (the sample std over seeds of the last epoch's qualities) of
    theirs at the last epoch all seeds ran, mirrored for a lower-is-better metric (the 90th
    percentile); with one seed, the last epoch (no noise to judge a plateau by).

    The percentile is there because the target is taken at it: where most seeds have
    levelled off but a slow few are still rising, the median alone would stop while the
    target's seeds climb on, and serial's spread at that budget (what the converged check
    judges against) would hold their climb."""
    last = min(len(c) for c in curves)
    if len(curves) < 2:
        return last, f"1 seed: no seed noise to judge a plateau by, so the maximum, {last}"
    rows = np.array([[math.nan if q is None else q for q in c[:last]] for c in curves])
    medians = np.nanmedian(rows, axis=0)
    pct = PERCENTILE if higher_is_better else 100 - PERCENTILE
    tails = np.nanpercentile(rows, pct, axis=0)
    finals = rows[:, -1][~np.isnan(rows[:, -1])]
    noise = float(np.std(finals, ddof=1)) if len(finals) > 1 else 0.0
    sign = 1.0 if higher_is_better else -1.0
    budget = next(e + 1 for e in range(last)
                  if (sign * (medians[-1] - medians[e]) <= noise
                      and sign * (tails[-1] - tails[e]) <= noise) or e == last - 1)
    rule = (f"the first epoch whose median and {pct}th percentile over {len(curves)} seeds "
            f"are within one seed std ({noise:.3g}) of theirs at epoch {last}, the maximum run")
    return budget, rule + (": still rising there, so the maximum" if budget == last
                           and last > 1 else "")


def partial_key(workload: str, profile: str, data_dir: str | None, device: str,
                max_epochs: int, train_offset: int = 0) -> str:
    """What a finished seed in the partial file was measured for."""
    return (f"{workload}|{profile}|{current_version(workload)}|{data_fingerprint(data_dir)}|"
            f"{device}|{max_epochs}" + (f"|train+{train_offset}" if train_offset else ""))


def _epochs(workload: str, max_epochs: int) -> int:
    """The epochs each seed trains: ``max_epochs``, or 1 for an estimator (a forest refits
    the same model every epoch: one fit)."""
    return max_epochs if workloads.get(workload).epochs_improve else 1


def _grid(workload: str, profile: str, seed: int, epochs: int, timeout_s: float,
          data_dir: str | None, device: str, train_seed: int | None = None) -> Grid:
    """One seed's serial case: 1 worker, 1 thread, no windows, against an unreachable
    target, so every part of every epoch is evaluated; ``train_seed`` None: the seed's own
    training (RunConfig.train_seed)."""
    higher = workloads.get(workload).quality.higher_is_better
    return Grid(workloads=[workload], methods=["serial"], workers=[1], devices=[device],
                threads_per_worker=1, profile=profile, seed=seed, train_seed=train_seed,
                timeout_s=timeout_s, steps=0, options={"data_dir": [data_dir]} if data_dir else {},
                stop=ToTarget(NEVER if higher else -NEVER, max_epochs=epochs))


def _serial(workload: str, profile: str, seed: int, epochs: int, timeout_s: float,
            data_dir: str | None, device: str, train_seed: int | None = None
            ) -> dict[str, Any]:
    """One seed's serial run (:func:`_grid`): its curve and evaluations."""
    with tempfile.TemporaryDirectory() as tmp:
        (result,) = run_grid(_grid(workload, profile, seed, epochs, timeout_s, data_dir,
                                   device, train_seed), out=Path(tmp) / "calibrate.jsonl")
    if result.status != "ok" or result.quality is None or result.quality.value is None:
        raise RuntimeError(f"{workload}/{profile} seed {seed}: {result.status} "
                           f"{result.reason or ''}")
    ttt = result.time_to_target
    evals = ([] if ttt is None else
             [[s, q] for s, q in zip(ttt.eval_samples, ttt.eval_quality, strict=False)])
    return {"final": float(result.quality.value), "curve": list(result.epoch_quality),
            "evals": evals, "samples_per_epoch": result.samples_per_epoch}


def measure(workload: str, profile: str, seeds: list[int], max_epochs: int = MAX_EPOCHS, *,
            timeout_s: float = 1800.0, data_dir: str | None = None, device: str = "cpu",
            plateau: bool = True, partial: Path | None = None, train_offset: int = 0,
            paired: bool = False, say: Callable[[str], None] = print,
            run_seed: Callable[..., dict[str, Any]] = _serial) -> dict[str, Any]:
    """The entry of ``workload`` at ``profile`` (see the module's docstring); the finished
    seeds kept in ``partial`` as each ends (a KeyboardInterrupt keeps them and says so).
    ``train_offset`` K > 0 trains seed s's data with training seed s + K (another sound run of
    the same data); the entry records it. ``paired`` runs every seed a second time with
    training seed s + :data:`PAIR_OFFSET` (twice the cost) and adds the ``paired`` block
    (:func:`paired_block`): the spread a verdict paired by seed judges against."""
    higher = workloads.get(workload).quality.higher_is_better
    epochs = _epochs(workload, max_epochs)
    offsets = [train_offset] + ([train_offset + PAIR_OFFSET] if paired else [])
    keys = {o: partial_key(workload, profile, data_dir, device, epochs, o) for o in offsets}
    kept = read_store(partial) if partial is not None else {}
    done = {o: {int(s): r for s, r in kept.get(keys[o], {}).items() if int(s) in seeds}
            for o in offsets}
    if any(done.values()):
        runs = sum(len(d) for d in done.values())
        say(f"  resuming: {runs} finished run(s) kept from {partial}")
    took: list[float] = []
    todo = [(s, o) for s in seeds for o in offsets if s not in done[o]]
    total = len(seeds) * len(offsets)
    try:
        for i, (seed, off) in enumerate(todo):
            watch = Stopwatch()
            done[off][seed] = run = run_seed(workload, profile, seed, epochs, timeout_s,
                                             data_dir, device, seed + off if off else None)
            took.append(watch.seconds())
            if partial is not None:
                everything = read_store(partial)
                everything.setdefault(keys[off], {})[str(seed)] = run
                write_json(partial, {"about": "parabench calibrate: finished seeds",
                                     "entries": everything})
            left = statistics.mean(took) * (len(todo) - i - 1)
            curve = " ".join(f"{q:.4g}" for q in run["curve"] if q is not None)
            which = f" train seed {seed + off}" if paired else ""
            say(f"  {workload} {profile} seed {seed}{which} "
                f"({sum(len(d) for d in done.values())}/{total}): "
                f"{run['final']:.6g} in {took[-1]:.0f}s (curve {curve}); ETA {left:.0f}s")
    except KeyboardInterrupt:
        where = f"kept in {partial}; rerun the same command to resume" if partial else "lost"
        say(f"interrupted: {sum(len(d) for d in done.values())} of {total} run(s) finished, "
            f"{where}")
        raise
    by_curve = plateau and epochs > 1
    entry = summarize([done[train_offset][s] for s in seeds], seeds, epochs, higher, plateau)
    entry.update(workload_version=current_version(workload),
                 libraries=current_libraries(workload), data=data_fingerprint(data_dir),
                 device=device)
    if train_offset:
        entry["train_seed_offset"] = train_offset
    if paired and len(seeds) > 1:
        entry["paired"] = paired_block(entry, [done[offsets[1]][s] for s in seeds],
                                       PAIR_OFFSET, by_curve)
    return entry


def summarize(runs: list[dict[str, Any]], seeds: list[int], epochs: int, higher: bool,
              plateau: bool) -> dict[str, Any]:
    """The entry's figures from the seeds' runs (:func:`_serial`'s records)."""
    curves = [r["curve"] for r in runs]
    if plateau and epochs > 1:
        budget, rule = plateau_budget(curves, higher)
    else:
        budget = epochs
        rule = f"fixed: {epochs} epoch(s), the last" + ("" if epochs > 1 else " (one fit)")
    finals = _values_at(runs, budget, plateau and epochs > 1)
    pct = PERCENTILE if higher else 100 - PERCENTILE
    target = float(np.percentile(finals, pct))
    reached_by = sum(1 for v in finals if (v >= target if higher else v <= target))
    return {"target": target, "percentile": pct, "percentile_method": "numpy linear (type 7)",
            "quality_at": "last epoch" if budget == epochs else f"epoch {budget} (the budget)",
            "higher_is_better": higher,
            "min": min(finals), "median": statistics.median(finals), "max": max(finals),
            "reached_by": reached_by, "values": finals,
            "curves": [c[:budget] for c in curves], "curves_run": curves, "seeds": seeds,
            "epochs": budget,
            "epochs_run": [len(c) for c in curves], "max_epochs": epochs, "budget_rule": rule,
            "samples_to_target": [_samples_to(r, target, higher, budget) for r in runs],
            "method": "serial w=1 t=1"}


def _values_at(runs: list[dict[str, Any]], budget: int, by_curve: bool) -> list[float]:
    """Each run's quality at the budget: its curve's epoch ``budget`` (``by_curve``: a budget
    found on the curves), else its final quality (a fixed budget, an estimator's one fit)."""
    return [float(r["curve"][budget - 1]) if by_curve else float(r["final"]) for r in runs]


def paired_block(entry: dict[str, Any], others: list[dict[str, Any]], offset: int,
                 by_curve: bool) -> dict[str, Any]:
    """The entry's ``paired`` block from each seed's second run (``others``, in the entry's
    seed order, trained with training seed s + ``offset``): their qualities at the entry's
    budget and ``sd``, the sample standard deviation of the differences to the entry's
    ``values`` (two sound runs of the same data; a verdict paired by seed judges one run's
    gap to serial's value at its seed against it:
    :func:`~parabench.workloads.quality_targets.entry_converged`)."""
    budget = int(entry["epochs"])
    values = _values_at(others, budget, by_curve)
    diffs = [a - b for a, b in zip(entry["values"], values, strict=True)]
    return {"train_seed_offset": offset, "epoch": budget, "pairs": len(diffs),
            "values": values, "sd": float(statistics.stdev(diffs)),
            "curves_run": [r["curve"] for r in others],
            "how": f"each seed's data trained again with training seed s + {offset}; the sd "
                   f"of the {len(diffs)} differences at epoch {budget}"}


def _samples_to(run: dict[str, Any], target: float, higher: bool, budget: int) -> int | None:
    """The samples trained up to the seed's first evaluation at ``target``, within the
    budget's epochs; None where it did not get there."""
    cap = (run.get("samples_per_epoch") or 0) * budget or math.inf
    return next((int(s) for s, q in run.get("evals") or [] if q is not None and s <= cap
                 and (q >= target if higher else q <= target)), None)


def power_lines(entry: dict[str, Any], source: str) -> list[str]:
    """What the entry's N seeds give a statistical verdict: the converged check's blind spot
    (as :func:`parabench.analysis.target_parity.converged_verdict` computes it; paired by seed
    too where the entry holds the paired spread) and the reaching verdict's power
    (:func:`~parabench.workloads.quality_targets.reach_power`)."""
    from parabench.analysis.parity_text import blind_text
    from parabench.analysis.target_parity import converged_bounds
    from parabench.workloads.quality_targets import entry_converged, entry_reach_power

    n, hib = len(entry["seeds"]), bool(entry["higher_is_better"])
    lines = []
    if (ref := entry_converged(entry, source)) is not None:
        loss = converged_bounds(ref, hib)[2]
        lines.append(f"power with {n} seeds: the converged check reads ok, blind "
                     f"<{blind_text(loss)} (a run losing {loss:.3g} after {ref.epochs} "
                     "epoch(s) fails 95 % of the time)")
        paired = entry_converged(entry, source, seed=entry["seeds"][0])
        if paired is not None and paired.paired:
            loss = converged_bounds(paired, hib)[2]
            lines.append(f"  paired by seed (a run at one of seeds {_span(entry['seeds'])}): "
                         f"blind <{blind_text(loss)}; a verdict uses the narrower of the two")
    else:
        lines.append(f"power with {n} seed(s): the converged check cannot state one (it needs "
                     "2 or more seeds for serial's spread)")
    if (reach := entry_reach_power(entry, source, entry["target"], hib)) is not None:
        lines.append(f"  reaching the target: {reach.text()}")
    lines.append("  more seeds (--seeds) narrow both" + (
        "" if "paired" in entry else "; --paired measures the paired spread (twice the cost)"))
    return lines


def _span(seeds: list[int]) -> str:
    """``0-9`` for consecutive seeds, else ``0, 3, 7``."""
    ordered = sorted(seeds)
    if ordered == list(range(ordered[0], ordered[-1] + 1)) and len(ordered) > 2:
        return f"{ordered[0]}-{ordered[-1]}"
    return ", ".join(map(str, ordered))


def planned_cases(workload: str, profile: str, seeds: list[int], max_epochs: int,
                  data_dir: str | None = None, device: str = "cpu",
                  timeout_s: float = 1800.0, paired: bool = False) -> list[Any]:
    """The serial cases a calibration runs (for the dry run's cost model); ``paired``: each
    seed twice."""
    from parabench.sweep.plan import plan

    epochs = _epochs(workload, max_epochs)
    trains = [None] + ([PAIR_OFFSET] if paired else [])
    return [case for seed in seeds for off in trains
            for case in plan(_grid(workload, profile, seed, epochs, timeout_s, data_dir, device,
                                   None if off is None else seed + off))]


def calibration_s(workload: str, profile: str, seeds: int = 3, max_epochs: int = MAX_EPOCHS,
                  data_dir: str | None = None, device: str = "cpu") -> tuple[float, bool]:
    """(seconds, partly guessed): a calibration's time as ``--dry-run`` estimates it (this
    machine's cost model, else the declared figures), for the hint of a run without an
    entry."""
    from parabench.sweep.dryrun import estimated_s

    return estimated_s(planned_cases(workload, profile, list(range(seeds)), max_epochs, data_dir,
                                device))
