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

import bisect
import math
import statistics
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from parabench.sweep.costs import row_values

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


@dataclass(frozen=True, kw_only=True)
class Plan:
    """What a case is planned to do: its identity and what decides its counts."""

    workload: str
    method: str
    device: str = "cpu"
    workers: int = 1
    threads: int = 1
    profile: str = "tiny"
    epochs: int = 3
    target: float | None = None
    seed: int = 0
    batch: Any = None
    math: tuple[str, ...] = ()
    #: epochs (0-based) before this one are evaluated at their ends only
    mid_from: int = 0
    #: a statistical method trains to this epoch past the target
    hold: int | None = None
    #: a method graded exactly stops at serial's crossing (``RunConfig.eval_from``)
    crossing: bool = False
    #: evaluations placed as today (:func:`counts`); False: a row recorded before
    sparse: bool = True
    cores: int | None = None
    #: the declared guesses' figures (start-up, per epoch), for the back-off's last step
    declared: tuple[float, float] = (8.0, 5.0)
    #: epochs to the target when no recorded run tells (None: the cap)
    reach_guess: float | None = None
    #: evaluations per epoch when no recorded run tells
    per_epoch_guess: int = 1

    @property
    def used(self) -> int:
        """Cores the case uses: workers x threads, at most the machine's."""
        return max(1, min(self.workers * self.threads, self.cores or self.workers * self.threads))

    @property
    def trajectory(self) -> tuple[Any, ...]:
        """What a run's epochs to the target are shared by (:func:`_trajectory`)."""
        return (self.workload, self.profile, _rounded(self.target), self.seed, str(self.batch),
                self.math, *_trajectory(self.method, self.workers))


def _rounded(x: float | None) -> float | None:
    return None if x is None else round(float(x), 6)


def _trajectory(method: str, workers: int) -> tuple[Any, ...]:
    """Methods that compute serial's mathematics share their baseline's epochs to a target;
    a statistical one has its own, per worker count."""
    from parabench.registry import methods

    if method not in methods:
        return (method, workers)
    m = methods.get(method)
    return (method, workers) if m.parity == "statistical" else (m.baseline_method,)


def _case(p: Plan) -> tuple:
    return (p.workload, p.method, p.workers, p.threads, p.profile, p.device)


#: per component, (level name, key, scaled by the cores used): most specific first
LEVELS: dict[str, tuple[tuple[str, Callable[[Plan], tuple], bool], ...]] = {
    "fixed": (("case", _case, False),
              ("method", lambda p: (p.method, p.workers, p.device), False),
              ("method", lambda p: (p.method,), False)),
    "train": (("case", _case, False),
              ("workload", lambda p: (p.workload, p.profile, p.device), True)),
    "evaluate": (("case", lambda p: (p.workload, p.profile, p.device, p.workers, p.threads),
                  False),
                 ("workload", lambda p: (p.workload, p.profile, p.device), False)),
    "windows": (("case", _case, False),
                ("method", lambda p: (p.method, p.device), False)),
    "reach": (("trajectory", lambda p: (p.device, *p.trajectory), False),
              ("trajectory", lambda p: p.trajectory, False),
              ("method", lambda p: (p.workload, p.profile, _rounded(p.target), p.method),
               False)),
    "per_epoch": (("case", lambda p: (p.workload, p.method, p.workers, p.profile, p.device),
                   False),
                  ("method", lambda p: (p.method, p.workers), False),
                  ("method", lambda p: (p.method,), False)),
}


def fallback_counts(workload: str, method: str, workers: int, profile: str,
                    target: float | None, epochs: int) -> tuple[float | None, int]:
    """(epochs to the target, evaluations per epoch) to assume where no recorded run tells:
    the median of serial's measured seeds (``quality_targets.json``, as
    :func:`parabench.sweep.dryrun.guess_epochs`; None: not reached) and the parts a torch
    session trains an epoch in (:data:`~parabench.case.stopping.EVALS_PER_EPOCH`; fedavg: a
    round per worker; TensorFlow's methods and the estimators: whole epochs)."""
    from parabench.case.stopping import EVALS_PER_EPOCH
    from parabench.registry import workloads
    from parabench.workloads.quality_targets import epochs_to_target

    if target is None or workload not in workloads:
        return None, 1
    w = workloads.get(workload)
    reach = epochs_to_target(workload, profile, target, w.quality.higher_is_better)
    parts = 1
    if w.family == "torch" and not method.startswith("tf_"):
        parts = workers if method == "fedavg" else EVALS_PER_EPOCH
    return (None if reach is None else min(float(epochs), reach)), parts


def row_plan(row: dict[str, Any]) -> Plan:
    """A history row's case as it was planned when it ran (its evaluations' rules as
    recorded: from which epoch between parts, held to which epoch)."""
    workload, method = row["workload"], row["method"]
    workers, profile = row.get("workers") or 1, row.get("profile", "")
    epochs = row.get("epochs") or 1
    reach, per_epoch = fallback_counts(workload, method, workers, profile, row.get("target"),
                                       epochs)
    return Plan(workload=workload, method=method, device=row.get("device", "cpu"),
                workers=workers, threads=row.get("threads") or 1, profile=profile,
                epochs=epochs, target=row.get("target"), seed=row.get("seed") or 0,
                batch=row.get("batch"), math=tuple(row.get("math") or ()),
                mid_from=row.get("mid_from") or 0, hold=row.get("held"),
                crossing=bool(row.get("crossing")), sparse=bool(row.get("evals_sparse")),
                cores=row.get("cores"),
                reach_guess=reach, per_epoch_guess=per_epoch)


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


def counts(plan: Plan, reach: float | None, per_epoch: int) -> tuple[float, int]:
    """(epochs trained, evaluations) of ``plan`` reaching its target after ``reach`` epochs
    (fractional: between parts; None: it does not), ``per_epoch`` evaluations an epoch from
    ``plan.mid_from``, one at each epoch's end before it, and when held past the target one at
    the hold's end; at serial's crossing (``plan.crossing``), one there (``plan.sparse``
    False: as a row recorded before evaluated, held epochs' ends and epochs' ends before the
    crossing too)."""
    if plan.target is None:
        return float(plan.epochs), 1
    cap, mid, parts = plan.epochs, plan.mid_from, max(1, per_epoch)
    if reach is None:
        return float(cap), min(mid, cap) + max(0, cap - mid) * parts
    e = min(max(reach, 1e-9), cap)
    k = math.ceil(e) - 1  # the epoch (0-based) in which it is reached
    if plan.crossing:
        return e, 1 if plan.sparse else k + 1
    before = min(mid, k) + max(0, k - mid) * parts
    at = 1 if k < mid else max(1, round((e - k) * parts))
    if plan.hold is not None and plan.hold > k + 1:
        if plan.sparse:
            return float(plan.hold), before + at + 1
        end = 1 if k >= mid and at < parts else 0  # the rest of that epoch: its end only
        return float(plan.hold), before + at + end + (plan.hold - k - 1)
    return e, before + at


class _Pool:
    """Values by key, and their median with one value left out (leave-one-out)."""

    def __init__(self) -> None:
        self._values: dict[tuple, list[float]] = defaultdict(list)

    def add(self, key: tuple, value: float) -> None:
        bisect.insort(self._values[key], value)

    def median(self, key: tuple, without: float | None = None) -> tuple[float, int] | None:
        s = self._values.get(key, [])
        j = bisect.bisect_left(s, without) if without is not None else len(s)
        if j < len(s) and s[j] != without:  # not among them: nothing left out
            j = len(s)
        n = len(s) - (1 if j < len(s) else 0)
        if n <= 0:
            return None

        def at(i: int) -> float:
            return s[i if i < j else i + 1]

        mid = (n - 1) // 2
        return (at(mid) if n % 2 else (at(mid) + at(mid + 1)) / 2), n


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

    @classmethod
    def fit(cls, rows: Iterable[dict[str, Any]], machine: str,
            declared: Declared | None = None) -> CostModel:
        """The model of the ok rows of ``machine`` among ``rows``; with ``declared``, its
        guesses scaled to this machine (:func:`machine_factors`)."""
        mine = [r for r in rows if r.get("machine") == machine and r.get("status", "ok") == "ok"]
        model = cls(machine=machine, rows=mine, pools={c: _Pool() for c in LEVELS})
        for row in mine:
            plan = row_plan(row)
            for name, value in row_values(row).items():
                for _, key, scaled in LEVELS[name]:
                    model.pools[name].add(key(plan), value * plan.used if scaled else value)
        model.factors = machine_factors(mine, declared) if declared is not None else {}
        imports = [r["prestart_s"] for r in mine if r.get("prestart_s") is not None]
        model.prestart_s = statistics.median(imports) if imports else DEFAULT_PRESTART_S
        return model

    def _unit(self, name: str, plan: Plan, left_out: dict[str, float] | None
              ) -> tuple[float, str, int] | None:
        """(median per unit, its level, how many rows) of component ``name``."""
        own = (left_out or {}).get(name)
        for level, key, scaled in LEVELS[name]:
            without = None if own is None else (own * plan.used if scaled else own)
            if (found := self.pools[name].median(key(plan), without)) is not None:
                return (found[0] / plan.used if scaled else found[0]), level, found[1]
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
