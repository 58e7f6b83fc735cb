"""A planned case for the cost model: what it is, the keys its costs are pooled by, and
the counts it will run (epochs, evaluations).

Usage::

    from parabench.sweep.costplan import Plan, counts
    p = Plan(workload="mlp", method="serial", profile="tiny", epochs=3)
    counts(p, reach=None, per_epoch=1)     # (epochs trained, evaluations): (3.0, 1)

The cost model (:mod:`parabench.sweep.costmodel`) and the reference table
(:mod:`parabench.sweep.costref`) pool per-unit costs by :data:`LEVELS`' keys.
"""

from __future__ import annotations

import bisect
import math
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from parabench.sweep.costs import row_values


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


def pooled(rows: Iterable[dict[str, Any]]) -> dict[str, _Pool]:
    """Each component's per-unit costs in ``rows`` (:func:`row_values`), pooled under every
    key of :data:`LEVELS` (a scaled level's value times the cores the case used)."""
    pools = {c: _Pool() for c in LEVELS}
    for row in rows:
        plan = row_plan(row)
        for name, value in row_values(row).items():
            for _, key, scaled in LEVELS[name]:
                pools[name].add(key(plan), value * plan.used if scaled else value)
    return pools
