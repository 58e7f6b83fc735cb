"""The interleaved rerun's test: an exact sign-flip test on the trimmed mean of the rounds.

Usage::

    rounds = [(1000, 830), (990, 845), (1010, 820), (980, 1290), (1000, 835), (995, 828),
              (1005, 840), (990, 832)]               # (BASE, NEW) samples/s in each round
    diffs = [math.log(n / b) for b, n in rounds]     # each round's log(NEW/BASE) throughput
    test = sign_flip(diffs)                           # needs MIN_ROUNDS rounds to speak
    math.exp(test.shift), test.ci, test.p             # NEW/BASE, its 95 % interval, two-sided p
    test.describe()                                   # 'exact sign-flip test, 25%-trimmed mean'
    p_value(diffs)                                    # the same p, without the interval

An interleaved rerun (``parabench compare --rerun``) measures both versions once in every
round, so each round gives one difference of log throughputs, and the rounds are the unit of
evidence. With the same code on both sides, and the sides' order alternating (ABBA), a
round's difference is as likely to be ``+d`` as ``-d``: every assignment of signs to the
observed magnitudes is equally likely, and the p-value is the share of the ``2**n``
assignments whose statistic is at least as far from 0 as the observed one. That is exact for
any ``n`` and any distribution, ties included, with no prior: no normal approximation and no
assumed run-to-run spread.

The statistic is the **trimmed mean** (a quarter of the rounds dropped at each end,
:data:`TRIM`): on a busy machine a round where another process took one side's cores reads
0.3x or 3x, and one such round moves a mean (and the t test's spread) by more than the
slowdown being looked for; the trimmed mean keeps its efficiency on a quiet machine and does
not move for those rounds. The interval is the test inverted: every shift the test does not
reject at the level asked for. Above :data:`EXACT_MAX` rounds the ``2**n`` assignments are
sampled (:data:`DRAWS` of them, a fixed seed) and the p-value counts the observed one.
Below :data:`MIN_ROUNDS` rounds no assignment can be rare enough to reject at 5 % once a
quarter is trimmed, so callers use another test there.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

#: the share of rounds dropped at each end before averaging
TRIM = 0.25
#: the fewest rounds with which the test can reject "no change" at 5 %
MIN_ROUNDS = 7
#: up to this many rounds every sign assignment is enumerated (2**16 = 65,536)
EXACT_MAX = 16
#: assignments sampled above EXACT_MAX rounds
DRAWS = 1 << 16
_BISECTIONS = 40


@dataclass(frozen=True)
class SignFlip:
    """The test's answer (log scale: ``shift`` is the trimmed mean of log(NEW/BASE))."""

    shift: float
    ci: tuple[float, float]
    p: float
    rounds: int
    exact: bool

    def describe(self) -> str:
        """'exact sign-flip test, 25%-trimmed mean' (or '65,536 sampled sign flips, ...')."""
        how = "exact sign-flip test" if self.exact else f"{DRAWS:,} sampled sign flips"
        return f"{how}, {TRIM:.0%}-trimmed mean"


def trimmed_mean(values: np.ndarray) -> np.ndarray:
    """Mean of the middle of each row (the last axis), :data:`TRIM` dropped at each end."""
    n = values.shape[-1]
    k = math.floor(TRIM * n)
    return np.sort(values, axis=-1)[..., k:n - k].mean(axis=-1)


@functools.lru_cache(maxsize=8)
def _signs(n: int) -> tuple[np.ndarray, bool]:
    """The sign assignments: all 2**n (exact) up to EXACT_MAX, else DRAWS sampled ones."""
    if n <= EXACT_MAX:
        bits = (np.arange(1 << n)[:, None] >> np.arange(n)) & 1
        return (2 * bits - 1).astype(float), True
    rng = np.random.default_rng(0)
    return rng.choice((-1.0, 1.0), size=(DRAWS, n)), False


def p_value(diffs: Sequence[float] | np.ndarray) -> float:
    """The test's two-sided p alone (no interval: a fraction of :func:`sign_flip`'s cost)."""
    diffs = np.asarray(diffs, dtype=float)
    signs, exact = _signs(len(diffs))
    observed = abs(float(trimmed_mean(diffs)))
    null = np.abs(trimmed_mean(signs * np.abs(diffs)))
    # a relative tolerance so that the observed assignment always counts as "as far"
    hits = int(np.count_nonzero(null >= observed * (1 - 1e-9) - 1e-15))
    return hits / len(signs) if exact else (hits + 1) / (len(signs) + 1)


def sign_flip(diffs: Sequence[float], confidence: float = 0.95) -> SignFlip:
    """The two-sided test of "no change" on the rounds' differences (module docstring), and
    the interval of shifts it does not reject. ValueError with fewer than MIN_ROUNDS."""
    x = np.asarray(diffs, dtype=float)
    if len(x) < MIN_ROUNDS:
        raise ValueError(f"{len(x)} round(s): the sign-flip test needs {MIN_ROUNDS}")
    alpha = 1 - confidence
    centre = float(trimmed_mean(x))
    span = float(x.max() - x.min()) + 1e-12

    def accepted(shift: float) -> bool:
        return p_value(x - shift) >= alpha

    def edge(outside: float) -> float:
        inside = centre  # the test never rejects the estimate itself (p = 1)
        for _ in range(_BISECTIONS):
            mid = (inside + outside) / 2
            inside, outside = (mid, outside) if accepted(mid) else (inside, mid)
        return (inside + outside) / 2

    low_out, high_out = float(x.min()) - span, float(x.max()) + span
    lo = edge(low_out) if not accepted(low_out) else -math.inf
    hi = edge(high_out) if not accepted(high_out) else math.inf
    return SignFlip(shift=centre, ci=(lo, hi), p=p_value(x), rounds=len(x),
                    exact=len(x) <= EXACT_MAX)
