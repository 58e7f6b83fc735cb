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
from parabench.sweep.plan import BenchCase, bench_cases

__all__ = ["BASELINE", "SMOKE_ORDER", "BenchCase", "bench_cases", "smoke_cases"]

#: smoke mode's preference: the cheapest workload a method supports stands for the method
SMOKE_ORDER = ("mlp", "random_forest", "cnn", "nbow", "conv_autoencoder", "seq2seq", "vgg11",
               "densenet121")


def smoke_cases(cases: list[BenchCase]) -> list[BenchCase]:
    """One case per (method, device): its cheapest workload at its largest worker count.

    Plain ``pytest`` runs benchmarks once, untimed, to prove they work; running every
    workload under every method there would take longer than the rest of the suite. Serial
    trains every workload in the workload tests; measuring runs keep every case.
    """
    def rank(c: BenchCase) -> tuple:
        order = SMOKE_ORDER.index(c.workload) if c.workload in SMOKE_ORDER else len(SMOKE_ORDER)
        return (order, c.workload, -c.workers)

    chosen: dict[tuple[str, str], BenchCase] = {}
    for case in sorted(cases, key=rank):
        chosen.setdefault((case.method, case.device), case)
    return [c for c in cases if chosen.get((c.method, c.device)) is c]
