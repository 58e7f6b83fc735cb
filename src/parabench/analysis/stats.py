"""Statistics the report and the recommendation read: samples, CIs, significance, Amdahl.

Usage::

    s = throughput_samples(results)        # per-repeat throughputs, or steady windows of one run
    lo, hi = median_ci(s.values)                      # 95 % bootstrap CI of the median
    rate_text(50072.0, (48900.0, 51600.0))            # '50,072 ±3.1%' (larger side of the CI)
    pm_text(12.4)                                     # ' ±12%': the same ± for any figure
    lo, hi = ratio_ci(s.values, base.values)          # 95 % bootstrap CI of the median ratio
    p = mann_whitney_p(s.values, base.values)         # two-sided; 1.0 when it cannot be computed
    fit = amdahl_fit({1: 10.0, 2: 5.6, 4: 3.4})       # epoch time per worker count
    lo, hi = wilson(19, 20)                           # 95 % Wilson interval of a rate, 19/20

Throughput is samples per second. With two or more repeats of a case the samples are the
per-repeat throughputs (repeats are independent runs); with one repeat they are the steady
speed windows of that run (the warm-up window dropped; results without windows: the steady
epochs, the first dropped), which share a process and so understate the run-to-run spread:
reports say which was used (``Samples.unit``). ``parabench compare`` judges speed at both levels
instead, runs and the windows within each (:mod:`parabench.analysis.levels`).
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

# the case judges its windows by these (parabench.case.bootstrap); re-exported for readers
from parabench.case.bootstrap import BOOTSTRAP_ROUNDS, ci_half_pct, median_ci  # noqa: F401
from parabench.case.result import Result

ALPHA = 0.05


@dataclass(frozen=True, kw_only=True)
class Samples:
    values: tuple[float, ...]
    #: "repeat" (independent runs), "window" (steady speed windows of one run) or "epoch"
    #: (steady epochs of one run without windows)
    unit: str

    @property
    def median(self) -> float | None:
        return statistics.median(self.values) if self.values else None

    def describe(self) -> str:
        return f"{len(self.values)} {self.unit}{'s' if len(self.values) != 1 else ''}"


def rate_text(median: float | None, ci: Sequence[float] | None = None) -> str:
    """'50,072 ±3.1%' (one decimal below 10 %, whole percent above); '50,072' without a CI;
    '-' without a figure."""
    if median is None:
        return "-"
    return f"{median:,.0f}{pm_text(ci_half_pct(median, ci))}"


def pm_text(pct: float | None) -> str:
    """' ±3.0%' (one decimal below 10 %, whole percent above); '' without a CI."""
    if pct is None:
        return ""
    return f" ±{pct:.1f}%" if pct < 10 else f" ±{pct:.0f}%"


def windows_text(r: Result) -> str:
    """'8 windows of 415 steps' (a fit/round/epoch for other units); '' without windows."""
    n = len(r.window_rates)
    if not n:
        return ""
    unit, steps = (r.window.unit, r.window.steps) if r.window else ("steps", None)
    what = f"{steps} steps" if unit == "steps" and steps else f"one {unit}"
    trained = " trained for quality" if r.window and r.window.from_training else ""
    return f"{n} window{'s' if n != 1 else ''} of {what}{trained}"


def _epoch_rates(r: Result) -> list[float]:
    """Samples per second of each steady window of one result (older results: of each
    steady epoch)."""
    if rates := r.window_rates:
        return rates
    per_epoch = r.samples_per_epoch
    if not per_epoch and r.samples_per_s and r.median_epoch_s:
        per_epoch = r.samples_per_s * r.median_epoch_s
    if not per_epoch:
        return [1.0 / t for t in r.steady_epoch_s if t > 0]  # epochs per second
    return [per_epoch / t for t in r.steady_epoch_s if t > 0]


def throughput_samples(results: Sequence[Result]) -> Samples:
    """The throughput samples of one case's ok results (see the module docstring)."""
    ok = [r for r in results if r.status == "ok"]
    if len(ok) >= 2:
        values = []
        for r in ok:
            rates = _epoch_rates(r)
            if r.samples_per_s:
                values.append(float(r.samples_per_s))
            elif rates:
                values.append(statistics.median(rates))
        return Samples(values=tuple(values), unit="repeat")
    if ok:
        unit = "window" if ok[0].window_rates else "epoch"
        return Samples(values=tuple(_epoch_rates(ok[0])), unit=unit)
    return Samples(values=(), unit="epoch")


def _u_statistic(a: Sequence[float], b: Sequence[float]) -> float:
    return sum(1.0 if x > y else 0.5 if x == y else 0.0 for x in a for y in b)


#: the largest number of equally likely assignments enumerated exactly (C(m + n, m))
EXACT_LIMIT = 10**7


def _exact_p(a: Sequence[float], b: Sequence[float]) -> float:
    """Two-sided permutation p of U: twice the smaller tail, over the C(m + n, m) equally
    likely ways to split the pooled values into samples of sizes m and n, of U at or beyond
    the observed one (scipy's convention). Ties are kept (a tie counts half in U), so this
    is exact with ties too, where the normal approximation overstates small-sample evidence.

    Dynamic programming over the groups of equal values: taking k of a group of t into the
    first sample, in C(t, k) ways, adds k times the group's doubled midrank to twice its rank
    sum (integers throughout).
    """
    m, n = len(a), len(b)
    values = sorted([*a, *b])
    groups: list[tuple[int, int]] = []  # (size, doubled midrank)
    i = 0
    while i < len(values):
        j = i
        while j < len(values) and values[j] == values[i]:
            j += 1
        groups.append((j - i, i + 1 + j))  # midrank (i+1 + j) / 2, doubled
        i = j
    # ways[k][r2]: ways to put k values into the first sample with doubled rank sum r2
    ways: list[dict[int, int]] = [{0: 1}] + [{} for _ in range(m)]
    for size, rank2 in groups:
        for k in range(m, 0, -1):
            for take in range(1, min(size, k) + 1):
                mult = math.comb(size, take)
                for r2, c in ways[k - take].items():
                    key = r2 + take * rank2
                    ways[k][key] = ways[k].get(key, 0) + c * mult
    # U = rank sum - m (m + 1) / 2, so 2U = r2 - m (m + 1): integers, compared exactly
    observed = round(2 * _u_statistic(a, b))
    low = sum(c for r2, c in ways[m].items() if r2 - m * (m + 1) <= observed)
    high = sum(c for r2, c in ways[m].items() if r2 - m * (m + 1) >= observed)
    return min(1.0, 2 * min(low, high) / math.comb(m + n, m))


def mann_whitney_p(a: Sequence[float], b: Sequence[float]) -> float:
    """Two-sided Mann-Whitney U p-value; 1.0 without data or when all values are equal.

    Exact (the permutation distribution, ties included) while C(m + n, m) <= EXACT_LIMIT;
    otherwise the normal approximation with tie and continuity corrections. Written here
    because importing scipy.stats costs seconds, more than a whole report.
    """
    m, n = len(a), len(b)
    if not m or not n or len(set(a) | set(b)) == 1:
        return 1.0
    if math.comb(m + n, m) <= EXACT_LIMIT:
        return _exact_p(a, b)
    u = _u_statistic(a, b)
    values = sorted([*a, *b])
    ties = [values.count(v) for v in set(values)]
    total = m + n
    sigma2 = m * n / 12 * ((total + 1) - sum(t**3 - t for t in ties) / (total * (total - 1)))
    if sigma2 <= 0:
        return 1.0
    z = (abs(u - m * n / 2) - 0.5) / math.sqrt(sigma2)
    return min(1.0, math.erfc(max(z, 0.0) / math.sqrt(2)))


def p_text(p: float, alpha: float = ALPHA) -> str:
    """``p=0.031`` with as many digits as keep it on its own side of ``alpha``: a p just above
    the threshold never prints as the threshold (0.0504 is ``p=0.0504``, not ``p=0.05``), and a
    tiny one prints as ``p<0.001`` rather than a rounded ``p=0.00``; none prints as alpha
    itself unless it is."""
    if p < 0.001:
        return "p<0.001"
    for digits in range(2, 7):
        shown = round(p, digits)
        if (shown < alpha) == (p < alpha) and (shown != alpha or p == alpha) and shown > 0:
            return f"p={shown:.{digits}f}"
    return f"p={p:.6f}"


def can_be_significant(n_a: int, n_b: int, alpha: float = ALPHA) -> bool:
    """Whether any ordering of n_a vs n_b samples reaches p < alpha (exact two-sided test).

    The smallest two-sided p is 2 / C(n_a + n_b, n_a): 2 vs 2 samples can never show a
    difference (p >= 0.33), 4 vs 4 can (0.029).
    """
    from math import comb

    return n_a > 0 and n_b > 0 and 2 / comb(n_a + n_b, n_a) < alpha


def ratio_ci(
    num: Sequence[float], den: Sequence[float], confidence: float = 0.95,
    rounds: int = BOOTSTRAP_ROUNDS, seed: int = 0,
) -> tuple[float, float] | None:
    """Percentile bootstrap CI of median(num) / median(den); None without samples.

    Seeded, so a report rendered twice shows the same interval.
    """
    if not num or not den:
        return None
    rng = random.Random(seed)
    ratios = []
    for _ in range(rounds):
        n = statistics.median(rng.choices(num, k=len(num)))
        d = statistics.median(rng.choices(den, k=len(den)))
        if d > 0:
            ratios.append(n / d)
    if not ratios:
        return None
    ratios.sort()
    tail = (1 - confidence) / 2
    lo = ratios[int(tail * (len(ratios) - 1))]
    hi = ratios[int(round((1 - tail) * (len(ratios) - 1)))]
    return lo, hi


@dataclass(frozen=True, kw_only=True)
class AmdahlFit:
    """T(n) = T1 * (f + (1 - f) / n), fitted by least squares on epoch time vs 1/n."""

    serial_fraction: float
    t1: float
    measured_workers: tuple[int, ...]

    def time(self, workers: float) -> float:
        return self.t1 * (self.serial_fraction + (1 - self.serial_fraction) / workers)

    @property
    def predict_workers(self) -> int:
        """Where the report predicts: twice the largest measured count."""
        return 2 * max(self.measured_workers)


def wilson(hits: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """The Wilson score interval of the rate ``hits / n`` (95 % at the default ``z``; NaNs
    for n = 0): the harnesses' coverage and alarm rates."""
    if n == 0:
        return (math.nan, math.nan)
    phat = hits / n
    centre = (phat + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(phat * (1 - phat) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def amdahl_fit(times: dict[int, float]) -> AmdahlFit | None:
    """Fit Amdahl's law to median epoch times per worker count; None below 3 counts.

    T(n) = a + b / n is linear in 1/n, so ordinary least squares gives a and b; the serial
    fraction is a / (a + b), clipped to [0, 1] (noise can push a below zero).
    """
    points = [(1.0 / n, t) for n, t in sorted(times.items()) if t > 0]
    if len(points) < 3:
        return None
    xs, ys = zip(*points, strict=True)
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    if sxx == 0:
        return None
    b = sum((x - mx) * (y - my) for x, y in points) / sxx
    a = my - b * mx
    t1 = a + b
    if t1 <= 0:
        return None
    f = min(1.0, max(0.0, a / t1))
    return AmdahlFit(serial_fraction=f, t1=t1, measured_workers=tuple(sorted(times)))
