"""The benchmark face of the planner: its cases, and the smoke selection of plain ``pytest``.

Usage::

    for case in smoke_cases(bench_cases()):        # one case per (method, device)
        case.id, case.markers, case.config(profile="tiny")

The cases come from :mod:`parabench.sweep.plan` (the one planner); each is run by
:class:`parabench.case.lifecycle.StartedCase`. The asv suite imports this module by name: a
parabench without it is an old commit, whose benchmarks show as n/a.
"""

from __future__ import annotations

from parabench.identity import BASELINE_METHOD as BASELINE
from parabench.registry import workloads
from parabench.sweep.plan import BenchCase, bench_cases

__all__ = ["BASELINE", "BenchCase", "bench_cases", "smoke_cases"]


def smoke_cases(cases: list[BenchCase]) -> list[BenchCase]:
    """One case per (method, device): its cheapest workload at its largest worker count.

    Plain ``pytest`` runs benchmarks once, untimed, to prove they work; running every
    workload under every method there would take longer than the rest of the suite. Serial
    trains every workload in the workload tests; measuring runs keep every case.
    """
    def rank(c: BenchCase) -> tuple:  # the workloads' declared smoke_rank, cheapest first
        order = workloads.get(c.workload).smoke_rank if c.workload in workloads else None
        return (order is None, order or 0, c.workload, -c.workers)

    chosen: dict[tuple[str, str], BenchCase] = {}
    for case in sorted(cases, key=rank):
        chosen.setdefault((case.method, case.device), case)
    return [c for c in cases if chosen.get((c.method, c.device)) is c]
