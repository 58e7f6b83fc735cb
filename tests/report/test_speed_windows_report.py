"""Speed windows where results are read: the CI of the median, the figures a result derives
from its windows, and the table / progress / html / TensorBoard / plot text that shows them.

All on crafted results (no training): each known answer is worked out in the test.
"""

from __future__ import annotations

import dataclasses

import pytest

from parabench.analysis.recommend import candidates
from parabench.analysis.stats import (
    ci_half_pct,
    median_ci,
    rate_text,
    throughput_samples,
    windows_text,
)
from parabench.case.result import Result
from parabench.sweep.progress import case_summary
from parabench.sweep.table import format_table, summarize, windows_phrase
from parabench.sweep.tensorboard import scalars
from sweepdata import SAMPLES, case

pytestmark = pytest.mark.cpu

#: samples per window and its seconds: a warm-up window (slow), then steady windows at
#: 100, 200 and 400 samples/s (median 200, so one epoch of SAMPLES=6000 takes 30 s)
WINDOW_SAMPLES = 1000
WINDOW_S = [20.0, 10.0, 5.0, 2.5]


def windowed(result: Result, *, window_s: list[float] = WINDOW_S, warmup: int = 1,
             ci: list[float] | None = None, unit: str = "steps", epochs: int = 1) -> Result:
    """``result`` as the new protocol records it: one epoch, then speed windows."""
    rates = [WINDOW_SAMPLES / s for s in window_s[warmup:]]
    ci = ci if ci is not None else list(median_ci(rates) or []) or None
    return dataclasses.replace(
        result, epoch_s=result.epoch_s[:epochs], loss=result.loss[:epochs],
        components={k: v[:epochs] for k, v in result.components.items()},
        window_s=list(window_s), window_samples=[WINDOW_SAMPLES] * len(window_s),
        window={"unit": unit, "steps": 415 if unit == "steps" else None,
                "steps_source": "auto", "target_s": 0.5, "warmup": warmup},
        samples_per_s=sorted(rates)[len(rates) // 2], samples_per_s_ci=ci)


# --- median_ci: the CI of a median ------------------------------------------------------------

def test_median_ci_is_a_percentile_bootstrap_of_the_median() -> None:
    assert median_ci([]) is None and median_ci([5.0]) is None  # no interval from one value
    # two values: the resampled medians are a, (a+b)/2, b with 1/4, 1/2, 1/4: the 2.5 % and
    # 97.5 % percentiles are the two values themselves
    assert median_ci([3.0, 5.0]) == (3.0, 5.0)
    # three repeats: the interval spans them (a median resample of 3 hits both ends often)
    assert median_ci([90.0, 100.0, 130.0]) == (90.0, 130.0)
    # an outlier moves a mean's CI, not the median's: 7 equal windows and one 100x slower
    # would need 4 of 8 draws to be the outlier (p ~ 1 %), below the 2.5 % tail
    assert median_ci([10.0] * 7 + [1000.0]) == (10.0, 10.0)


def test_median_ci_contains_the_median_narrows_with_agreeing_values_and_is_deterministic(
) -> None:
    spread = [10.0, 11.0, 12.0, 13.0, 14.0]
    lo, hi = median_ci(spread)
    assert lo < 12.0 < hi and (lo, hi) == (10.0, 14.0)
    agreeing = [10.0] + [12.0] * 8 + [14.0]  # same median and range, most windows agree
    assert median_ci(agreeing) == (12.0, 12.0)
    assert median_ci(spread) == median_ci(list(spread))  # seeded: same windows, same CI
    assert median_ci([100.0, 200.0, 400.0, 150.0, 250.0, 300.0]) == (125.0, 350.0)


def test_the_half_width_is_the_larger_side_in_percent_of_the_median() -> None:
    assert ci_half_pct(100.0, (95.0, 105.0)) == pytest.approx(5.0)  # symmetric: (hi - lo) / 2
    assert ci_half_pct(100.0, (97.0, 104.0)) == pytest.approx(4.0)  # asymmetric: larger side
    assert ci_half_pct(100.0, (90.0, 101.0)) == pytest.approx(10.0)
    assert ci_half_pct(100.0, None) is None and ci_half_pct(None, (1.0, 2.0)) is None
    assert rate_text(50072.0, (48570.0, 51574.0)) == "50,072 ±3.0%"
    assert rate_text(100.0, (70.0, 112.0)) == "100 ±30%"  # whole percent from 10 % up
    assert rate_text(50072.0) == "50,072" and rate_text(None) == "-"


# --- what a result derives from its windows -----------------------------------------------------

def test_window_rates_leave_the_warm_up_windows_out() -> None:
    r = windowed(case("mlp", "serial", 1))
    assert r.window_rates == [100.0, 200.0, 400.0]
    two = dataclasses.replace(r, window=dataclasses.replace(r.window, warmup=2))
    assert two.window_rates == [200.0, 400.0]
    none = dataclasses.replace(r, window=None)  # no window dict: nothing is warm-up
    assert none.window_rates == [50.0, 100.0, 200.0, 400.0]
    assert dataclasses.replace(r, window_s=[20.0, 0.0, 5.0]).window_rates == [200.0]


def test_the_steady_epoch_time_comes_from_the_windows_not_the_warm_up_epoch() -> None:
    old = case("mlp", "serial", 1, epochs=3)
    old = dataclasses.replace(old, epoch_s=[50.0, 2.0, 4.0])
    assert old.median_epoch_s == 3.0  # no windows: median of the epochs after the first
    r = windowed(dataclasses.replace(old, epoch_s=[99.0]))
    assert r.median_epoch_s == SAMPLES / 200.0  # the epoch's samples at the median window rate


def test_one_run_samples_are_its_steady_windows() -> None:
    s = throughput_samples([windowed(case("mlp", "serial", 1))])
    assert s.values == (100.0, 200.0, 400.0) and s.unit == "window"
    assert s.describe() == "3 windows"
    assert throughput_samples([case("mlp", "serial", 1, epochs=3)]).unit == "epoch"
    assert windows_text(windowed(case("mlp", "serial", 1))) == "3 windows of 415 steps"
    assert windows_text(windowed(case("mlp", "serial", 1), unit="fit")) == "3 windows of one fit"
    assert windows_text(case("mlp", "serial", 1)) == ""
    rounds = windowed(case("mlp", "fedavg", 2), unit="round")
    rounds = dataclasses.replace(rounds, window=dataclasses.replace(rounds.window,
                                                                    from_training=4))
    assert windows_text(rounds) == "3 windows of one round trained for quality"


# --- the run summary table --------------------------------------------------------------------

def test_the_table_shows_speed_with_its_ci_and_no_warm_up_mark_with_windows() -> None:
    serial = windowed(case("mlp", "serial", 1), ci=[48570.0, 51574.0])
    serial = dataclasses.replace(serial, samples_per_s=50072.0)
    ddp = windowed(case("mlp", "ddp", 2))  # CI computed from its windows: (100, 400)
    [srow, drow] = summarize([serial, ddp])
    assert srow.samples_per_s_ci == (48570.0, 51574.0) and srow.steady
    assert drow.samples_per_s_ci == (100.0, 400.0) and drow.steady
    table = format_table([srow, drow], wide=True)  # with the epoch column
    lines = table.splitlines()
    srv, ddl = next(ln for ln in lines if " serial" in ln), next(ln for ln in lines if " ddp" in ln)
    assert "50,072 ±3.0%" in srv
    assert "200 ±100%" in ddl  # the larger side: 400 - 200 over 200
    assert "30.000 (0.000)" in ddl and "~" not in srv + ddl  # 6000 samples at 200/s
    assert "samples/s: median of the steady speed windows" in table
    assert "here 3 windows of 415 global steps, after a warm-up window" in table
    assert "larger side when the interval is asymmetric" in table
    fit = windowed(case("mlp", "forest", 1), unit="fit", window_s=[9.0, 8.0, 8.0, 8.0, 8.0])
    steps = dataclasses.replace(ddp, window=dataclasses.replace(ddp.window, steps=112))
    rows = summarize([serial, steps, fit])
    assert windows_phrase(rows) == "3-4 windows of 112-415 global steps or one fit"
    assert windows_phrase(summarize([case("mlp", "serial", 1)])) == ""
    rounds = windowed(case("mlp", "fedavg", 2), unit="round", window_s=[9.0, 8.0, 8.0, 8.0])
    trained = dataclasses.replace(rounds, window=dataclasses.replace(rounds.window,
                                                                     from_training=4))
    assert windows_phrase(summarize([rounds])) == "3 windows of one round"
    assert windows_phrase(summarize([trained])) == "3 windows of one round trained for quality"
    assert "~ one epoch only" not in table and "n > 1" not in table


def test_older_results_keep_the_warm_up_mark_and_show_the_figure_alone() -> None:
    # one epoch, no windows: its time includes the warm-up
    old = dataclasses.replace(case("mlp", "serial", 1), epoch_s=[25.0])
    [row] = summarize([old])
    assert not row.steady and row.samples_per_s_ci is None
    table = format_table([row])
    assert " ~" in table and "~ one epoch only, no speed windows" in table
    assert "±" not in table and "speed windows (after" not in table
    assert f"{old.samples_per_s:,.0f}" in table


def test_with_repeats_the_ci_is_over_the_repeats_figures_not_the_pooled_windows() -> None:
    # each repeat is precise (±1 %), but the repeats disagree: 90, 100, 130 samples/s
    reps = [dataclasses.replace(windowed(case("mlp", "serial", 1, repeat=i)),
                                samples_per_s=v, samples_per_s_ci=[v * 0.99, v * 1.01])
            for i, v in enumerate((90.0, 100.0, 130.0))]
    [row] = summarize(reps)
    assert row.repeats == 3 and row.samples_per_s == 100.0
    assert row.samples_per_s_ci == (90.0, 130.0)  # median_ci of the three figures
    table = format_table([row])
    assert "100 ±30%" in table and "n > 1: median and CI over the repeats' figures" in table


# --- progress, html, TensorBoard, plots -------------------------------------------------------

def test_the_progress_line_shows_speed_ci_and_windows() -> None:
    r = windowed(case("mlp", "serial", 1), ci=[190.0, 206.0])
    assert case_summary(r) == "ok 30.000 s/epoch, 200 ±5.0% samples/s (3 windows of 415 steps)"
    old = dataclasses.replace(case("mlp", "serial", 1), samples_per_s=166.4)
    assert case_summary(old) == f"ok {old.median_epoch_s:.3f} s/epoch, 166 samples/s"


def test_the_html_table_shows_the_same_speed_cell() -> None:
    from parabench.sweep.site.html import _speed_note, _table

    serial = dataclasses.replace(windowed(case("mlp", "serial", 1), ci=[48570.0, 51574.0]),
                                 samples_per_s=50072.0)
    html = _table(summarize([serial, case("mlp", "ddp", 2, epochs=3)]))
    assert "<td>50,072 ±3.0%</td>" in html
    ddp_rate = f"{case('mlp', 'ddp', 2, epochs=3).samples_per_s:,.0f}"
    assert f"<td>{ddp_rate}</td>" in html  # an older result: the figure alone
    note = _speed_note(summarize([serial]))
    assert "95 % bootstrap CI" in note and note.endswith("Here: 3 windows of 415 global steps.")


def test_tensorboard_logs_each_steady_window_and_the_ci() -> None:
    tags = scalars(windowed(case("mlp", "serial", 1), ci=[150.0, 300.0]))
    assert [(s, v) for t, s, v in tags if t == "window_throughput"] == [
        (1, 100.0), (2, 200.0), (3, 400.0)]
    assert ("samples_per_s_ci/low", 1, 150.0) in tags
    assert ("samples_per_s_ci/high", 1, 300.0) in tags
    assert not [t for t, _s, _v in scalars(case("mlp", "serial", 1)) if "window" in t]


def test_plot_error_bars_are_each_configurations_ci() -> None:
    from parabench.sweep.site.plots import throughput_errors

    [cand] = candidates([windowed(case("mlp", "serial", 1))])
    assert cand.throughput == 200.0
    assert throughput_errors([cand]) == [[100.0], [200.0]]  # CI (100, 400) around 200
    assert throughput_errors([cand], ref=200.0) == [[0.5], [1.0]]  # as a speedup over 200/s
