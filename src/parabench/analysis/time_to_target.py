"""Time to the target quality for every configuration, on one scale: what the answer ranks by.

Usage::

    from parabench.analysis.recommend import candidates
    cands = candidates(results)         # one (workload, device, profile) scope's configurations
    tt = to_target(cands)               # {key: ToTarget}: those run with --target-quality
    base, best = cands[0], cands[1]
    t = tt[best.key]
    t.seconds, t.ci, t.how, t.text()    # 0.74, (0.66, 0.83), 'derived', '0.74s (1,408 ...)'
    t.text(short=True)                  # '0.74s ±12% derived': the compact table's cell
    sp = speedup_to_target(base, tt[base.key], best, tt[best.key])
    sp.ratio, sp.ci, sp.p               # base seconds / best seconds, its interval, p of "same"

A configuration's time-to-target is the samples it needs to reach the target quality divided
by its steady samples/s (the speed windows), so every row is timed the same way: evaluation is
off the clock, start-up is reported beside it (``startup_s``, with the imports a pre-started
interpreter did for a forked case added back: a fresh process pays them), never added in.

* **derived**: a configuration whose trajectory parity holds (its first steps' losses and
  weights match serial's; or, for a seed-exact forest, its predictions are identical) computes
  serial's mathematics, so it needs serial's samples: the median of the samples-to-target
  every serial run of the scope with the same batch measured (``Candidate`` results that
  reached the target). Its own samples-to-target is not used.
* **measured**: every other configuration (statistical methods: fedavg, histogram forests,
  Spark, BatchNorm models graded by quality): the median over its runs of each run's
  samples-to-target / that run's samples/s. Serial itself uses the same pooled samples as the
  derived figures (one mathematics, whatever its threads), so a derived configuration and
  serial differ by their speeds alone. "Serial" is each configuration's own baseline: the
  TensorFlow methods derive from tf_serial's samples (the Keras twin is another model).

The 95 % interval is on the log scale: the speed part from the two-level estimate over runs
and windows (:func:`parabench.analysis.levels.log_rate`, the run-to-run prior included), the
samples part from a bootstrap of the median over the runs that measured it (0 with one run:
repeats train the same seed, so their samples-to-target differs only by nondeterminism, which
the interval then does not see; ``runs`` says how many).

A configuration whose runs mostly did not reach the target, or that needed more than
:data:`BUDGET` times serial's samples, gets a ``reason`` and cannot be recommended.
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from parabench.analysis.levels import (
    BUSY_RUN_CV,
    RUN_CV,
    _within,
    level_ratio,
    log_rate,
    run_rates,
    t_cdf,
    t_quantile,
)
from parabench.analysis.ratios import is_baseline
from parabench.analysis.stats import pm_text
from parabench.case.bootstrap import ci_half_pct
from parabench.case.result import Result
from parabench.identity import baseline_of

#: the most samples a configuration may need, as a multiple of serial's samples-to-target,
#: and still be recommended
BUDGET = 2.0
CONFIDENCE = 0.95


@dataclass(frozen=True, kw_only=True)
class ToTarget:
    """One configuration's training seconds to the target (see the module docstring)."""

    seconds: float | None = None
    ci: tuple[float, float] | None = None
    #: "derived" (serial's samples at this speed) or "measured" (its own samples)
    how: str = ""
    #: the samples-to-target the seconds stand on (median)
    samples: float | None = None
    #: runs whose samples-to-target were used (serial's for a derived figure), and reached / ran
    runs: int = 0
    reached: int = 0
    ran: int = 0
    rate: float | None = None
    startup_s: float | None = None
    #: variance of log(seconds)
    log_var: float | None = None
    df: float = 1.0
    #: the seconds stand on serial's pooled samples (derived, or serial itself)
    on_serial_samples: bool = False
    #: why it has no time, or why it may not be recommended ('' when it may)
    reason: str = ""

    @property
    def ok(self) -> bool:
        return self.seconds is not None and not self.reason

    def text(self, short: bool = False) -> str:
        """The wide table's cell: '0.70s ±12% (1,408 samples derived, +2.2s start)' (± the
        half-width of its 95 % interval in % of the seconds, the larger side); 'not reached
        (10 ep)'; '1.30s ±9.1% (2,880 samples, +2.1s start) over budget'. ``short``: the
        compact table's, without the samples and start-up: '0.70s ±12% derived',
        '1.30s ±9.1% over budget'."""
        if self.seconds is None:
            epochs = re.search(r"(?:within|in) (\d+) epoch", self.reason)
            return f"not reached ({epochs.group(1)} ep)" if epochs else "not reached"
        start = f", +{self.startup_s:.1f}s start" if self.startup_s is not None else ""
        derived = " derived" if self.how == "derived" else ""
        pm = pm_text(ci_half_pct(self.seconds, self.ci))
        text = (f"{self.seconds:.2f}s{pm}{derived}" if short else
                f"{self.seconds:.2f}s{pm} ({self.samples:,.0f} samples{derived}{start})")
        if self.ran and self.reached < self.ran:
            text += f" {self.reached}/{self.ran} reached"
        return text + (" over budget" if self.reason else "")

    def basis(self) -> str:
        """How the figure was made, in words, for the recommendation."""
        if self.how == "derived":
            return (f"derived: serial's median {self.samples:,.0f} samples to the target over "
                    f"{self.runs} run(s) / {self.rate:,.0f} samples/s; licensed by trajectory "
                    "parity")
        return (f"measured: {self.samples:,.0f} samples to the target (median of "
                f"{self.runs} run(s)) / {self.rate:,.0f} samples/s")


@dataclass(frozen=True)
class ToTargetSpeedup:
    """``base`` seconds / ``best`` seconds (> 1: best is sooner), its interval and p."""

    ratio: float
    ci: tuple[float, float]
    p: float

    @property
    def within_noise(self) -> bool:
        return self.ci[0] <= 1.0 <= self.ci[1]


def _ttt_samples(r: Result) -> int | None:
    t = r.time_to_target
    return t.samples_to_target if t is not None and t.reached else None


def _samples_log_var(samples: Sequence[float]) -> float:
    """Bootstrap variance of the log median (0 with one)."""
    return _within([math.log(s) for s in samples if s > 0], seed=7)


def _serial_samples(cands: Sequence, batch: str, baseline: str) -> list[int]:
    """Samples-to-target of every run of ``baseline`` (serial; tf_serial for the TensorFlow
    methods: another model's mathematics) with this batch that reached the target."""
    return [s for c in cands if c.method == baseline and c.batch == batch
            for r in c.results if (s := _ttt_samples(r)) is not None]


def _licensed(c: object) -> bool:
    """Trajectory parity held on every checked run (or identical forest predictions)."""
    checked = [r.parity for r in c.results
               if r.parity and r.parity.status in ("ok", "failed")]
    return bool(checked) and all(
        p.status == "ok" and (p.basis == "trajectory" or (p.basis == "predictions"
                                                         and p.identical))
        for p in checked)


def _rate_side(c: object) -> tuple[float, float, float]:
    runs = run_rates(c.results)
    prior = BUSY_RUN_CV if c.busy else RUN_CV
    return log_rate(runs, prior) if runs else (math.log(c.throughput), 0.0, 1.0)


def _interval(seconds: float, log_var: float, df: float) -> tuple[float, float]:
    q = t_quantile(0.5 + CONFIDENCE / 2, max(df, 1.0)) * math.sqrt(log_var)
    return seconds * math.exp(-q), seconds * math.exp(q)


def _one(c: object, serial: list[int]) -> ToTarget | None:
    runs = [r.time_to_target for r in c.results if r.time_to_target is not None]
    if not runs or (any(t.reached for t in runs) and all(
            t.samples_to_target is None for t in runs if t.reached)):
        return None  # not this mode, or older results without samples-to-target
    # a fresh process's start-up: a case forked from a pre-started interpreter did its
    # imports there (facts.prestart_import_s), which the user's own run would pay
    starts = [r.time_to_target.startup_s + (r.facts.prestart_import_s or 0.0)
              for r in c.results
              if r.time_to_target is not None and r.time_to_target.startup_s is not None]
    common = {"ran": len(runs), "reached": sum(t.reached for t in runs), "rate": c.throughput,
              "startup_s": statistics.median(starts) if starts else None}
    ref = statistics.median(serial) if serial else None
    _, rate_var, df = _rate_side(c)
    base = is_baseline(c.method)
    own = [(s, r.samples_per_s) for r in c.results
           if (s := _ttt_samples(r)) is not None and r.samples_per_s]
    if ref is not None and ((base and own) or (not base and _licensed(c))):
        # serial's samples, pooled over every serial run of the batch (one mathematics)
        log_var = _samples_log_var(serial) + rate_var
        seconds = ref / c.throughput
        return ToTarget(seconds=seconds, ci=_interval(seconds, log_var, df),
                        how="measured" if base else "derived", samples=ref,
                        runs=len(serial), on_serial_samples=True, log_var=log_var,
                        df=df, **common)
    if 2 * len(own) <= len(runs):
        epochs = max(t.epochs_run for t in runs)
        why = runs[0].reason if len(runs) == 1 and runs[0].reason else (
            f"not reached in {len(runs) - len(own)} of {len(runs)} run(s) within {epochs} "
            "epoch(s)")
        return ToTarget(reason=why, **common)
    samples = statistics.median(s for s, _ in own)
    seconds = statistics.median(s / rate for s, rate in own)
    log_var = _samples_log_var([s for s, _ in own]) + rate_var
    reason = ""
    if ref is not None and samples > BUDGET * ref and not base:
        reason = (f"needs {samples:,.0f} samples, more than {BUDGET:g}x serial's {ref:,.0f} "
                  "(the budget)")
    return ToTarget(seconds=seconds, ci=_interval(seconds, log_var, df), how="measured",
                    samples=samples, runs=len(own), log_var=log_var, df=df,
                    reason=reason, **common)


def to_target(cands: Sequence) -> dict[tuple, ToTarget]:
    """Every candidate of one scope (``recommend.Candidate``) that ran in time-to-target
    mode: its :class:`ToTarget` (candidates without one are left out)."""
    out = {}
    for c in cands:
        t = _one(c, _serial_samples(cands, c.batch, baseline_of(c.method)))
        if t is not None:
            out[c.key] = t
    return out


def speedup_to_target(base: object, base_t: ToTarget | None, best: object,
                      best_t: ToTarget | None) -> ToTargetSpeedup | None:
    """How much sooner ``best`` reaches the target than ``base`` (two candidates and their
    figures), with its 95 % interval and the two-sided p of "equally soon". When neither
    figure stands on its own samples (both derived from serial's, or serial itself) the
    samples cancel and only the speeds are compared (the two-level test); otherwise the log
    variances add. None without both figures."""
    if base_t is None or best_t is None or base_t.seconds is None or best_t.seconds is None:
        return None
    if base_t.on_serial_samples and best_t.on_serial_samples:
        b_runs, n_runs = run_rates(base.results), run_rates(best.results)
        if b_runs and n_runs:
            est = level_ratio(b_runs, n_runs,
                              base_run_cv=BUSY_RUN_CV if base.busy else RUN_CV,
                              new_run_cv=BUSY_RUN_CV if best.busy else RUN_CV)
            return ToTargetSpeedup(base_t.seconds / best_t.seconds, est.ci, est.p)
    ratio = base_t.seconds / best_t.seconds
    var = (base_t.log_var or 0.0) + (best_t.log_var or 0.0)
    if var <= 0:
        return ToTargetSpeedup(ratio, (ratio, ratio), 1.0 if ratio == 1 else 0.0)
    df = min(base_t.df, best_t.df)
    z = abs(math.log(ratio)) / math.sqrt(var)
    lo, hi = _interval(ratio, var, df)
    return ToTargetSpeedup(ratio, (lo, hi), min(1.0, 2 * (1 - t_cdf(z, df))))
