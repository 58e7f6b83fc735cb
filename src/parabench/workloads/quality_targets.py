"""The measured default time-to-quality target of each workload and profile.

Usage::

    from parabench.workloads.quality_targets import quality_target, reach_power
    entry = quality_target("cnn", "tiny")   # TargetEntry, or None where nobody measured it
    entry.value, entry.source   # the target; "quality_targets.json: <command> (<date>), ..."
    power = reach_power("cnn", "tiny", entry.value)   # ReachPower, or None
    power.loss, power.sound, power.seeds   # the loss the reaching verdict flags 95 % of
    ref = converged_reference("cnn", "tiny")   # serial's quality after the budget, or None
    ref.median, ref.std, ref.seeds, ref.epochs

``parabench run --target-quality`` (no value) trains each case until serial's reliable
quality for its workload and profile: the 10th percentile over seeds (the 90th for a
lower-is-better metric) of serial's held-out quality after the last epoch of a stated epoch
budget (:mod:`parabench.case.stopping` reads it). The figures are measured, never guessed: they
live in ``quality_targets.json`` beside this module (shipped as package data), written by
``scripts/quality_targets.py``, which records for every entry the per-seed figures and
curves, the seeds, the epochs, the percentile and how it was computed, and the command and
date that produced it (the figures themselves: ``docs/measurements.md``). Before that table,
every reader here looks in the user's calibrated stores (:func:`find`:
:mod:`parabench.workloads.targetstore`, written by ``parabench calibrate``), whose entries
are for the current code, the data and the device; each ``source`` names where it read.

The same entries are time-to-target mode's quality reference for a statistical method
(:mod:`parabench.analysis.target_parity`). Such a case trains on past the target to the
entry's epoch budget, and its quality there is judged against serial's at that budget over
the table's seeds (:func:`converged_reference`: median and standard deviation): a run can
touch the target at one lucky evaluation of a noisy plateau, its converged quality cannot
hide a loss that way. Where the case could not train that long, the verdict is whether it
reached the target at all, its power from the curves: :func:`reach_power` takes each seed's
best quality over its curve (the best a run can show) and states the smallest loss L the
verdict misses at most 5 % of the time, on the model that a lossy method's curve is
serial's shifted by L: L = the 95th percentile of those bests minus the target (for a
lower-is-better metric, relative: target / 5th percentile - 1), and how many of serial's
seeds reached the target at all (a sound method's pass rate, as measured). A method whose
curve is noisier than serial's can beat this by luck; ``scripts/quality_gate_power.py``
measures the verdict's rates on really degraded training.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from parabench.workloads.spread import entries
from parabench.workloads.targetstore import ENV, lookup

TABLE = Path(__file__).with_name("quality_targets.json")
SCRIPT = "scripts/quality_targets.py"


@dataclass(frozen=True)
class TargetEntry:
    """One measured target: ``value``, and where it came from (``source``)."""

    value: float
    source: str
    epochs: int
    seeds: int


@cache
def table(path: Path = TABLE) -> dict[str, dict[str, dict[str, Any]]]:
    """workload -> profile -> entry (``target``, ``values``, ``curves``, ``seeds``,
    ``epochs``, ``percentile``, ``command``, ``date``, ...)."""
    return entries(path)


def find(workload: str, profile: str, data_dir: str | None = None,
         device: str | None = None) -> tuple[dict[str, Any] | None, str]:
    """(entry, where from) of ``workload`` at ``profile``: the first calibrated store that has a
    current one for this data and device (:func:`parabench.workloads.targetstore.lookup`:
    ``--targets FILE``, then the user store), else the shipped table (synthetic data only);
    (None, "") where none has it. Every reader below takes its entry from here."""
    found = lookup(workload, profile, data_dir, device)
    if found.entry is not None:
        return found.entry, found.source or ""
    shipped = table().get(workload, {}).get(profile) if data_dir is None else None
    return shipped, TABLE.name if shipped is not None else ""


def quality_target(workload: str, profile: str, data_dir: str | None = None,
                   device: str | None = None) -> TargetEntry | None:
    """The measured target of ``workload`` at ``profile``; None when nobody measured it."""
    entry, name = find(workload, profile, data_dir, device)
    if entry is None:
        return None
    seeds, epochs = len(entry["seeds"]), int(entry["epochs"])
    source = (f"{name}: p{entry['percentile']} of serial's quality after {epochs} "
              f"epoch(s) over {seeds} seeds; {entry['command']} ({entry['date']})")
    return TargetEntry(float(entry["target"]), source, epochs, seeds)


def calibrate_command(workload: str, profile: str, data_dir: str | None = None,
                      device: str | None = None, seeds: int = 3) -> str:
    """The ``parabench calibrate`` command that measures an entry for ``workload`` (into the
    ``--targets FILE`` store this run reads, where it names one)."""
    data = f" --data-dir {data_dir}" if data_dir else ""
    data += f" --device {device}" if device not in (None, "cpu") else ""
    store = f" --targets {os.environ[ENV]}" if os.environ.get(ENV) else ""
    return (f"parabench calibrate --workload {workload} --profile {profile}{data} "
            f"--seeds {seeds}{store}")


def missing_reason(workload: str, profile: str, data_dir: str | None = None,
                   device: str | None = None) -> str:
    """What a default target says when :func:`quality_target` has nothing."""
    stale = lookup(workload, profile, data_dir, device).stale
    return (f"no measured target for {workload} at {profile}"
            f"{' on ' + str(data_dir) if data_dir else ''}{'; ' + stale if stale else ''}; "
            f"`{calibrate_command(workload, profile, data_dir, device)}` measures one")


@dataclass(frozen=True)
class ReachPower:
    """The reaching verdict's power at one target: ``loss`` (absolute; relative for a
    lower-is-better metric) it flags in 95 % of runs, on ``seeds`` of serial's measured curves
    of ``epochs`` epochs, ``sound`` of which reached the target."""

    loss: float
    sound: int
    seeds: int
    epochs: int
    source: str = TABLE.name

    def text(self) -> str:
        return (f"a run losing {self.loss:.3g} of serial's best quality misses the target in "
                f"95 % of runs; {self.sound} of serial's {self.seeds} measured seeds reached "
                f"it within {self.epochs} epoch(s) ({self.source})")


def reach_power(workload: str, profile: str, target: float,
                higher_is_better: bool = True, data_dir: str | None = None,
                device: str | None = None) -> ReachPower | None:
    """The power of "reached ``target``" for ``workload`` at ``profile``, from serial's measured
    curves (see the module's docstring); None where nobody measured them."""
    return entry_reach_power(*find(workload, profile, data_dir, device), target,
                             higher_is_better)


def entry_reach_power(entry: dict[str, Any] | None, name: str, target: float,
                      higher_is_better: bool = True) -> ReachPower | None:
    """:func:`reach_power` of one entry (``name``: where it is from)."""
    curves = [[q for q in c if q is not None] for c in (entry or {}).get("curves") or []]
    bests = [max(c) if higher_is_better else min(c) for c in curves if c]
    if not bests:
        return None
    if higher_is_better:
        loss = float(np.percentile(bests, 95)) - target
        sound = sum(b >= target for b in bests)
    else:
        low = float(np.percentile(bests, 5))
        loss = target / low - 1 if low > 0 else float("inf")
        sound = sum(b <= target for b in bests)
    return ReachPower(max(loss, 0.0), sound, len(bests), int(entry["epochs"]), name)


def first_reach_epoch(workload: str, profile: str, target: float,
                      higher_is_better: bool = True, data_dir: str | None = None,
                      device: str | None = None) -> int | None:
    """The first epoch (1-based) at whose end any of serial's measured seeds had reached
    ``target`` (``quality_targets.json``'s curves of ``workload`` at ``profile``); None where
    nobody measured the curves or no seed reached it within them."""
    entry = find(workload, profile, data_dir, device)[0]
    return min((e for e in _reach_epochs(entry, target, higher_is_better)
                if e is not None), default=None)


def _reach_epochs(entry: dict[str, Any] | None, target: float,
                  higher_is_better: bool) -> list[int | None]:
    """Per measured seed of ``entry``: the first epoch (1-based) at whose end its quality
    reached ``target``, None where it never did; empty where unmeasured."""
    return [next((i for i, q in enumerate(curve, start=1) if q is not None
                  and (q >= target if higher_is_better else q <= target)), None)
            for curve in (entry or {}).get("curves") or [] if curve]


@dataclass(frozen=True)
class ConvergedReference:
    """Serial's quality after the table's ``epochs`` over ``seeds``: ``median`` and ``std``
    (the sample standard deviation), and where they come from (``source``).

    ``paired``: ``median`` is serial's quality at the case's own data seed, and ``std`` the
    standard deviation of the difference between two sound runs of that same data (training
    seeds s and s + K, the entry's ``paired`` block): the spread of one run's gap itself, with
    the data draw's share taken out."""

    median: float
    std: float
    seeds: int
    epochs: int
    source: str
    paired: bool = False


def converged_reference(workload: str, profile: str, data_dir: str | None = None,
                        device: str | None = None, seed: int | None = None
                        ) -> ConvergedReference | None:
    """Serial's converged quality of ``workload`` at ``profile`` (the table's per-seed
    ``values``): paired with ``seed`` where the entry measured the paired spread and that
    seed (:func:`entry_converged`); None where nobody measured it."""
    return entry_converged(*find(workload, profile, data_dir, device), seed=seed)


def entry_converged(entry: dict[str, Any] | None, name: str, seed: int | None = None
                    ) -> ConvergedReference | None:
    """:func:`converged_reference` of one entry (``name``: where it is from): the paired
    reference where ``seed`` is one of the entry's seeds and the entry holds a ``paired``
    block at its budget (``parabench calibrate --paired``), else the median and spread over
    the seeds."""
    values = [v for v in (entry or {}).get("values") or [] if v is not None]
    if len(values) < 2:
        return None
    pair = _pair_block(entry) or {}
    seeds = list(entry.get("seeds") or [])
    if (seed is not None and pair and seed in seeds
            and entry["values"][seeds.index(seed)] is not None):
        mine = float(entry["values"][seeds.index(seed)])
        source = (f"{name}: serial's quality at seed {seed} after {entry['epochs']} epoch(s), "
                  f"{mine:.4g} ({entry['command']}, {entry['date']}); the spread of two "
                  f"training seeds on the same data, sd {pair['sd']:.3g} over "
                  f"{pair['pairs']} seeds ({pair['how']})")
        return ConvergedReference(mine, float(pair["sd"]), int(pair["pairs"]),
                                  int(entry["epochs"]), source, paired=True)
    source = (f"{name}: serial after {entry['epochs']} epoch(s) over {len(values)} "
              f"seeds; {entry['command']} ({entry['date']})")
    return ConvergedReference(float(np.median(values)), float(np.std(values, ddof=1)),
                              len(values), int(entry["epochs"]), source)


def _pair_block(entry: dict[str, Any] | None) -> dict[str, Any] | None:
    """The entry's ``paired`` block where it holds a spread measured at the entry's budget."""
    pair = (entry or {}).get("paired") or {}
    if pair.get("sd") is None or int(pair.get("epoch", -1)) != int(entry["epochs"]):
        return None
    return pair


@dataclass(frozen=True)
class PairedSpread:
    """The sd of the difference between two sound trainings of the same data after
    ``epochs`` (an entry's ``paired`` block), over ``pairs`` seeds; ``source`` in words."""

    sd: float
    pairs: int
    epochs: int
    source: str


def paired_spread(workload: str, profile: str, epochs: int | None,
                  data_dir: str | None = None, device: str | None = None
                  ) -> PairedSpread | None:
    """The paired spread of ``workload`` at ``profile`` where the entry measured it at
    ``epochs`` (None: an estimator, whose every epoch is the same fit); None elsewhere. A
    statistical verdict against the sweep's own serial at the same seed (the same data) judges
    the gap within 3 x this spread (:func:`parabench.analysis.parity.assess`)."""
    entry, name = find(workload, profile, data_dir, device)
    pair = _pair_block(entry)
    if pair is None or (epochs is not None and epochs != int(pair["epoch"])):
        return None
    source = (f"{name}: two trainings of the same data after {pair['epoch']} epoch(s), sd "
              f"{pair['sd']:.3g} over {pair['pairs']} seeds ({pair['how']}; "
              f"{entry['command']}, {entry['date']})")
    return PairedSpread(float(pair["sd"]), int(pair["pairs"]), int(pair["epoch"]), source)


def epochs_to_target(workload: str, profile: str, target: float,
                     higher_is_better: bool = True, data_dir: str | None = None,
                     device: str | None = None) -> float | None:
    """The median over serial's measured seeds of the first epoch whose quality reached
    ``target`` (a seed that never did counts its epochs run): what a time-to-target case is
    guessed to train (:func:`parabench.sweep.dryrun.guess_s`); None where nobody measured."""
    entry = find(workload, profile, data_dir, device)[0]
    curves = [c for c in (entry or {}).get("curves") or [] if c]
    if not curves:
        return None
    firsts = _reach_epochs(entry, target, higher_is_better)
    return float(np.median([len(c) if e is None else e
                            for c, e in zip(curves, firsts, strict=True)]))
