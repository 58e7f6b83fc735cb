"""Which method to use: the fastest whose parity holds, per workload, device and profile.

Usage::

    for rec in recommend(results, baselines=earlier_serial_results):
        print("\\n".join(describe(rec)))

Pure: reads Results, returns data. A *candidate* is one (method, workers, batch, options)
configuration with its ok results. Candidates are ranked by median throughput. Only a
candidate whose parity holds ("ok", or the serial baseline itself) can be recommended; faster
candidates that failed parity, or whose parity was never checked (no serial case to compare
with), are listed as such. Speedup is against the serial candidate at the same batch and data
options (any batch when none matches), with a bootstrap CI over the samples of both (see
:mod:`parabench.sweep.stats`). The runner-up is the best qualifying candidate of another method;
the two differ significantly when a two-sided Mann-Whitney test gives p < 0.05.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from parabench.case.result import Result
from parabench.sweep.compare import baseline_of, is_baseline, throughput_speedup
from parabench.sweep.stats import (
    ALPHA,
    Samples,
    can_be_significant,
    mann_whitney_p,
    ratio_ci,
    throughput_samples,
)

#: options the serial baseline must share with a method for a fair speedup
BASELINE_OPTIONS = ("data_dir", "precision", "num_workers", "pin_memory")


def options_label(r: Result) -> str:
    opts = (r.config or {}).get("options", {})
    return " ".join(f"{k}={v}" for k, v in sorted(opts.items()) if k != "data_dir") or "-"


def data_options(options: str) -> str:
    """The part of an options label the serial baseline must share."""
    return " ".join(o for o in options.split() if o.split("=")[0] in BASELINE_OPTIONS)


def group_key(r: Result) -> tuple:
    """(workload, method, device, workers, batch, profile, options): repeats share it."""
    batch = "-" if r.batch_size is None else str(r.batch_size)
    return (r.workload, r.method, r.device, r.workers, batch, r.profile, options_label(r))


def _median(values: Iterable[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


@dataclass(frozen=True, kw_only=True)
class Candidate:
    key: tuple
    results: tuple[Result, ...]
    samples: Samples
    throughput: float
    #: "base" (serial), "ok", "failed" or "unchecked"
    parity: str
    parity_gap: float | None = None
    parity_tolerance: float | None = None
    peak_rss_mb: float | None = None
    peak_gpu_mb: float | None = None

    @property
    def method(self) -> str:
        return self.key[1]

    @property
    def workers(self) -> int:
        return self.key[3]

    @property
    def batch(self) -> str:
        return self.key[4]

    @property
    def options(self) -> str:
        return self.key[6]

    @property
    def qualifies(self) -> bool:
        return self.parity in ("base", "ok")

    def label(self) -> str:
        extra = "" if self.batch == "-" else f", batch {self.batch}"
        extra += "" if self.options == "-" else f", {self.options}"
        return f"{self.method} with {self.workers} worker{'s' if self.workers > 1 else ''}{extra}"


def _parity(method: str, rs: Sequence[Result]) -> tuple[str, float | None, float | None]:
    if is_baseline(method):
        return "base", None, None
    checked = [r.parity for r in rs if r.parity and r.parity.get("status") in ("ok", "failed")]
    if not checked:
        return "unchecked", None, None
    worst = min(checked, key=lambda p: p.get("gap", 0.0))
    return worst["status"], worst.get("gap"), worst.get("tolerance")


def candidates(results: Iterable[Result]) -> list[Candidate]:
    groups: dict[tuple, list[Result]] = defaultdict(list)
    for r in results:
        if r.status == "ok":
            groups[group_key(r)].append(r)
    out = []
    for key, rs in groups.items():
        samples = throughput_samples(rs)
        rate = _median(r.samples_per_s for r in rs) or samples.median
        if not rate:
            continue
        status, gap, tol = _parity(key[1], rs)
        out.append(Candidate(
            key=key, results=tuple(rs), samples=samples, throughput=rate, parity=status,
            parity_gap=gap, parity_tolerance=tol,
            peak_rss_mb=_median(r.peak_rss_mb for r in rs),
            peak_gpu_mb=_median(r.peak_gpu_mb for r in rs),
        ))
    return out


@dataclass(frozen=True, kw_only=True)
class Recommendation:
    workload: str
    device: str
    profile: str
    best: Candidate | None
    baseline: Candidate | None = None
    speedup: float | None = None
    speedup_ci: tuple[float, float] | None = None
    runner_up: Candidate | None = None
    runner_up_p: float | None = None
    significant: bool = False
    #: False when the sample counts could never reach p < 0.05
    testable: bool = False
    failed_faster: tuple[Candidate, ...] = ()
    unchecked_faster: tuple[Candidate, ...] = ()


def baseline_for(cand: Candidate, pool: Sequence[Candidate]) -> Candidate | None:
    """Serial at the same batch and data options; else the same data options, any batch."""
    serial = [c for c in pool if c.method == baseline_of(cand.method)
              and data_options(c.options) == data_options(cand.options)]
    exact = [c for c in serial if c.batch == cand.batch]
    return (exact or serial or [None])[0]


def recommend(results: Iterable[Result], baselines: Iterable[Result] = ()) -> list[Recommendation]:
    """One recommendation per (workload, device, profile) with an ok case, in sorted order."""
    results = list(results)
    seen = {id(r) for r in results}
    pool = candidates([*results, *(b for b in baselines if id(b) not in seen)])
    scopes: dict[tuple[str, str, str], list[Candidate]] = defaultdict(list)
    for c in pool:
        scopes[(c.key[0], c.key[2], c.key[5])].append(c)
    return [_recommend_scope(scope, cands) for scope, cands in sorted(scopes.items())]


def _recommend_scope(scope: tuple[str, str, str], cands: list[Candidate]) -> Recommendation:
    workload, device, profile = scope
    ranked = sorted(cands, key=lambda c: (-c.throughput, c.key))
    qualifying = [c for c in ranked if c.qualifies]
    if not qualifying:
        return Recommendation(workload=workload, device=device, profile=profile, best=None,
                              failed_faster=tuple(c for c in ranked if c.parity == "failed"),
                              unchecked_faster=tuple(c for c in ranked
                                                     if c.parity == "unchecked"))
    best = qualifying[0]
    faster = ranked[:ranked.index(best)]
    base = best if is_baseline(best.method) else baseline_for(best, ranked)
    speedup = ci = None
    if base is not None:
        speedup = throughput_speedup(best.throughput, base.throughput)
        ci = None if base is best else ratio_ci(best.samples.values, base.samples.values)
    runner = next((c for c in qualifying if c.method != best.method), None)
    p = testable = None
    if runner is not None:
        p = mann_whitney_p(best.samples.values, runner.samples.values)
        testable = can_be_significant(len(best.samples.values), len(runner.samples.values))
    return Recommendation(
        workload=workload, device=device, profile=profile, best=best, baseline=base,
        speedup=speedup, speedup_ci=ci, runner_up=runner, runner_up_p=p,
        significant=p is not None and p < ALPHA, testable=bool(testable),
        failed_faster=tuple(c for c in faster if c.parity == "failed"),
        unchecked_faster=tuple(c for c in faster if c.parity == "unchecked"),
    )


def _mem(c: Candidate) -> str:
    parts = [f"{c.peak_rss_mb:,.0f} MB RAM"] if c.peak_rss_mb is not None else []
    if c.peak_gpu_mb:
        parts.append(f"{c.peak_gpu_mb:,.0f} MB GPU")
    return " + ".join(parts) or "memory not recorded"


def describe(rec: Recommendation) -> list[str]:
    """The recommendation as short lines of text (the first answers the question)."""
    scope = f"{rec.workload} on {rec.device} ({rec.profile})"
    if rec.best is None:
        why = ("every faster case failed parity" if rec.failed_faster
               else "no case's parity was checked: add --method serial to the sweep")
        lines = [f"{scope}: no recommendation: {why}"]
    else:
        b = rec.best
        head = f"{scope}: use {b.label()}"
        if rec.baseline is rec.best:
            head += ": serial is the fastest here"
        elif rec.speedup is not None:
            ci = (f" (95% CI {rec.speedup_ci[0]:.2f}-{rec.speedup_ci[1]:.2f}x)"
                  if rec.speedup_ci else "")
            head += f": {rec.speedup:.2f}x serial's throughput{ci}"
        else:
            head += ": no serial case at this batch to compare with"
        lines = [f"{head}; {b.throughput:,.0f} samples/s, peak {_mem(b)}"
                 f" [{b.samples.describe()}]"]
        if rec.runner_up is not None:
            r = rec.runner_up
            verdict = "significant" if rec.significant else "not significant"
            why = "" if rec.testable or rec.significant else (
                f"; {len(b.samples.values)} vs {len(r.samples.values)} samples can never reach"
                " p < 0.05: run more --repeats or --epochs")
            lines.append(f"  runner-up: {r.label()}, {r.throughput:,.0f} samples/s "
                         f"({r.throughput / b.throughput:.2f}x the best); difference {verdict}"
                         f" (Mann-Whitney p={rec.runner_up_p:.2f}{why})")
    for c in rec.failed_faster:
        gap = (f": quality gap {c.parity_gap:+.3f} beyond tolerance {c.parity_tolerance:.3f}"
               if c.parity_gap is not None and c.parity_tolerance is not None else "")
        lines.append(f"  faster but FAILED parity, not recommended: {c.label()}, "
                     f"{c.throughput:,.0f} samples/s{gap}")
    for c in rec.unchecked_faster:
        lines.append(f"  faster but parity not checked (no serial case): {c.label()}, "
                     f"{c.throughput:,.0f} samples/s")
    return lines
