"""In-process benchmark cases shared by the pytest-benchmark cases and the asv suite.

Usage::

    for case in bench_cases():                     # from the registry: adding a method adds cases
        case.markers                               # {"cpu"} / {"cuda"} / {"mpi", ...}
        case.config(profile="tiny")                # the RunConfig a StartedCase runs

Each case is run by :class:`parabench.case.lifecycle.StartedCase`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from parabench.config import RunConfig, available_cores
from parabench.registry import methods, workloads
from parabench.sweep.recommend import is_baseline

#: requirement -> pytest marker; a case gets the markers of what it needs
REQUIREMENT_MARKERS = {
    "cuda": "cuda", "multigpu": "multigpu", "mpi": "mpi", "dask": "dask", "spark": "spark",
    "tf": "tf", "numba": "numba", "torch": "torch", "xgboost": "xgboost",
    "lightgbm": "lightgbm", "cuml": "cuml",
}
BASELINE = "serial"


@dataclass(frozen=True, kw_only=True)
class BenchCase:
    workload: str
    method: str
    device: str
    workers: int

    @property
    def id(self) -> str:
        return f"{self.workload}-{self.method}-{self.device}-w{self.workers}"

    @property
    def markers(self) -> set[str]:
        method, workload = methods.get(self.method), workloads.get(self.workload)
        needs = set(method.requires) | set(workload.requires)
        if self.device == "cuda":
            needs.add("multigpu" if self.workers > 1 else "cuda")
        marks = {REQUIREMENT_MARKERS[n] for n in needs if n in REQUIREMENT_MARKERS}
        return marks | {"cuda" if self.device == "cuda" else "cpu"}

    def config(self, profile: str = "tiny", **changes: Any) -> RunConfig:
        return RunConfig(workload=self.workload, method=self.method, device=self.device,
                         workers=self.workers, profile=profile, epochs=1, **changes)

    def skip_reason(self, profile: str = "tiny") -> str | None:
        """Why this case cannot run here (None: it can)."""
        config = self.config(profile)
        reason = methods.get(self.method).check(workloads.get(self.workload), config)
        if reason is None and config.oversubscribed():
            reason = f"{self.workers} workers exceed the {available_cores()} cores here"
        return reason


#: comma-separated names restricting :func:`bench_cases` (pytest-benchmark and asv alike)
SELECT_ENV = {"workloads": "PARABENCH_WORKLOADS", "methods": "PARABENCH_METHODS"}
#: smoke mode's preference: the cheapest workload a method supports stands for the method
SMOKE_ORDER = ("mlp", "random_forest", "cnn", "nbow", "conv_autoencoder", "seq2seq", "vgg11",
               "densenet121")


def _selected(kind: str) -> list[str] | None:
    """Names from ``$PARABENCH_WORKLOADS`` / ``$PARABENCH_METHODS`` (checked), or None."""
    text = os.environ.get(SELECT_ENV[kind], "").strip()
    if not text:
        return None
    registry = workloads if kind == "workloads" else methods
    names = [n.strip() for n in text.split(",") if n.strip()]
    for name in names:
        registry.get(name)  # UnknownNameError lists the valid names
    return names


def bench_cases(cores: int | None = None) -> list[BenchCase]:
    """Every supported (workload, method, device, workers) combination, baseline first.

    ``$PARABENCH_WORKLOADS`` / ``$PARABENCH_METHODS`` (comma-separated) restrict the set.
    """
    cases = []
    only_w, only_m = _selected("workloads"), _selected("methods")
    for method in methods:
        if only_m is not None and method.name not in only_m:
            continue
        for workload in workloads:
            if only_w is not None and workload.name not in only_w:
                continue
            if not method.supports(workload):
                continue
            for device in method.devices_for(workload):
                for workers in method.default_workers(cores or max(2, available_cores())):
                    cases.append(BenchCase(workload=workload.name, method=method.name,
                                           device=device, workers=workers))
    return sorted(cases, key=lambda c: (c.method != BASELINE, not is_baseline(c.method),
                                        c.method, c.workload, c.device, c.workers))


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
