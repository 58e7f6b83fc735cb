"""Two sides' speed compared at both levels it varies on: runs (processes), windows in a run.

Usage::

    base_runs = run_rates(results)      # each ok result's steady window rates, one tuple a run
    new_runs = [[650.0, 660.0, 655.0], [640.0, 662.0, 651.0]]   # or any rates grouped by run
    est = level_ratio(base_runs, new_runs, base_run_cv=RUN_CV, new_run_cv=BUSY_RUN_CV)
    est.ratio, est.ci, est.p         # NEW/BASE, its 95 % interval, the two-sided p of "no change"
    est.describe()                   # '2 runs x 8 windows vs 2 runs x 3 windows; t, 11 df'

A run (one process: one repeat of a case, or one round of an interleaved rerun) has steady
speed windows; the windows of one run share its placement, memory layout and clock frequency,
so they are not independent samples of the code's speed. Each side's figure is the geometric
mean over runs of each run's median window rate, and its variance has two parts:

* **within a run**: the bootstrap variance of the log median over the run's windows, averaged
  over the runs (``w``);
* **between runs**: the runs' own spread of log medians less ``w`` (what the windows already
  explain), pooled with a prior run-to-run CV worth :data:`PRIOR_RUNS` runs. With one run per
  side the between-run spread is unseen, and the prior alone says what it is; with many runs
  their own spread dominates. :data:`RUN_CV` is the default prior, :data:`BUSY_RUN_CV` the one
  for a side measured on a busy machine (the figures behind both: docs/measurements.md).

The side's variance is ``(between + w) / runs``; the log ratio NEW/BASE gets a Student t
interval with ``PRIOR_RUNS`` degrees of freedom per side that has a prior plus the runs' own
(``runs - 1`` per side), and ``p`` is the same t test's two-sided p, so ``p < 0.05`` exactly
when the 95 % interval excludes 1. With ``paired`` (an interleaved rerun: run i of each side ran
in round i), the between-run part is the spread of the rounds' differences instead, pooled with
both sides' priors, so a drift shared by a round's two runs cancels. From
:data:`~parabench.analysis.signflip.MIN_ROUNDS` rounds on, a paired estimate is instead the
exact sign-flip test on the trimmed mean of the rounds' differences
(:mod:`parabench.analysis.signflip`): no prior, and a round that another process spoiled
does not move it. A resampling bootstrap over
runs would need no prior, but with two runs per side it sees half the between-run variance and
no more than the two values: two A/A runs per side would read significant a third of the time.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from parabench.analysis.signflip import MIN_ROUNDS, sign_flip
from parabench.case.result import Result

#: prior run-to-run coefficient of variation of one run's median throughput (quiet machine)
RUN_CV = 0.06
#: the prior for a side measured on a busy machine (other processes took its cores)
BUSY_RUN_CV = 0.15
#: how many runs' worth of evidence the prior counts for (its degrees of freedom)
PRIOR_RUNS = 4
CONFIDENCE = 0.95
_BOOT_ROUNDS = 400


@dataclass(frozen=True, kw_only=True)
class LevelEstimate:
    """NEW/BASE throughput from runs and their windows (see the module docstring)."""

    ratio: float
    ci: tuple[float, float]
    p: float
    #: t's degrees of freedom and the standard error of the log ratio (the sign-flip test:
    #: rounds - 1, and nan)
    df: float
    se: float
    base_runs: int
    new_runs: int
    #: windows per run on each side (their median when runs differ)
    base_windows: int
    new_windows: int
    #: the runs' own run-to-run CV on each side (None: one run) and the prior each side used
    base_seen_cv: float | None
    new_seen_cv: float | None
    base_prior_cv: float
    new_prior_cv: float
    #: run i of each side ran in the same round (level_ratio's ``paired``)
    paired: bool = False
    #: the test behind ci and p: "t", or the sign-flip test's description
    test: str = "t"

    def describe(self) -> str:
        """'2 runs x 8 windows vs 2 runs x 8 windows; t, 11 df' (BASE first; 'paired by
        round, t, ...' when paired; 'paired by round, exact sign-flip test, 25%-trimmed
        mean' from MIN_ROUNDS rounds)."""
        test = f"t, {self.df:.0f} df" if self.test == "t" else self.test
        return (f"{_side(self.base_runs, self.base_windows)} vs "
                f"{_side(self.new_runs, self.new_windows)}; "
                f"{'paired by round, ' if self.paired else ''}{test}")

    def spread(self) -> str:
        """'run-to-run CV seen 1.2% / 0.8%, prior 6% / 6%' (BASE / NEW; '-': one run)."""
        seen = " / ".join("-" if s is None else f"{s:.1%}"
                          for s in (self.base_seen_cv, self.new_seen_cv))
        return (f"run-to-run CV seen {seen}, prior {self.base_prior_cv:.0%} / "
                f"{self.new_prior_cv:.0%}")


def _side(runs: int, windows: int) -> str:
    return (f"{runs} run{'s' if runs != 1 else ''} x {windows} "
            f"window{'s' if windows != 1 else ''}")


def run_rates(results: Sequence[Result]) -> list[tuple[float, ...]]:
    """Each ok result's steady throughputs (samples/s), one tuple per run: its speed windows;
    without windows its steady epochs; without those its ``samples_per_s``."""
    runs = []
    for r in results:
        if r.status != "ok":
            continue
        if rates := r.window_rates:
            runs.append(tuple(rates))
        elif r.samples_per_epoch and (steady := [t for t in r.steady_epoch_s if t > 0]):
            runs.append(tuple(r.samples_per_epoch / t for t in steady))
        elif r.samples_per_s:
            runs.append((float(r.samples_per_s),))
    return runs


def _within(logs: Sequence[float], seed: int) -> float:
    """Bootstrap variance of the median of ``logs`` (0 with fewer than two)."""
    if len(logs) < 2:
        return 0.0
    rng = random.Random(seed)
    medians = [statistics.median(rng.choices(logs, k=len(logs))) for _ in range(_BOOT_ROUNDS)]
    return statistics.pvariance(medians)


@dataclass(frozen=True)
class _Side:
    meds: list[float]  # each run's log median rate
    within: list[float]  # each run's bootstrap variance of it
    prior: float  # the prior run-to-run variance (log scale)
    mean: float  # mean over runs of the log median rate
    var: float  # variance of ``mean``
    df: float  # the degrees of freedom its between-run part carries
    runs: int
    windows: int
    seen_cv: float | None


def _summarize(runs: Sequence[Sequence[float]], prior_cv: float) -> _Side:
    runs = [[v for v in run if v > 0] for run in runs]
    runs = [run for run in runs if run]
    if not runs:
        raise ValueError("no throughput on one side")
    logs = [[math.log(v) for v in run] for run in runs]
    meds = [statistics.median(run) for run in logs]
    within = [_within(run, seed=i) for i, run in enumerate(logs)]
    w = statistics.fmean(within)
    n = len(runs)
    seen = statistics.variance(meds) if n >= 2 else None
    between_seen = max(0.0, seen - w) if seen is not None else 0.0
    prior = math.log1p(prior_cv) ** 2
    nu0 = PRIOR_RUNS if prior_cv > 0 else 0
    df = nu0 + n - 1
    between = (nu0 * prior + (n - 1) * between_seen) / df if df else 0.0
    return _Side(meds=meds, within=within, prior=prior, mean=statistics.fmean(meds),
                 var=(between + w) / n, df=df, runs=n,
                 windows=round(statistics.median(len(run) for run in runs)),
                 seen_cv=None if seen is None else math.expm1(math.sqrt(seen)))


def log_rate(runs: Sequence[Sequence[float]], prior_cv: float = RUN_CV
             ) -> tuple[float, float, float]:
    """One side alone: the mean over runs of each run's log median rate, the variance of
    that mean (between runs, pooled with the prior, plus within), and its degrees of freedom;
    ``runs`` as :func:`level_ratio` takes them. ValueError without a positive rate."""
    side = _summarize(runs, prior_cv)
    return side.mean, side.var, float(side.df or max(1, side.windows - 1))


def level_ratio(base: Sequence[Sequence[float]], new: Sequence[Sequence[float]], *,
                base_run_cv: float = RUN_CV, new_run_cv: float = RUN_CV,
                confidence: float = CONFIDENCE, paired: bool = False) -> LevelEstimate:
    """NEW/BASE throughput with its interval and p (module docstring): ``base`` and ``new``
    hold each run's window rates (samples/s; larger is faster). ``paired``: run i of each side
    ran in the same round (interleaved ABAB), so a drift common to a round cancels: from
    MIN_ROUNDS rounds the sign-flip test on the rounds' differences decides (the ratio is
    their trimmed mean); below, the between-run part is the spread of the rounds'
    differences, pooled with the sum of both sides' priors. ValueError when a side has no
    positive rate, or paired sides differ in rounds."""
    b, n = _summarize(base, base_run_cv), _summarize(new, new_run_cv)
    d = n.mean - b.mean
    if paired and b.runs == n.runs >= MIN_ROUNDS:
        test = sign_flip([y - x for x, y in zip(b.meds, n.meds, strict=True)], confidence)
        return LevelEstimate(ratio=math.exp(test.shift),
                             ci=(math.exp(test.ci[0]), math.exp(test.ci[1])), p=test.p,
                             df=b.runs - 1, se=math.nan, base_runs=b.runs, new_runs=n.runs,
                             base_windows=b.windows, new_windows=n.windows,
                             base_seen_cv=b.seen_cv, new_seen_cv=n.seen_cv,
                             base_prior_cv=base_run_cv, new_prior_cv=new_run_cv,
                             paired=True, test=test.describe())
    if paired:
        se, df = _paired(b, n)
    else:
        se = math.sqrt(b.var + n.var)
        df = b.df + n.df
    # one run a side and no prior: only the windows speak (their count sets the df)
    df = df or max(1, b.runs * b.windows + n.runs * n.windows - 2)
    if se == 0:
        ci, p = (math.exp(d), math.exp(d)), (1.0 if d == 0 else 0.0)
    else:
        q = t_quantile(0.5 + confidence / 2, df)
        ci = (math.exp(d - q * se), math.exp(d + q * se))
        p = min(1.0, 2 * (1 - t_cdf(abs(d) / se, df)))
    return LevelEstimate(ratio=math.exp(d), ci=ci, p=p, df=df, se=se, base_runs=b.runs,
                         new_runs=n.runs, base_windows=b.windows, new_windows=n.windows,
                         base_seen_cv=b.seen_cv, new_seen_cv=n.seen_cv,
                         base_prior_cv=base_run_cv, new_prior_cv=new_run_cv, paired=paired)


def _paired(b: _Side, n: _Side) -> tuple[float, float]:
    """The standard error of the mean round difference, and its degrees of freedom."""
    if b.runs != n.runs:
        raise ValueError(f"paired rounds differ: {b.runs} BASE runs with throughput, "
                         f"{n.runs} NEW")
    rounds = b.runs
    diffs = [y - x for x, y in zip(b.meds, n.meds, strict=True)]
    w = statistics.fmean(b.within) + statistics.fmean(n.within)
    seen = max(0.0, statistics.variance(diffs) - w) if rounds >= 2 else 0.0
    prior = b.prior + n.prior
    nu0 = PRIOR_RUNS if prior > 0 else 0
    df = nu0 + rounds - 1
    between = (nu0 * prior + (rounds - 1) * seen) / df if df else 0.0
    return math.sqrt((between + w) / rounds), df


def _betacf(a: float, b: float, x: float) -> float:
    """The continued fraction of the regularized incomplete beta (modified Lentz)."""
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1)
    d = 1 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        for num in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                    -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
            d = 1 + num * d
            d = 1 / (d if abs(d) > tiny else tiny)
            c = 1 + num / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1) < 1e-15:
            break
    return h


def _betainc(a: float, b: float, x: float) -> float:
    """Regularized incomplete beta I_x(a, b)."""
    if x <= 0:
        return 0.0
    if x >= 1:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
                     + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1) / (a + b + 2):
        return front * _betacf(a, b, x) / a
    return 1 - front * _betacf(b, a, 1 - x) / b


def t_cdf(t: float, df: float) -> float:
    """Student t's cumulative distribution (scipy.stats is seconds to import)."""
    tail = 0.5 * _betainc(df / 2, 0.5, df / (df + t * t))
    return 1 - tail if t >= 0 else tail


def t_quantile(prob: float, df: float) -> float:
    """The ``prob`` quantile of Student t (bisection on :func:`t_cdf`)."""
    if prob == 0.5:
        return 0.0
    if prob < 0.5:
        return -t_quantile(1 - prob, df)
    low, high = 0.0, 1.0
    while t_cdf(high, df) < prob:
        high *= 2
    for _ in range(100):
        mid = (low + high) / 2
        low, high = (mid, high) if t_cdf(mid, df) < prob else (low, mid)
    return (low + high) / 2
