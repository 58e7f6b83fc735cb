"""The dry run's cost model: a planned case's wall time from what this machine recorded.

Usage::

    from parabench.sweep.costs import cost_row
    rows = [row for r in results if (row := cost_row(r)) is not None]
    model = CostModel.fit(rows, machine="Intel(R) Xeon(R) | 2 cores | no gpu")
    estimate = model.estimate(Plan(workload="mlp", method="serial", profile="tiny", epochs=3))
    estimate.seconds, estimate.parts, estimate.levels   # how much, where each part came from
    error = model.error()        # leave-one-out over the rows: .median, .p90, .n (or None)

A case's wall time (``Result.wall_parts``) is four costs, each fitted as the median per unit
over the history rows of this machine (:mod:`parabench.sweep.costs`; rows of another CPU,
core count or GPU set are left out), from the most specific key that has rows to coarser
ones (:data:`LEVELS`):

- ``fixed``, once per case (launch, start, data, model, bookkeeping, close, peak, exit: all but
  the three below): by the case (workload, method, workers, threads, profile, device), then the
  method at its workers and device, then the method; else the method's declared start-up;
- ``train`` per epoch trained: by the case, then the workload at its profile and device
  scaled by the cores used (workers x threads, at most the machine's); else the workload's
  declared tiny epoch (:func:`parabench.sweep.dryrun.guess_s`'s figures);
- ``evaluate`` per evaluation: by the workload, profile, device, workers and threads, then
  the workload at its profile and device; else none (named as guessed);
- ``windows`` per case: by the case, then the method's median on the device; else
  :data:`DEFAULT_WINDOWS_S`.

Where this machine has no row of the case itself, the shipped reference table's rows of it,
scaled to this machine (:mod:`parabench.sweep.costref`), come before the coarser keys; the
table's coarser keys come after this machine's, and before any declared guess.

The counts are planned as the case will run (:func:`parabench.sweep.dryrun.planned`,
:func:`counts`): its epochs, or in time-to-target mode the epochs to the target that recorded
runs of the same trajectory took (the same workload, profile, target, seed and batch; one
method and worker count for a statistical method, its baseline's trajectory for the others),
else :func:`parabench.sweep.dryrun.guess_epochs`'s; the evaluations from that: one at the end
of each epoch before :func:`parabench.case.stopping.mid_epoch_from`, the recorded evaluations
per epoch from there, a statistical method held past the target
(:func:`parabench.case.stopping.hold_epochs`) evaluated once more, at the hold's end; one in all
outside time-to-target mode.

A declared guess is scaled to this machine (:func:`machine_factors`): by the median ratio of
its recorded cases' costs to their own declared ones, so a first sweep of new methods on a
machine with history is guessed at this machine's pace, not the declarations'.

**Expected error** (:meth:`CostModel.error`): each of the newest :data:`LOO_ROWS` rows that
ran as today's cases will (started the same way, under today's window rule) is
predicted from all the others (its own values left out of every median, its counts planned
as it ran: its recorded mid-epoch start and hold), as the median and 90th percentile of
``|pred - actual| / actual``. The dry run adds the sweep's own overhead (and, where a case
forks from a pre-started interpreter, the servers' imports once: :attr:`CostModel.prestart_s`)
and gives the total the per-case median: exact if the
cases' errors all fell the same way, an over-statement if they were independent (they
partly cancel), and blind to what no recorded run shows (a busier machine, changed code).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from parabench.sweep.costplan import LEVELS, Plan, _Pool, counts, fallback_counts, pooled, row_plan
from parabench.sweep.costref import Reference
from parabench.sweep.costs import row_values

__all__ = ["COMPONENTS", "CostModel", "Error", "Estimate", "Plan", "counts",
           "fallback_counts", "machine_factors", "row_plan"]

#: seconds of a sweep beyond its cases' wall times: the CLI's start and planning and the table
#: at the end, and per case grading and writing its result (measured with
#: scripts/dryrun_accuracy.py on a 2-core CPU: 2.2-2.3 s beyond one mlp tiny case, 3.3 s
#: beyond the ten cases of the README's main job)
SWEEP_OVERHEAD_S = 2.0
CASE_OVERHEAD_S = 0.12
#: a case's windows when none of the method's were recorded under today's rule: the mean of
#: the rule replayed on 60 recorded series (scripts/window_coverage.py), 1.74 s
DEFAULT_WINDOWS_S = 1.7
#: the pre-started interpreters' imports (:mod:`parabench.core.prestart`), once a sweep (they
#: import side by side before the first case) when no recorded row says: 2.45 s for torch,
#: torch._dynamo and torch.distributed on 2 quiet cores (facts.prestart_import_s)
DEFAULT_PRESTART_S = 2.5
#: the error is measured over at most this many rows (the newest)
LOO_ROWS = 500
COMPONENTS = ("fixed", "train", "evaluate", "windows")


#: a case's declared (start-up, epoch) guesses, None where it has none (the dry run's
#: :func:`parabench.sweep.dryrun.declared_for`)
Declared = Callable[[Plan], "tuple[float, float] | None"]


def machine_factors(rows: Iterable[dict[str, Any]], declared: Declared) -> dict[str, float]:
    """What this machine's recorded cases took against the declared guesses for them, as the
    median ratio per figure: ``fixed`` (start-up and the rest of a case's fixed cost against
    the method's declared start-up), ``train`` (an epoch against the workload's declared tiny
    epoch), ``reach`` (epochs to the target against :func:`fallback_counts`'s guess). A case
    no recorded run resembles is guessed from the declarations times these: the declared
    figures were measured on another machine, and the epochs guess is a median seed's
    judged at epoch ends (it overstated cnn tiny's 1.75 epochs as 6.5)."""
    ratios: dict[str, list[float]] = {"fixed": [], "train": [], "reach": []}
    for row in rows:
        plan, values = row_plan(row), row_values(row)
        guesses = declared(plan)
        if guesses is not None:
            for name, guess in zip(("fixed", "train"), guesses, strict=True):
                if guess > 0 and name in values:
                    ratios[name].append(values[name] / guess)
        if "reach" in values and plan.reach_guess:
            ratios["reach"].append(values["reach"] / plan.reach_guess)
    return {name: statistics.median(r) for name, r in ratios.items() if r}


@dataclass(frozen=True, kw_only=True)
class Estimate:
    """A case's estimated wall time and how it was made."""

    seconds: float
    #: seconds per component (fixed, train, evaluate, windows)
    parts: dict[str, float]
    #: per component, the level its per-unit cost came from ("case", "method", "workload",
    #: ...) or "guess" (a declared figure)
    levels: dict[str, str]
    epochs: float
    evals: int
    #: recorded runs of this very case (workload, method, workers, threads, profile, device)
    same: int = 0

    @property
    def guessed(self) -> list[str]:
        """The components whose cost no recorded run gave."""
        return [c for c in COMPONENTS if self.levels.get(c) == "guess"]

    @property
    def referenced(self) -> list[str]:
        """The components whose cost came from the reference table, not this machine."""
        return [c for c in COMPONENTS if self.levels.get(c) == "reference"]


@dataclass(frozen=True)
class Error:
    """Leave-one-out relative error over ``n`` rows: median and 90th percentile of
    ``|pred - actual| / actual``; ``total``: of the rows' summed predictions against their
    summed wall times (signed)."""

    median: float
    p90: float
    n: int
    total: float


@dataclass(kw_only=True)
class CostModel:
    """Per-unit costs fitted to one machine's rows (:meth:`fit`)."""

    machine: str
    rows: list[dict[str, Any]] = field(default_factory=list)
    pools: dict[str, _Pool] = field(default_factory=dict)
    #: this machine against the declared guesses (:func:`machine_factors`): what a guessed
    #: start-up, epoch or epochs-to-target is multiplied by
    factors: dict[str, float] = field(default_factory=dict)
    #: a sweep's pre-started interpreters' imports, once if any case forks (the rows' median)
    prestart_s: float = DEFAULT_PRESTART_S
    #: the reference table scaled to this machine (:class:`parabench.sweep.costref.Reference`)
    reference: Reference | None = None

    @classmethod
    def fit(cls, rows: Iterable[dict[str, Any]], machine: str,
            declared: Declared | None = None,
            reference: Iterable[dict[str, Any]] = ()) -> CostModel:
        """The model of the ok rows of ``machine`` among ``rows``; with ``declared``, its
        guesses scaled to this machine (:func:`machine_factors`); with ``reference`` (the
        table's rows, :func:`parabench.sweep.costref.reference_rows`), that table before them."""
        mine = [r for r in rows if r.get("machine") == machine and r.get("status", "ok") == "ok"]
        model = cls(machine=machine, rows=mine, pools=pooled(mine))
        model.factors = machine_factors(mine, declared) if declared is not None else {}
        imports = [r["prestart_s"] for r in mine if r.get("prestart_s") is not None]
        model.prestart_s = statistics.median(imports) if imports else DEFAULT_PRESTART_S
        model.reference = Reference.fit(reference, mine)
        return model

    def _unit(self, name: str, plan: Plan, left_out: dict[str, float] | None
              ) -> tuple[float, str, int] | None:
        """(median per unit, its level, how many rows) of component ``name``."""
        own = (left_out or {}).get(name)
        ref = self.reference
        for i, (level, key, scaled) in enumerate(LEVELS[name]):
            without = None if own is None else (own * plan.used if scaled else own)
            if (found := self.pools[name].median(key(plan), without)) is not None:
                return (found[0] / plan.used if scaled else found[0]), level, found[1]
            if i == 0 and ref is not None and (table := ref.unit(name, plan, case_only=True)):
                return table[0], table[1], 0  # the table's same case before coarser keys
        if ref is not None and (table := ref.unit(name, plan)):
            return table[0], table[1], 0
        return None

    def estimate(self, plan: Plan, left_out: dict[str, float] | None = None) -> Estimate:
        """``plan``'s estimate; ``left_out``: one row's values (:func:`row_values`), left
        out of every median (the row being predicted)."""
        reach = self._unit("reach", plan, left_out)
        per_epoch = self._unit("per_epoch", plan, left_out)
        f = self.factors
        reach_guess = (plan.reach_guess * f.get("reach", 1.0) if plan.reach_guess is not None
                       else None)
        epochs, evals = counts(plan, reach_guess if reach is None else reach[0],
                               plan.per_epoch_guess if per_epoch is None
                               else round(per_epoch[0]))
        start, epoch = plan.declared
        guesses = {"fixed": start * f.get("fixed", 1.0), "train": epoch * f.get("train", 1.0),
                   "evaluate": 0.0, "windows": DEFAULT_WINDOWS_S}
        parts, levels, same = {}, {}, 0
        for name, n in (("fixed", 1.0), ("train", epochs), ("evaluate", evals),
                        ("windows", 1.0)):
            unit, levels[name], rows = (self._unit(name, plan, left_out)
                                        or (guesses[name], "guess", 0))
            parts[name] = unit * n
            if name == "fixed" and levels[name] == "case":
                same = rows
        if not evals:
            levels["evaluate"] = "none planned"
        return Estimate(seconds=sum(parts.values()), parts=parts, levels=levels,
                        epochs=epochs, evals=evals, same=same)

    def error(self) -> Error | None:
        """The leave-one-out error (see the module doc); None under 2 rows."""
        # rows that ran as today's cases will (started the same way, today's window rule):
        # an older row's start-up or windows are not what today's estimate is for
        today = [r for r in self.rows if {"fixed", "windows"} <= row_values(r).keys()]
        rows = sorted(today, key=lambda r: str(r.get("t", "")))[-LOO_ROWS:]
        if len(rows) < 2:
            return None
        rel, pred_sum, wall_sum = [], 0.0, 0.0
        for row in rows:
            predicted = self.estimate(row_plan(row), left_out=row_values(row)).seconds
            rel.append(abs(predicted - row["wall_s"]) / row["wall_s"])
            pred_sum, wall_sum = pred_sum + predicted, wall_sum + row["wall_s"]
        cut = statistics.quantiles(rel, n=10, method="inclusive")[-1] if len(rel) > 1 else rel[0]
        return Error(median=statistics.median(rel), p90=cut, n=len(rel),
                     total=(pred_sum - wall_sum) / wall_sum)
