"""Which method to use: the fastest whose parity holds, per workload, device and profile.

Usage::

    for rec in recommend(results, baselines=earlier_serial_results):
        print("\\n".join(describe(rec)))

Pure: reads Results, returns data. A *candidate* is one (method, workers, batch, options)
configuration with its ok results. Candidates are ranked by median throughput, or, where the
scope ran in time-to-target mode (``--target-quality``), by their training seconds to the
target (:mod:`parabench.analysis.time_to_target`: derived from serial's samples for methods whose
trajectory matches serial's, measured for the others): a configuration that did not reach the
target, or needed more than the budget of samples, cannot be recommended and says why; one
that reached it sooner than serial with the same cores but within noise (the interval of
the ratio holds 1) gives way to serial, the simplest, at the threads that reach the target
soonest (not always the same cores: fewer threads can be sooner). Only a
candidate whose parity holds ("ok", or the serial baseline itself) can be recommended; faster
candidates that failed parity, or whose parity was never checked (no serial case to compare
with), are listed as such. Speedup is against the serial candidate with the same total cores
(workers x threads), batch and data options (:func:`parabench.analysis.ratios.find_baseline`; no
other run stands in), with a bootstrap CI over the samples of both (see
:mod:`parabench.analysis.stats`). A recommendation measured only on a busy machine (other
processes took cores the case needed, ``Result.machine.busy``) says so. The runner-up is
the best qualifying candidate of another method; the two differ significantly when a
two-sided Mann-Whitney test gives p < 0.05 (in time-to-target mode: the interval of the
ratio of their times, see :func:`parabench.analysis.time_to_target.speedup_to_target`).
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from parabench.analysis.figures import (
    BUSY_WARNING,
    group_key,
    machine_type,
    median_times,
    options_label,
    peak_memory,
    recorded_busy,
    seconds_per_sample,
)
from parabench.analysis.parity_text import parity_cell, parity_text, severity
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
from parabench.analysis.time_to_target import ToTarget, speedup_to_target, to_target
from parabench.case.result import Result
from parabench.identity import CaseKey, Scope

__all__ = ["Candidate", "Recommendation", "baseline_for", "candidates", "describe", "group_key",
           "median_times", "options_label", "parity_cell", "parity_text", "recommend",
           "seconds_per_sample", "times_to_target"]


def _median(values: Iterable[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


@dataclass(frozen=True, kw_only=True)
class Candidate:
    key: CaseKey
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
    #: time-to-target mode: its seconds to the target (None: the mode was off)
    to_target: ToTarget | None = None

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
        """Parity holds and, in time-to-target mode, it reached the target in its budget."""
        return self.parity in ("base", "ok") and (self.to_target is None or self.to_target.ok)

    @property
    def threads(self) -> int:
        return self.key[7]

    def label(self) -> str:
        each = " each" if self.workers > 1 else ""
        extra = f", {self.threads} thread{'s' if self.threads > 1 else ''}{each}"
        extra += "" if self.batch == "-" else f", batch {self.batch}"
        extra += "" if self.options == "-" else f", {self.options}"
        return f"{self.method} with {self.workers} worker{'s' if self.workers > 1 else ''}{extra}"


def _parity(method: str, rs: Sequence[Result]) -> tuple[str, float | None, float | None, str]:
    checked = [r.parity for r in rs if r.parity and r.parity.status in ("ok", "failed")]
    if not checked:  # a baseline run is checked only with work options on (compile, ...)
        return ("base", None, None, "base") if is_baseline(method) else (
            "unchecked", None, None, "-")
    worst = max(checked, key=severity)
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
    #: time-to-target mode: the scope ranked by it (``speedup`` and its CI are then the
    #: baseline's seconds over the best's); a configuration sooner than the recommended serial
    #: but within noise; parity held but the target was not reached in budget (faster by
    #: samples/s than the best)
    target_mode: bool = False
    within_noise: Candidate | None = None
    unreached_faster: tuple[Candidate, ...] = ()
    #: the machine type (:func:`~parabench.analysis.figures.machine_type`) when the results
    #: ran on several: each type is answered on its own, never one against another
    machine: str | None = None


def baseline_for(cand: Candidate, pool: Sequence[Candidate]) -> Candidate | None:
    """Serial with the same total cores, batch and data options (None: not in ``pool``)."""
    key = find_baseline(cand.key, [c.key for c in pool], total_cores(cand.workers, cand.threads))
    return next((c for c in pool if c.key == key), None)


def _scopes(results: Iterable[Result], baselines: Iterable[Result]
            ) -> dict[Scope, list[Candidate]]:
    """Candidates by scope (workload, device, profile); baselines that are not results join."""
    results = list(results)
    seen = {id(r) for r in results}
    pool = candidates([*results, *(b for b in baselines if id(b) not in seen)])
    scopes: dict[Scope, list[Candidate]] = defaultdict(list)
    for c in pool:
        scopes[c.key.scope].append(c)
    return scopes


def recommend(results: Iterable[Result], baselines: Iterable[Result] = ()) -> list[Recommendation]:
    """One recommendation per (workload, device, profile) with an ok case, in sorted order;
    where the results ran on several machine types (a cluster's nodes), one per type too."""
    results, baselines = list(results), list(baselines)
    types = sorted({t for r in results if (t := machine_type(r))})
    if len(types) <= 1:
        return [_recommend_scope(scope, cands)
                for scope, cands in sorted(_scopes(results, baselines).items())]
    def kind(r: Result) -> str:
        return machine_type(r) or "machine not recorded"

    return [replace(_recommend_scope(scope, cands), machine=k)
            for k in sorted({kind(r) for r in results})
            for scope, cands in sorted(_scopes([r for r in results if kind(r) == k],
                                               [b for b in baselines if kind(b) == k]).items())]


def times_to_target(results: Iterable[Result], baselines: Iterable[Result] = ()
                    ) -> dict[tuple, ToTarget]:
    """Every configuration's :class:`ToTarget` (those run in time-to-target mode), by key."""
    return {k: t for cands in _scopes(results, baselines).values()
            for k, t in to_target(cands).items()}


def _rank(cands: list[Candidate], target_mode: bool) -> list[Candidate]:
    if not target_mode:
        return sorted(cands, key=lambda c: (-c.throughput, c.key))
    return sorted(cands, key=lambda c: (
        c.to_target is None or c.to_target.seconds is None,
        c.to_target.seconds if c.to_target and c.to_target.seconds else 0.0,
        -c.throughput, c.key))


def _soonest_serial(base: Candidate, qualifying: list[Candidate]) -> Candidate:
    """``base``'s serial (the same method: tf_serial for TensorFlow's, batch and options) at
    the threads that reach the target soonest (``qualifying`` is ranked): a configuration
    within noise of serial at its own cores gives way to serial, and serial with fewer threads
    can be the sooner one (seq2seq quick: 1 thread 25.2 s, 2 threads 31.2 s, on ~1 core)."""
    same = (base.method, base.key.batch, base.key.options)
    return next((c for c in qualifying if (c.method, c.key.batch, c.key.options) == same), base)


def _recommend_scope(scope: Scope, cands: list[Candidate]) -> Recommendation:
    workload, device, profile = scope
    times = to_target(cands)
    target_mode = any(t.seconds is not None for t in times.values())
    cands = [replace(c, to_target=times.get(c.key)) for c in cands]
    ranked = _rank(cands, target_mode)
    qualifying = [c for c in ranked if c.qualifies]
    common = {"workload": workload, "device": device, "profile": profile,
              "target_mode": target_mode}
    if not qualifying:
        return Recommendation(**common, best=None,
                              failed_faster=tuple(c for c in ranked if c.parity == "failed"),
                              unchecked_faster=tuple(c for c in ranked
                                                     if c.parity == "unchecked"),
                              unreached_faster=tuple(c for c in ranked
                                                     if c.parity in ("base", "ok")))
    best, passed, tt_speed = qualifying[0], None, None
    base = best if is_baseline(best.method) else baseline_for(best, ranked)
    if target_mode and base is not None and base is not best and base.qualifies:
        tt_speed = speedup_to_target(base, base.to_target, best, best.to_target)
        if tt_speed is not None and tt_speed.within_noise:  # the simplest, when as soon
            best, passed, tt_speed = _soonest_serial(base, qualifying), best, None
    faster = [c for c in ranked if c.throughput > best.throughput] if target_mode else \
        ranked[:ranked.index(best)]
    speedup = ci = None
    if tt_speed is not None:
        speedup, ci = tt_speed.ratio, tt_speed.ci
    elif base is not None and not (target_mode and base is not best):
        speedup = throughput_speedup(best.throughput, base.throughput)
        ci = None if base is best else ratio_ci(best.samples.values, base.samples.values)
    runner = next((c for c in qualifying if c.method != best.method), None)
    p = testable = None
    if runner is not None and target_mode:
        vs = speedup_to_target(runner, runner.to_target, best, best.to_target)
        p, testable = (vs.p, True) if vs is not None else (None, False)
    elif runner is not None:
        p = mann_whitney_p(best.samples.values, runner.samples.values)
        testable = can_be_significant(len(best.samples.values), len(runner.samples.values))
    return Recommendation(
        **common, best=best, baseline=base,
        speedup=speedup, speedup_ci=ci, runner_up=runner, runner_up_p=p,
        significant=p is not None and p < ALPHA, testable=bool(testable),
        failed_faster=tuple(c for c in faster if c.parity == "failed"),
        unchecked_faster=tuple(c for c in faster if c.parity == "unchecked"),
        within_noise=passed,
        unreached_faster=tuple(c for c in faster if c.parity in ("base", "ok")
                               and not c.qualifies),
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
    if rec.machine is not None:
        scope += f" [{rec.machine}]"
    if rec.best is None:
        why = ("every faster case failed parity" if rec.failed_faster
               else "no configuration whose parity holds reached the target in its budget"
               if rec.unreached_faster
               else "no case's parity was checked: add --method serial to the sweep")
        lines = [f"{scope}: no recommendation: {why}"]
    elif rec.target_mode and rec.best.to_target is not None:
        lines = _describe_target(scope, rec)
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
    for c in rec.unreached_faster:
        why = c.to_target.reason if c.to_target else "not run to the target"
        lines.append(f"  not recommended (to target): {c.label()}, "
                     f"{c.throughput:,.0f} samples/s: {why}")
    return lines


def _ci(ci: tuple[float, float] | None, unit: str = "") -> str:
    return f" (95% CI {ci[0]:.2f}-{ci[1]:.2f}{unit})" if ci else ""


def _describe_target(scope: str, rec: Recommendation) -> list[str]:
    """Time-to-target mode: the best by its seconds to the target, against serial's."""
    b = rec.best
    t = b.to_target
    head = (f"{scope}: use {b.label()}: reaches the target in {t.seconds:.2f}s of training"
            f"{_ci(t.ci, 's')}")
    if rec.baseline is b:
        head += ", serial is the soonest here" if rec.within_noise is None else ""
    elif rec.speedup is not None:
        head += f", {rec.speedup:.2f}x sooner than serial{_ci(rec.speedup_ci, 'x')}"
    elif rec.baseline is not None:
        why = rec.baseline.to_target.text() if rec.baseline.to_target else "not run to it"
        head += f"; serial with the same cores did not qualify ({why})"
    else:
        head += f"; speedup unknown ({missing_hint(b.key, total_cores(b.workers, b.threads))})"
    start = f", start-up {t.startup_s:.1f}s apart" if t.startup_s is not None else ""
    lines = [head, f"  {t.basis()}; peak {_mem(b)}{start} [{b.samples.describe()}]"]
    if rec.within_noise is not None:
        w = rec.within_noise
        lines.append(f"  {w.label()} reached it in {w.to_target.seconds:.2f}s, within noise of "
                     "serial's (the interval of the ratio holds 1): serial, the simplest, is "
                     "recommended")
    if b.busy:
        lines.append(f"  {BUSY_WARNING}: re-run on a quiet machine before relying on it")
    if rec.runner_up is not None and rec.runner_up.to_target is not None:
        r = rec.runner_up
        verdict = "significant" if rec.significant else "not significant"
        p = f" ({p_text(rec.runner_up_p)})" if rec.runner_up_p is not None else ""
        lines.append(f"  runner-up: {r.label()}, {r.to_target.seconds:.2f}s to the target "
                     f"({r.to_target.seconds / t.seconds:.2f}x the best's time, "
                     f"{r.to_target.how}); difference {verdict}{p}")
    return lines
