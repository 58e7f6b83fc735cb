"""Collect what a report shows from results: recommendations, table, scopes, failures, env.

Usage::

    data = build(results, baselines=earlier_serial, out_dir=Path("report"))  # writes PNGs
    data.recommendation_lines()        # the answer, first lines of every output

Pure apart from writing the PNGs into ``out_dir``; the HTML and Markdown writers only format.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from parabench.analysis.figures import machine_type
from parabench.analysis.ratios import is_baseline, throughput_speedup
from parabench.analysis.recommend import (
    Candidate,
    Recommendation,
    baseline_for,
    candidates,
    describe,
    recommend,
)
from parabench.analysis.stats import amdahl_fit
from parabench.analysis.wall import wall_table
from parabench.case.result import Result
from parabench.identity import CaseId, slug
from parabench.identity import Scope as ScopeKey
from parabench.sweep.table import Row, format_table, not_applicable, summarize

SAMPLES_NOTE = (
    "Significance and CIs use independent repeats when a case has two or more (per-repeat "
    "throughput), otherwise the steady speed windows of its single run (the warm-up window "
    "dropped; older results without windows: the steady epochs, the first dropped), which "
    "share one process and so understate run-to-run noise. Two samples per side can never "
    "reach p < 0.05 (Mann-Whitney); run --repeats 4 or more (or more --windows) to tell close "
    "methods apart."
)
#: what the summary table's samples/s cell means (parabench.sweep.table's module doc)
SPEED_NOTE = (
    "samples/s: the median of the steady speed windows (W windows of N global mini-batch "
    "steps after a warm-up window; one fit, round or epoch for estimators, fedavg and "
    "TensorFlow) ± the half-width of its 95 % bootstrap CI in % of the median (the larger "
    "side when asymmetric; it takes the windows as independent, and holds the case's later "
    "speed less often than 95 %: docs/measuring.md); with repeats, median and CI over the "
    "repeats' figures. Older results without windows show the figure alone. epoch s: the "
    "epoch's samples at that speed."
)


@dataclass(frozen=True, kw_only=True)
class Scope:
    workload: str
    device: str
    profile: str
    recommendation: Recommendation | None
    candidates: list[Candidate]
    #: figure name -> PNG path
    figures: dict[str, Path]
    amdahl: list[str]
    parity: list[tuple[str, str, str, str]]
    #: the machine type, where the results ran on several (each has its own section)
    machine: str | None = None

    @property
    def title(self) -> str:
        where = f" [{self.machine}]" if self.machine else ""
        return f"{self.workload} on {self.device} ({self.profile}){where}"


@dataclass(frozen=True, kw_only=True)
class ReportData:
    recommendations: list[Recommendation]
    rows: list[Row]
    scopes: list[Scope]
    problems: list[Result]
    env: dict[str, Any]
    commits: list[str]
    sources: list[str]
    extra_notes: list[str] = field(default_factory=list)
    #: where the cases' wall time went (:func:`parabench.analysis.wall.wall_table`)
    wall: list[tuple[str, str, float, float]] = field(default_factory=list)

    @property
    def wall_total(self) -> float:
        """The cases' wall time the ``wall`` table splits, seconds."""
        return sum(seconds for _, _, seconds, _ in self.wall)

    def recommendation_lines(self) -> list[str]:
        if not self.recommendations:
            return ["No case finished ok: nothing to recommend (see the failures below)."]
        return [line for rec in self.recommendations for line in describe(rec)]

    @property
    def table(self) -> str:
        """Every column: the report has the room a terminal lacks."""
        return format_table(self.rows, wide=True)

    @property
    def not_applicable(self) -> str:
        return not_applicable(self.rows)


def amdahl_lines(cands: Sequence[Candidate]) -> list[str]:
    """Per method with >= 3 worker counts: fitted serial fraction, predicted speedup at 2x."""
    by: dict[tuple, list[Candidate]] = defaultdict(list)
    for c in cands:
        if not is_baseline(c.method):
            by[(c.method, c.batch, c.options)].append(c)
    lines = []
    for (method, _batch, _opts), cs in sorted(by.items()):
        fit = amdahl_fit({c.workers: 1.0 / c.throughput for c in cs})
        if fit is None:
            continue
        n = fit.predict_workers
        base = baseline_for(cs[0], cands)
        rate = 1.0 / fit.time(n)
        vs = (f"{throughput_speedup(rate, base.throughput):.2f}x serial" if base
              else f"{fit.time(1) / fit.time(n):.2f}x its own 1-worker time")
        lines.append(f"{method}: fitted serial fraction {fit.serial_fraction:.2f} over workers "
                     f"{', '.join(map(str, fit.measured_workers))}; PREDICTED at {n} workers: "
                     f"{vs} (Amdahl's law, not measured)")
    return lines


def parity_rows(cands: Sequence[Candidate]) -> list[tuple[str, str, str, str]]:
    out = []
    for c in sorted(cands, key=lambda c: (c.method, c.workers)):
        gap = "-" if c.parity_gap is None else f"{c.parity_gap:+.4f}"
        tol = "-" if c.parity_tolerance is None else f"{c.parity_tolerance:.4f}"
        out.append((c.label(), c.parity, gap, tol))
    return out


def _env(results: Sequence[Result]) -> tuple[dict[str, Any], list[str]]:
    envs = [r.env for r in results if r.env]
    env = dict(envs[-1]) if envs else {}
    hosts = sorted({e.get("host", "?") for e in envs})
    if len(hosts) > 1:
        env["note"] = f"results come from {len(hosts)} machines: {', '.join(hosts)}"
    kinds: dict[str, set[str]] = defaultdict(set)
    for r in results:
        if (kind := machine_type(r)) is not None:
            kinds[kind].add((r.env or {}).get("host") or "?")
    if len(kinds) > 1:  # a cluster's sweep over several kinds of node
        env["note"] = (f"results come from {len(kinds)} machine types, answered apart: "
                       + "; ".join(f"{k} ({', '.join(sorted(h))})"
                                   for k, h in sorted(kinds.items())))
    commits = sorted({r.git_commit for r in results if r.git_commit})
    return env, commits


def build(results: Iterable[Result], *, out_dir: Path, baselines: Iterable[Result] = (),
          sources: Sequence[str] = (), figures: bool = True) -> ReportData:
    from parabench.sweep.site import plots

    results = list(results)
    baselines = list(baselines)
    recs = recommend(results, baselines)
    # several machine types (a cluster's nodes): a section each, never one type's rows
    # beside another's (as the answer, recommend)
    split = len({t for r in results if (t := machine_type(r))}) > 1

    def kind(r: Result) -> str | None:
        return (machine_type(r) or "machine not recorded") if split else None

    by_scope: dict[tuple[ScopeKey, str | None], list[Result]] = defaultdict(list)
    for r in results:
        by_scope[(CaseId.recorded(r).scope, kind(r))].append(r)
    rec_of = {(rec.workload, rec.device, rec.profile, rec.machine): rec for rec in recs}
    scopes = []
    for (key, machine), rs in sorted(by_scope.items(), key=lambda item: (item[0][0],
                                                                         item[0][1] or "")):
        cands = [c for c in candidates([*rs, *(b for b in baselines if kind(b) == machine)])
                 if c.key.scope == key]
        if not cands:
            continue
        figs = {}
        if figures:
            name = key.slug() + (f"-{slug(machine)}" if machine else "")
            figs = plots.save(plots.scope_figures(cands, rs), out_dir, name)
        scopes.append(Scope(workload=key[0], device=key[1], profile=key[2], machine=machine,
                            recommendation=rec_of.get((*key, machine)), candidates=cands,
                            figures=figs, amdahl=amdahl_lines(cands),
                            parity=parity_rows(cands)))
    rows = summarize(results, baselines)
    unsupported = {(r.workload, r.method, r.device) for r in rows if r.unsupported}
    problems = [r for r in results if r.status != "ok"
                and (r.workload, r.method, r.device) not in unsupported]
    env, commits = _env(results)
    return ReportData(recommendations=recs, rows=rows, scopes=scopes, problems=problems,
                      env=env, commits=commits, sources=list(sources),
                      wall=wall_table(results))
