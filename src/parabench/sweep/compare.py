"""How a method compares with its baseline: the one place for speedup, efficiency, quality gap.

Usage::

    base = baseline_of("tf_multiworker")            # "tf_serial"; "serial" for most methods
    speedup(baseline_s=2.0, method_s=0.5)           # 4.0: the method is 4x as fast
    efficiency(speedup=4.0, workers=8)              # 0.5
    gap = quality_gap(0.90, baseline=0.92, higher_is_better=True)   # -0.02: worse
    parity_holds(gap, tolerance=0.015)              # False

Sign convention (every module follows it): the **quality gap** is the method's quality minus
the baseline's, measured in the "higher is better" direction, so a *negative* gap means the
method is *worse* than its baseline, whatever the metric (for a loss, lower being better, the
gap is baseline loss minus method loss). Parity holds when the gap is at least ``-tolerance``.
Figures that must read the other way round (asv plots every ``track_*`` as lower is better)
use :func:`quality_shortfall`, defined as the negated gap, never a formula of their own.

**Speedup** is the baseline's time over the method's at equal work (or the method's throughput
over the baseline's): above 1 is faster. **Efficiency** is speedup per worker.

The baseline of a method is its ``baseline_method`` (``serial``; ``tf_serial`` for the
TensorFlow methods); a method is a baseline when it is its own baseline.
"""

from __future__ import annotations

BASELINE_METHOD = "serial"

#: parity tolerance of methods computing the same mathematics as their baseline (see
#: :mod:`parabench.sweep.parity` for why this much)
EXACT_TOLERANCE = 0.015
#: statistical parity: this many baseline seed-to-seed standard deviations ...
SPREAD_FACTOR = 3.0
#: ... but never less than this
MIN_STATISTICAL_TOLERANCE = 0.01


def baseline_of(method: str) -> str:
    """The method ``method`` is compared with: its ``baseline_method``, else serial."""
    from parabench.registry import methods  # the registry imports every method: late

    if method in methods:
        return getattr(methods.get(method), "baseline_method", BASELINE_METHOD)
    return BASELINE_METHOD


def is_baseline(method: str) -> bool:
    """Whether ``method`` is a baseline others are compared with (it is its own baseline)."""
    return baseline_of(method) == method


def speedup(baseline_s: float, method_s: float) -> float:
    """Baseline time / method time at equal work: 2.0 is twice as fast."""
    return baseline_s / method_s


def throughput_speedup(method_rate: float, baseline_rate: float) -> float:
    """Speedup from rates (samples/s): method throughput / baseline throughput."""
    return method_rate / baseline_rate


def slowdown(baseline_s: float, method_s: float) -> float:
    """The inverse of :func:`speedup` (method time / baseline time), for lower-is-better plots."""
    return method_s / baseline_s


def efficiency(speedup: float, workers: int) -> float:
    """Parallel efficiency: speedup per worker (1.0 is perfect scaling)."""
    return speedup / workers


def quality_gap(quality: float, baseline: float, higher_is_better: bool) -> float:
    """Method quality minus baseline quality, higher-is-better direction: negative is worse."""
    return quality - baseline if higher_is_better else baseline - quality


def quality_shortfall(quality: float, baseline: float, higher_is_better: bool) -> float:
    """How far the method falls short of its baseline: ``-quality_gap``, positive is worse."""
    return 0.0 - quality_gap(quality, baseline, higher_is_better)  # 0.0 -: no "-0.0"


def parity_tolerance(kind: str, baseline: float, higher_is_better: bool,
                     spread: float) -> float:
    """The largest shortfall parity accepts.

    ``kind`` "exact": :data:`EXACT_TOLERANCE`; "statistical": :data:`SPREAD_FACTOR` x the
    baseline's seed-to-seed ``spread``, at least :data:`MIN_STATISTICAL_TOLERANCE`. For a
    lower-is-better metric the tolerance is relative to the baseline's value.
    """
    tol = EXACT_TOLERANCE if kind == "exact" else max(SPREAD_FACTOR * spread,
                                                      MIN_STATISTICAL_TOLERANCE)
    return tol if higher_is_better else tol * abs(baseline)


def parity_holds(gap: float, tolerance: float) -> bool:
    """Parity's verdict: the method is not worse than its baseline by more than ``tolerance``."""
    return gap >= -tolerance
