"""The bootstrap CI of a median: how the case judges its own speed windows.

Usage::

    lo, hi = median_ci(rates)                 # 95 % percentile bootstrap CI of median(rates)
    ci_half_pct(median(rates), (lo, hi))      # its half-width in % of the median

The lifecycle adds windows while this interval is wide and the worker records it with the
result, so it lives with the case; :mod:`parabench.analysis.stats` re-exports both for the
readers of results (the table, the report, ``parabench compare``).
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Sequence

BOOTSTRAP_ROUNDS = 2000


def median_ci(values: Sequence[float], confidence: float = 0.95,
              rounds: int = BOOTSTRAP_ROUNDS, seed: int = 0) -> tuple[float, float] | None:
    """Percentile bootstrap CI of ``median(values)``; None with fewer than two values.

    Seeded, so the same windows always give the same interval.
    """
    if len(values) < 2:
        return None
    rng = random.Random(seed)
    medians = sorted(statistics.median(rng.choices(values, k=len(values)))
                     for _ in range(rounds))
    tail = (1 - confidence) / 2
    return (medians[int(tail * (rounds - 1))], medians[int(round((1 - tail) * (rounds - 1)))])


def ci_half_pct(median: float | None, ci: Sequence[float] | None) -> float | None:
    """The CI's half-width in percent of ``median``: the larger side, so an asymmetric
    interval is never reported narrower than it is (symmetric: (high - low) / 2)."""
    if not median or not ci or len(ci) != 2:
        return None
    low, high = ci
    return 100.0 * max(high - median, median - low) / abs(median)
