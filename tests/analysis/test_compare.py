"""``parabench compare``: flags a planted slowdown and a new parity failure, passes a rerun."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from parabench.analysis.compare import compare, parse_threshold
from parabench.analysis.stats import mann_whitney_p, p_text
from sweepdata import sweep, write

pytestmark = pytest.mark.cpu


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "parabench", *args], capture_output=True,
                          text=True, timeout=120, stdin=subprocess.DEVNULL)


@pytest.fixture
def base(tmp_path: Path) -> Path:
    return write(tmp_path / "base.jsonl", sweep(methods=("serial", "ddp"), workers=(1, 2),
                                                 epochs=8))


def test_an_identical_rerun_passes(base: Path, tmp_path: Path) -> None:
    new = write(tmp_path / "new.jsonl", sweep(methods=("serial", "ddp"), workers=(1, 2),
                                              epochs=8))
    proc = cli("compare", str(base), str(new))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "no regression among 3 matched case(s)" in proc.stdout


def test_a_planted_30_percent_slowdown_exits_1(base: Path, tmp_path: Path) -> None:
    results = sweep(methods=("serial",), epochs=8)
    results += sweep(methods=("ddp",), workers=(1, 2), epochs=8, slow=1.3)
    new = write(tmp_path / "new.jsonl", results)
    proc = cli("compare", str(base), str(new), "--threshold", "10%")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    slower = [ln for ln in proc.stdout.splitlines() if "SLOWER 30%" in ln]
    assert len(slower) == 2 and all("cnn/ddp" in ln for ln in slower)
    assert "2 regression(s) among 3 matched case(s)" in proc.stdout
    # the same files with a threshold above the slowdown pass
    assert cli("compare", str(base), str(new), "--threshold", "40%").returncode == 0


def test_a_new_parity_failure_exits_1_even_when_faster(base: Path, tmp_path: Path) -> None:
    results = sweep(methods=("serial",), epochs=8)
    results += sweep(methods=("ddp",), workers=(1, 2), epochs=8, slow=0.8, broken=True)
    proc = cli("compare", str(base), str(write(tmp_path / "new.jsonl", results)))
    assert proc.returncode == 1
    assert proc.stdout.count("PARITY FAILED") == 2 and "ok->failed" in proc.stdout


def test_one_run_per_side_is_judged_on_the_run_to_run_prior() -> None:
    """Tight windows in one process say nothing about the next process: a 12 % gap between
    two single runs (an A/A pair on a shared machine can differ so) is not significant, where
    window-level Mann-Whitney called it p < 0.001; a 2x gap still is."""
    base = sweep(methods=("ddp",), workers=(2,), epochs=8)
    [change] = compare(base, sweep(methods=("ddp",), workers=(2,), epochs=8, slow=1.12)).changes
    assert change.ratio == pytest.approx(1 / 1.12, rel=0.02) and not change.regressed
    assert change.verdict == "slower 12%? (not significant)" and change.p_value > 0.05
    assert change.samples == "1x7 vs 1x7"
    [change] = compare(base, sweep(methods=("ddp",), workers=(2,), epochs=8, slow=2.0)).changes
    assert change.verdict == "SLOWER 100%"


@pytest.mark.parametrize("text", ["ten", "150%", "-5%"])
def test_a_bad_threshold_is_a_usage_error(base: Path, text: str) -> None:
    proc = cli("compare", str(base), str(base), f"--threshold={text}")
    assert proc.returncode == 2 and proc.stderr.startswith("parabench: error: threshold")
    assert len(proc.stderr.strip().splitlines()) == 1


def test_a_missing_file_is_a_usage_error(base: Path, tmp_path: Path) -> None:
    proc = cli("compare", str(base), str(tmp_path / "nope.jsonl"))
    assert proc.returncode == 2 and "does not exist" in proc.stderr


def test_threshold_parsing() -> None:
    assert parse_threshold("10%") == pytest.approx(0.1)
    assert parse_threshold("0.25") == pytest.approx(0.25)


def test_mann_whitney_matches_scipy_where_scipy_is_exact_or_tied() -> None:
    """Small samples get the exact permutation p, ties included (scipy's exact method without
    ties, its full permutation test with them); scipy's default with ties is the normal
    approximation, which a small tied sample must not get."""
    scipy_stats = pytest.importorskip("scipy.stats")
    np = pytest.importorskip("numpy")
    exact = scipy_stats.PermutationMethod(n_resamples=np.inf)
    cases = [([1.0, 2.0, 3.0], [4.0, 5.0, 6.0, 7.0]), ([1.0, 5.0, 2.0, 8.0], [3.0, 4.0, 9.0]),
             ([1.0, 1.0, 2.0, 3.0], [2.0, 3.0, 3.0, 4.0, 5.0]), ([0.5] * 3 + [0.7], [0.6] * 4),
             ([1.0, 1.0, 2.0], [2.0, 3.0, 3.0])]
    for a, b in cases:
        ref = scipy_stats.mannwhitneyu(a, b, alternative="two-sided", method=exact).pvalue
        assert mann_whitney_p(a, b) == pytest.approx(ref, abs=1e-9)
    # large samples keep the normal approximation, tied or not
    a, b = [float(i % 7) for i in range(40)], [float(i % 5) + 0.5 for i in range(40)]
    ref = scipy_stats.mannwhitneyu(a, b, alternative="two-sided", method="asymptotic").pvalue
    assert mann_whitney_p(a, b) == pytest.approx(ref, abs=1e-9)


def test_three_tied_against_three_can_never_be_significant() -> None:
    """3 vs 3 has 20 equally likely splits, so the smallest two-sided p is 2/20 = 0.1, ties or
    not; the normal approximation used to call the fully separated tied case p = 0.05."""
    assert mann_whitney_p([1.0, 1.0, 1.0], [2.0, 2.0, 2.0]) == pytest.approx(0.1)
    assert mann_whitney_p([1.0, 1.0, 2.0], [3.0, 3.0, 3.0]) == pytest.approx(0.1)
    assert mann_whitney_p([1.0, 2.0, 3.0], [4.0, 5.0, 6.0]) == pytest.approx(0.1)


@pytest.mark.parametrize(("p", "text"), [
    (0.0504, "p=0.0504"), (0.04996, "p=0.04996"), (0.05, "p=0.05"), (0.333, "p=0.33"),
    (0.0123, "p=0.01"), (0.0002, "p<0.001"), (0.0496, "p=0.0496"), (0.051, "p=0.051"),
])
def test_a_printed_p_never_reads_as_crossing_the_threshold(p: float, text: str) -> None:
    assert p_text(p) == text
    if text.startswith("p="):
        shown = float(text.removeprefix("p="))
        assert (shown < 0.05) == (p < 0.05) and (shown != 0.05 or p == 0.05)


def test_cases_are_matched_on_the_same_work_and_skips_are_left_out() -> None:
    from sweepdata import skipped

    base = [*sweep(epochs=8), skipped("cnn", "rf_threads", "rf_threads does not support workload")]
    cmp = compare(base, sweep(epochs=6))
    assert cmp.changes == [] and len(cmp.only_base) == len(cmp.only_new) == 3
    [serial] = [c for c in compare(base, base).changes if c.key[1] == "serial"]
    assert (serial.base_parity, serial.new_parity) == ("base", "base")


@pytest.mark.parametrize(("a", "b"), [
    ([1.0, 1.0, 2.0, 2.0], [2.0, 3.0, 3.0]), ([5.0] * 4 + [6.0], [5.0, 5.0, 4.0]),
    ([1.0, 2.0, 2.0, 2.0, 3.0], [2.0, 2.0, 4.0, 4.0]), ([0.1, 0.2], [0.3, 0.3, 0.3, 0.4, 0.1])])
def test_the_exact_p_is_the_brute_force_permutation_p_with_ties(a: list[float],
                                                                 b: list[float]) -> None:
    """Every split of the pooled values into sizes m and n, counted: twice the smaller tail of
    U (ties half), as mann_whitney_p's dynamic programme gives, without scipy."""
    from itertools import combinations

    from parabench.analysis.stats import _u_statistic

    pooled, m = [*a, *b], len(a)
    observed = _u_statistic(a, b)
    us = []
    for idx in combinations(range(len(pooled)), m):
        rest = [v for i, v in enumerate(pooled) if i not in idx]
        us.append(_u_statistic([pooled[i] for i in idx], rest))
    low = sum(u <= observed + 1e-9 for u in us) / len(us)
    high = sum(u >= observed - 1e-9 for u in us) / len(us)
    assert mann_whitney_p(a, b) == pytest.approx(min(1.0, 2 * min(low, high)), abs=1e-12)
