"""The interleaved rerun's sign-flip test: exact, robust to spoiled rounds, used by compare."""

from __future__ import annotations

import itertools
import math
import random
import statistics

import numpy as np
import pytest

from parabench.analysis.compare import judge_speed
from parabench.analysis.signflip import MIN_ROUNDS, TRIM, p_value, sign_flip
from parabench.analysis.stats import ALPHA

# Measured: mlp/serial_slow, 16 interleaved rounds on a 2-core machine kept busy by two
# spinners (docs/gate/rounds16-load, 2026-11-27), NEW doing 20 % more work per iteration.
# Each figure is one round's NEW/BASE samples/s, in round order; in four rounds the load hit
# BASE instead.
LOADED_20PCT = [1.55673, 0.83151, 0.81856, 0.85005, 0.84068, 0.8405, 0.85706, 1.34634, 0.79155,
                1.07225, 0.80149, 0.81783, 0.80666, 0.83078, 0.81751, 1.10631]


def _brute_p(diffs: list[float]) -> float:
    """The same p by enumeration in plain Python (an independent count)."""
    n = len(diffs)
    k = math.floor(TRIM * n)

    def tmean(xs: list[float]) -> float:
        return statistics.fmean(sorted(xs)[k:n - k])

    observed = abs(tmean(diffs))
    hits = sum(abs(tmean([s * abs(d) for s, d in zip(signs, diffs, strict=True)]))
               >= observed - 1e-12 for signs in itertools.product((-1, 1), repeat=n))
    return hits / 2 ** n


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_p_is_the_share_of_sign_assignments_as_extreme(seed: int) -> None:
    rng = random.Random(seed)
    diffs = [rng.gauss(0.03, 0.05) for _ in range(9)]
    assert sign_flip(diffs).p == pytest.approx(_brute_p(diffs), abs=1e-12)


def test_all_rounds_one_way_gives_the_smallest_p_the_rounds_allow() -> None:
    """Seven rounds all slower: only the assignments that keep the trimmed middle on one
    side are as extreme; six rounds can never reach 5 %, so the test refuses them."""
    diffs = [-0.10, -0.12, -0.09, -0.11, -0.13, -0.08, -0.10]
    assert sign_flip(diffs).p == pytest.approx(_brute_p(diffs))
    assert sign_flip(diffs).p < ALPHA
    with pytest.raises(ValueError, match=f"needs {MIN_ROUNDS}"):
        sign_flip(diffs[:6])


def test_the_interval_excludes_zero_exactly_when_p_is_below_alpha() -> None:
    rng = random.Random(5)
    seen = set()
    for shift in (0.0, 0.02, 0.04, 0.08):
        for _ in range(4):
            test = sign_flip([rng.gauss(shift, 0.05) for _ in range(10)])
            lo, hi = test.ci
            assert lo <= test.shift <= hi
            excluded = not lo <= 0 <= hi
            assert excluded is (test.p < ALPHA), (test.p, test.ci)
            seen.add(excluded)
    assert seen == {True, False}  # both sides of the boundary were exercised


@pytest.mark.parametrize("noise", ["normal", "spoiled"])
def test_same_code_is_flagged_at_most_alpha_of_the_time(noise: str) -> None:
    """A/A rounds (symmetric by the ABBA order): the exact test's false-alarm rate is at most
    ALPHA, also when a fifth of the rounds are spoiled 2-3x by another process."""
    rng = np.random.default_rng(3)
    flagged = 0
    trials = 400
    for _ in range(trials):
        diffs = rng.normal(0, 0.05, 10)
        if noise == "spoiled":
            hit = rng.random(10) < 0.2
            diffs[hit] += rng.choice((-1, 1), hit.sum()) * rng.uniform(0.7, 1.1, hit.sum())
        flagged += p_value(diffs) < ALPHA
    # exact: E[rate] <= 0.05; 400 trials put a 0.05 rate under 0.075 with 99 % probability
    assert flagged / trials <= 0.075


def test_a_measured_loaded_slowdown_is_flagged_where_the_mean_is_pulled_back() -> None:
    """The measured loaded rounds: a t test on their mean is not significant (the four
    spoiled rounds pull it back to 0.92 and widen it: t = -1.7, 15 df, p = 0.11); the
    trimmed mean reads the 20 % and the sign-flip test flags it. Mirrored, it says faster."""
    diffs = [math.log(r) for r in LOADED_20PCT]
    t = statistics.fmean(diffs) / (statistics.stdev(diffs) / math.sqrt(len(diffs)))
    assert math.exp(statistics.fmean(diffs)) > 0.9 and abs(t) < 2.131  # t(0.975, 15 df)
    slower = judge_speed([[1000.0]] * 16, [[1000.0 * r] for r in LOADED_20PCT], 0.05,
                         paired=True)
    assert slower.verdict.startswith("SLOWER"), slower.verdict
    assert 0.80 < slower.ratio < 0.86
    assert slower.estimate.ci[1] < 1 / 1.05 or slower.estimate.p < ALPHA
    assert "sign-flip" in slower.estimate.describe()
    faster = judge_speed([[1000.0 * r] for r in LOADED_20PCT], [[1000.0]] * 16, 0.05,
                         paired=True)
    assert faster.verdict.startswith("faster"), faster.verdict
    assert faster.ratio == pytest.approx(1 / slower.ratio)


def test_fewer_rounds_keep_the_prior_t_test_and_more_are_sampled() -> None:
    rng = random.Random(2)
    five = judge_speed([[1000.0]] * 5, [[1000.0 * rng.gauss(0.8, 0.01)] for _ in range(5)],
                       0.05, paired=True)
    assert five.estimate.test == "t" and five.verdict.startswith("SLOWER")
    many = sign_flip([rng.gauss(-0.1, 0.05) for _ in range(20)])
    assert not many.exact and "sampled" in many.describe() and many.p < ALPHA


def test_compares_footer_names_the_test_that_judged() -> None:
    """``compare --rerun``'s output says which test gave its p: the sign-flip test for
    paired rounds, the t test with its prior otherwise."""
    from parabench.analysis.compare import compare, format_comparison
    from test_compare_levels import _round_results, _rounds

    base, new = _rounds(random.Random(11), 10, 1.15, drift=0.15, own=0.01)
    b, n = _round_results(base), _round_results(new)
    paired = format_comparison(compare(b, n, 0.10, paired=True))
    assert "sign-flip test" in paired and "t interval" not in paired
    unpaired = format_comparison(compare(b, n, 0.10))
    assert "t interval" in unpaired and "sign-flip" not in unpaired
