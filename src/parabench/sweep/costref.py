"""The reference cost table: what the default grid and the main job cost on one recorded
machine, for the cases this machine has not run yet.

Usage::

    from parabench.sweep.costref import Reference, reference_rows
    ref = Reference.fit(reference_rows(), own_rows)   # own_rows: this machine's history rows
    ref.unit("windows", plan)      # (per-unit seconds scaled to this machine, level) or None
    ref.factors, ref.matched       # this machine / the reference, and the rows that said so

A first sweep on a machine knows only what its methods and workloads declare
(``startup_guess_s``, ``tiny_epoch_guess_s``): rounded figures of an older machine and of
cases started before pre-started interpreters, scaled by one factor; an engine's start-up and
windows (Spark's, LightGBM's) are not in them at all. The table holds the history rows
(:mod:`parabench.sweep.costs`) of real runs of ``parabench run`` (the default grid) and the
README's main job on the machine named in each row, shipped as
``reference_costs.jsonl`` beside this module and written by ``scripts/reference_costs.py``
(docs/measurements.md, "The dry run on a first run", has its command, date and load).

:class:`~parabench.sweep.costmodel.CostModel` reads it beside this machine's own rows: a
component of a case this machine has not recorded comes from the table's rows of that case,
else from this machine's coarser keys, else from the table's
(:data:`~parabench.sweep.costplan.LEVELS`), times this machine's factor for that component,
the median of ``own / reference`` over this machine's rows of cases the table also holds,
over its newest :data:`FACTOR_ROWS` such rows (1 where none does: the estimate is then the
reference machine's, and says so). Epochs to
the target and evaluations per epoch are not scaled: they are the code's, not the machine's.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from parabench.sweep.costplan import LEVELS, pooled, row_plan
from parabench.sweep.costs import read_costs, row_values

#: the shipped table, beside this module
REFERENCE_FILE = Path(__file__).with_name("reference_costs.jsonl")
#: components whose cost depends on the machine's speed (scaled by its factor)
SCALED = ("fixed", "train", "evaluate", "windows")
#: a factor is the median over at most this many of this machine's newest matching rows
FACTOR_ROWS = 20


def reference_rows(path: Path | None = None) -> list[dict[str, Any]]:
    """The table's ok rows, read as the cost history is (:func:`read_costs`: none where the
    file is missing or unreadable; a torn line is skipped)."""
    return [r for r in read_costs(path or REFERENCE_FILE) if r.get("status", "ok") == "ok"]


@dataclass(kw_only=True)
class Reference:
    """The table's per-unit costs (pooled as the cost model pools its own rows) and this
    machine's speed against it."""

    rows: list[dict[str, Any]]
    pools: dict[str, Any] = field(default_factory=dict)
    #: per component, the median of this machine's per-unit cost over the table's at the
    #: same case; a component absent here is unscaled (1)
    factors: dict[str, float] = field(default_factory=dict)
    #: this machine's rows of cases the table also holds
    matched: int = 0

    @property
    def machines(self) -> list[str]:
        """The machines the table's rows were recorded on."""
        return sorted({str(r["machine"]) for r in self.rows})

    @property
    def recorded(self) -> str:
        """The day of the table's newest row."""
        return max(str(r.get("t", ""))[:10] for r in self.rows) if self.rows else ""

    @classmethod
    def fit(cls, rows: Iterable[dict[str, Any]], own: Iterable[dict[str, Any]]
            ) -> Reference | None:
        """The table of ``rows`` scaled to the machine of ``own`` (its history rows); None
        without rows."""
        table = list(rows)
        if not table:
            return None
        ref = cls(rows=table, pools=pooled(table))
        ratios: dict[str, list[float]] = {c: [] for c in SCALED}
        matched = set()
        for row in sorted(own, key=lambda r: str(r.get("t", ""))):
            plan = row_plan(row)
            for name, value in row_values(row).items():
                own_case = LEVELS[name][0][1](plan)  # the component's most specific key
                if name in ratios and (found := ref.pools[name].median(own_case)):
                    if found[0] > 0 and value > 0:
                        ratios[name].append(value / found[0])
                        matched.add(id(row))
        # the newest: what the machine is like now (a busy hour's rows or older code's are
        # in the history too)
        ref.factors = {c: statistics.median(r[-FACTOR_ROWS:]) for c, r in ratios.items() if r}
        ref.matched = len(matched)
        return ref

    def unit(self, name: str, plan: Any, case_only: bool = False) -> tuple[float, str] | None:
        """(per-unit cost of component ``name`` for ``plan``, ``"reference"``) from the
        table's most specific key that has rows (``case_only``: the case's own key only),
        scaled to this machine; None if none has."""
        for _, key, scaled in LEVELS[name][:1] if case_only else LEVELS[name]:
            if (found := self.pools[name].median(key(plan))) is not None:
                value = found[0] / plan.used if scaled else found[0]
                return value * self.factors.get(name, 1.0), "reference"
        return None
