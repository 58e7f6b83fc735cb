"""Which method to use: the fastest whose parity holds, per workload, device and profile.

Usage::

    for rec in recommend(results, baselines=earlier_serial_results):
        print("\\n".join(describe(rec)))

Pure: reads Results, returns data. A *candidate* is one (method, workers, batch, options)
configuration with its ok results. Candidates are ranked by median throughput. Only a
candidate whose parity holds ("ok", or the serial baseline itself) can be recommended; faster
candidates that failed parity, or whose parity was never checked (no serial case to compare
with), are listed as such. Speedup is against the serial candidate with the same total cores
(workers x threads), batch and data options (:func:`parabench.analysis.ratios.find_baseline`; no
other run stands in), with a bootstrap CI over the samples of both (see
:mod:`parabench.analysis.stats`). A recommendation measured only on a busy machine (other
processes took cores the case needed, ``Result.machine.busy``) says so. The runner-up is
the best qualifying candidate of another method; the two differ significantly when a
two-sided Mann-Whitney test gives p < 0.05.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from parabench.analysis.figures import (
    BUSY_WARNING,
    group_key,
    median_times,
    options_label,
    peak_memory,
    recorded_busy,
    seconds_per_sample,
)
from parabench.analysis.ratios import (
    find_baseline,
    is_baseline,
    missing_hint,
    throughput_speedup,
    total_cores,
)
from parabench.analysis.stats import (
    ALPHA,
    Samples,
    can_be_significant,
    mann_whitney_p,
    p_text,
    ratio_ci,
    throughput_samples,
)
from parabench.case.records import Parity
from parabench.case.result import Result

__all__ = ["Candidate", "Recommendation", "baseline_for", "candidates", "describe", "group_key",
           "median_times", "options_label", "parity_cell", "parity_text", "recommend",
           "seconds_per_sample"]


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
    #: the quality basis's tolerance (None for trajectory / predictions evidence)
    parity_tolerance: float | None = None
    #: the verdict with its evidence, as the table shows it (:func:`parity_text`)
    parity_text: str = "-"
    #: peak memory (PSS sum, else RSS: ``peak_is_rss``), see :func:`peak_memory`
    peak_mb: float | None = None
    peak_is_rss: bool = False
    peak_gpu_mb: float | None = None
    #: every result of it was measured on a busy machine
    busy: bool = False

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

    @property
    def threads(self) -> int:
        return self.key[7]

    def label(self) -> str:
        each = " each" if self.workers > 1 else ""
        extra = f", {self.threads} thread{'s' if self.threads > 1 else ''}{each}"
        extra += "" if self.batch == "-" else f", batch {self.batch}"
        extra += "" if self.options == "-" else f", {self.options}"
        return f"{self.method} with {self.workers} worker{'s' if self.workers > 1 else ''}{extra}"


def _sci(x: float) -> str:
    """Compact scientific notation: 2e-7, 3e-2, 0, inf."""
    if x == 0 or x != x or x in (float("inf"), float("-inf")):
        return f"{x:g}"
    mantissa, _, exp = f"{x:.0e}".partition("e")
    return f"{mantissa}e{int(exp)}"


def _trajectory_share(p: Parity) -> tuple[float, float]:
    """(loss, weight) difference, each over its tolerance (inf when not compared)."""
    tol = p.tolerance if isinstance(p.tolerance, dict) else {}
    loss = p.loss_rel_max if p.loss_rel_max is not None else float("inf")
    weight = p.weight_rel_l2 if p.weight_rel_l2 is not None else float("inf")
    return loss / (tol.get("loss_rel") or 1.0), weight / (tol.get("weight_rel_l2") or 1.0)


def _severity(p: Parity) -> tuple[bool, float]:
    """How bad a parity verdict is: failed first, then its figure over its tolerance."""
    basis, tol = p.basis or "quality", p.tolerance
    if basis == "trajectory":
        figure = max(_trajectory_share(p))
    elif basis == "predictions":
        figure = 0.0 if p.identical else float("inf")
    else:
        figure = -float(p.gap or 0.0) / (tol if isinstance(tol, float) and tol else 1.0)
    return p.status == "failed", figure


def parity_text(p: Parity) -> str:
    """One verdict with its evidence: ``ok w 2e-7``, ``FAILED loss 3e-2 w 6e-3``, what else
    differed (``FAILED digest coverage``, ``FAILED final w 3e-2``, ``FAILED epoch 2 loss``,
    ``FAILED evaluation +0.016``), ``ok identical``, ``FAILED differs``, ``ok``,
    ``FAILED -0.210`` (the quality gap)."""
    ok = p.status == "ok"
    basis = p.basis or "quality"
    gap = p.gap or 0.0
    if basis == "trajectory":
        if not ok and p.differs == "final weights" and p.final_weight_rel_l2 is not None:
            return f"FAILED final w {_sci(p.final_weight_rel_l2)}"
        if not ok and p.differs and p.differs != "first steps":  # says what differed
            return f"FAILED {p.differs}"
        if p.loss_rel_max is None or p.weight_rel_l2 is None:  # e.g. other traced steps
            return "ok" if ok else "FAILED steps differ"
        loss, weight = p.loss_rel_max, p.weight_rel_l2
        if not ok and p.trajectory_ok:  # trained like serial, evaluated otherwise
            return f"FAILED quality {gap:+.3f}"
        if not ok:
            return f"FAILED loss {_sci(loss)} w {_sci(weight)}"
        loss_share, weight_share = _trajectory_share(p)
        loss_worse = loss_share > weight_share
        return f"ok loss {_sci(loss)}" if loss_worse else f"ok w {_sci(weight)}"
    if basis == "predictions":
        if ok:
            return "ok identical"
        return "FAILED differs" if not p.identical else f"FAILED {gap:+.3f}"
    return "ok" if ok else f"FAILED {gap:+.3f}"


def parity_cell(parities: Iterable[Parity | None]) -> str:
    """The worst checked verdict of a configuration's repeats; ``base`` for the baseline,
    ``-`` when none was checked. Any failure reads ``FAILED ...``."""
    parities = [p for p in parities if p]
    checked = [p for p in parities if p.status in ("ok", "failed")]
    if not checked:
        return "base" if any(p.kind == "baseline" for p in parities) else "-"
    return parity_text(max(checked, key=_severity))


def _parity(method: str, rs: Sequence[Result]) -> tuple[str, float | None, float | None, str]:
    checked = [r.parity for r in rs if r.parity and r.parity.status in ("ok", "failed")]
    if not checked:  # a baseline run is checked only with work options on (compile, ...)
        return ("base", None, None, "base") if is_baseline(method) else (
            "unchecked", None, None, "-")
    worst = max(checked, key=_severity)
    tol = worst.tolerance
    return (worst.status, worst.gap, tol if isinstance(tol, float) else None,
            parity_text(worst))


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
        status, gap, tol, text = _parity(key[1], rs)
        out.append(Candidate(
            key=key, results=tuple(rs), samples=samples, throughput=rate, parity=status,
            parity_gap=gap, parity_tolerance=tol, parity_text=text,
            **dict(zip(("peak_mb", "peak_is_rss"), peak_memory(rs), strict=True)),
            peak_gpu_mb=_median(r.peak_gpu_mb for r in rs), busy=all(map(recorded_busy, rs)),
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
    """Serial with the same total cores, batch and data options (None: not in ``pool``)."""
    key = find_baseline(cand.key, [c.key for c in pool], total_cores(cand.workers, cand.threads))
    return next((c for c in pool if c.key == key), None)


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
    kind = "RSS" if c.peak_is_rss else "PSS"
    parts = [f"{c.peak_mb:,.0f} MB RAM ({kind})"] if c.peak_mb is not None else []
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
            wanted = total_cores(b.workers, b.threads)
            head += f": speedup unknown ({missing_hint(b.key, wanted)})"
        lines = [f"{head}; {b.throughput:,.0f} samples/s, peak {_mem(b)}"
                 f" [{b.samples.describe()}]"]
        if b.busy:
            lines.append(f"  {BUSY_WARNING}: re-run on a quiet machine before relying on it")
        if rec.runner_up is not None:
            r = rec.runner_up
            verdict = "significant" if rec.significant else "not significant"
            why = "" if rec.testable or rec.significant else (
                f"; {len(b.samples.values)} vs {len(r.samples.values)} samples can never reach"
                " p < 0.05: run more --repeats or --windows")
            lines.append(f"  runner-up: {r.label()}, {r.throughput:,.0f} samples/s "
                         f"({r.throughput / b.throughput:.2f}x the best); difference {verdict}"
                         f" (Mann-Whitney {p_text(rec.runner_up_p)}{why})")
    for c in rec.failed_faster:
        gap = (f": quality gap {c.parity_gap:+.3f} beyond tolerance {c.parity_tolerance:.3f}"
               if c.parity_gap is not None and c.parity_tolerance is not None
               else f": {c.parity_text}")
        lines.append(f"  faster but FAILED parity, not recommended: {c.label()}, "
                     f"{c.throughput:,.0f} samples/s{gap}")
    for c in rec.unchecked_faster:
        lines.append(f"  faster but parity not checked (no serial case): {c.label()}, "
                     f"{c.throughput:,.0f} samples/s")
    return lines
