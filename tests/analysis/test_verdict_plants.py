"""The verdict tests see the bugs they are there for: each inverted-direction bug, planted.

Usage::

    pytest tests/analysis/test_verdict_plants.py   # one case per plant, named for the bug

For every verdict of ``tests/analysis/test_verdict_directions.py`` (busy machine, ``compare``'s
slower / faster / significance / parity / broken / busy side / other machine and exit code, parity's
tolerance and the trajectory's, the recommendation's parity gate and significance) a plant
breaks it in the direction the older tests did not exercise (a flag never set, a speed-up read
as a regression, a better-than-serial run failed) with ``monkeypatch``; the named tests pass on
the real code and each fails with the plant.
"""

from __future__ import annotations

import contextlib
import io
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest

import test_verdict_directions as v
from parabench.analysis import compare as compare_mod
from parabench.analysis import figures
from parabench.analysis import parity as parity_mod
from parabench.analysis import recommend as recommend_mod
from parabench.analysis import summary as summary_mod
from parabench.analysis import trajectory as trajectory_mod
from parabench.analysis.compare import Change
from parabench.analysis.stats import ALPHA
from parabench.case import machine
from parabench.case.result import Result
from parabench.cli import common as cli_common

pytestmark = pytest.mark.cpu


def _negate(fn: Callable) -> Callable:
    return lambda *a, **k: not fn(*a, **k)


def _swap_sides(fn: Callable) -> Callable:
    return lambda key, base, new, threshold, **kw: fn(key, new, base, threshold, **kw)


PLANTS: dict[str, tuple[Callable[[pytest.MonkeyPatch], None], list[Callable[[], None]]]] = {
    "is_busy never True": (
        lambda mp: mp.setattr(machine, "is_busy", lambda **k: False),
        [lambda: v.test_busy_by_cpu_flips_just_past_spare_plus_slack(2, 2),
         lambda: v.test_busy_by_load_flips_just_past_spare_plus_slack(2, 2),
         v.test_machine_record_says_busy_and_quiet_on_either_basis]),
    "is_busy inverted": (
        lambda mp: mp.setattr(machine, "is_busy", _negate(machine.is_busy)),
        [lambda: v.test_busy_by_cpu_flips_just_past_spare_plus_slack(4, 1),
         v.test_machine_record_says_busy_and_quiet_on_either_basis]),
    "is_busy ignores the cpu share": (
        lambda mp: mp.setattr(machine, "is_busy", _load_only(machine.is_busy)),
        [lambda: v.test_busy_by_cpu_flips_just_past_spare_plus_slack(2, 2)]),
    "recorded_busy never True": (
        lambda mp: [mp.setattr(m, "recorded_busy", lambda r: False)
                    for m in (figures, recommend_mod, summary_mod)],
        [v.test_recorded_busy_reads_the_flag_both_ways,
         v.test_the_table_marks_busy_rows_and_only_them,
         v.test_the_recommendation_warns_only_when_every_repeat_was_busy]),
    "recorded_busy always True": (
        lambda mp: [mp.setattr(m, "recorded_busy", lambda r: True)
                    for m in (figures, recommend_mod, summary_mod)],
        [v.test_recorded_busy_reads_the_flag_both_ways,
         v.test_the_table_marks_busy_rows_and_only_them,
         v.test_the_recommendation_warns_only_when_every_repeat_was_busy]),
    "recommendation warns when any repeat was busy": (
        lambda mp: mp.setattr(recommend_mod, "all", any, raising=False),
        [v.test_the_recommendation_warns_only_when_every_repeat_was_busy]),
    "compare: base and new swapped (a speed-up reads as a regression)": (
        lambda mp: mp.setattr(compare_mod, "_change", _swap_sides(compare_mod._change)),
        [v.test_slower_just_past_the_threshold_is_a_regression,
         v.test_faster_just_past_the_threshold_is_faster_not_a_regression,
         lambda: v.test_broken_only_when_an_ok_case_stops_finishing("failed", "ok",
                                                                  "not comparable"),
         lambda: v.test_parity_failed_only_when_it_held_before_and_fails_now("failed", "ok",
                                                                            False),
         lambda: _exit_code_case(v.timed(v.BASE_RATE * 1.3), cli_common.EXIT_OK)]),
    "compare: threshold ignored": (
        lambda mp: mp.setattr(compare_mod, "_change",
                              lambda k, b, n, t, f=compare_mod._change, **kw: f(k, b, n, 0.0,
                                                                                 **kw)),
        [v.test_slower_just_inside_the_threshold_is_not,
         v.test_faster_just_inside_the_threshold_is_within_it]),
    "compare: significance inverted": (
        lambda mp: mp.setattr(compare_mod, "speed_verdict",
                              lambda r, p, t, ci=None, f=compare_mod.speed_verdict:
                              f(r, 0.0 if p >= ALPHA else 1.0, t, ci)),
        [v.test_slower_just_past_the_threshold_is_a_regression,
         lambda: v.test_a_big_change_amid_a_big_run_to_run_spread_is_not_significant_either_way(
             1.3, "faster 30%? (not significant)"),
         lambda: v.test_a_a_runs_a_few_percent_apart_are_not_significant(2),
         lambda: v.test_same_only_when_the_interval_stays_inside_the_threshold(0.99)]),
    "compare: a regression never regresses": (
        lambda mp: mp.setattr(Change, "regressed", property(lambda self: False)),
        [v.test_slower_just_past_the_threshold_is_a_regression,
         lambda: v.test_a_1_5x_change_over_two_repeats_is_flagged_either_way(1 / 1.5,
                                                                           "SLOWER 50%"),
         lambda: _exit_code_case(v.timed(v.BASE_RATE / 1.3), cli_common.EXIT_FAILED)]),
    "compare: busy sides never said": (
        lambda mp: mp.setattr(compare_mod, "recorded_busy", lambda r: False),
        [v.test_a_busy_side_is_said_and_widens_the_interval_a_quiet_one_is_not]),
    "compare: every side said busy": (
        lambda mp: mp.setattr(compare_mod, "recorded_busy", lambda r: True),
        [v.test_a_busy_side_is_said_and_widens_the_interval_a_quiet_one_is_not]),
    "compare: a busy side judged on the quiet prior": (
        lambda mp: mp.setattr(compare_mod, "judge_speed",
                              lambda *a, f=compare_mod.judge_speed, **k:
                              f(*a, **{**k, "base_busy": False, "new_busy": False})),
        [v.test_a_busy_side_is_said_and_widens_the_interval_a_quiet_one_is_not]),
    "compare: machines never differ": (
        lambda mp: mp.setattr(compare_mod, "machine_differences", lambda b, n: ([], [])),
        [v.test_other_machines_are_not_judged_for_speed_unless_allowed,
         lambda: v.test_other_thread_settings_are_another_machine("threads"),
         lambda: _exit_code_case(v.timed(v.BASE_RATE / 1.3, env=v.OTHER_CPU),
                                 v.EXIT_OTHER_MACHINE)]),
    "compare: every machine another": (
        lambda mp: mp.setattr(compare_mod, "machine_differences",
                              lambda b, n: (["cpu A -> B"], [])),
        [v.test_other_machines_are_not_judged_for_speed_unless_allowed,
         lambda: v.test_other_thread_settings_are_another_machine("omp_wait_policy"),
         lambda: _exit_code_case(v.timed(v.BASE_RATE * 1.3), cli_common.EXIT_OK)]),
    "compare: parity failure from either side": (
        lambda mp: mp.setattr(compare_mod, "_parity",
                              lambda rs, f=compare_mod._parity: {"ok": "failed", "failed": "ok"}
                              .get(f(rs), f(rs))),
        [lambda: v.test_parity_failed_only_when_it_held_before_and_fails_now("ok", "failed",
                                                                            True),
         lambda: v.test_parity_failed_only_when_it_held_before_and_fails_now("failed", "ok",
                                                                            False)]),
    "parity: two-sided quality (better fails)": (
        lambda mp: mp.setattr(parity_mod, "parity_holds", lambda gap, tol: abs(gap) <= tol),
        [lambda: v.test_exact_parity_flips_just_past_the_tolerance_and_better_always_holds(True),
         lambda: v.test_exact_parity_flips_just_past_the_tolerance_and_better_always_holds(False),
         lambda: v.test_a_matching_trace_still_needs_serials_quality_but_better_holds(
             10 * v.EXACT_TOLERANCE, "ok")]),
    "parity: gap sign flipped": (
        lambda mp: mp.setattr(parity_mod, "quality_gap",
                              lambda q, q0, h, f=parity_mod.quality_gap: -f(q, q0, h)),
        [lambda: v.test_exact_parity_flips_just_past_the_tolerance_and_better_always_holds(True),
         lambda: v.test_exact_parity_flips_just_past_the_tolerance_and_better_always_holds(False)]),
    "parity: tolerance doubled": (
        lambda mp: mp.setattr(parity_mod, "parity_tolerance",
                              lambda *a, f=parity_mod.parity_tolerance: 2 * f(*a)),
        [lambda: v.test_exact_parity_flips_just_past_the_tolerance_and_better_always_holds(True)]),
    "trajectory: one-sided loss (a lower loss passes)": (
        lambda mp: mp.setattr(trajectory_mod, "loss_rel_max", _signed_loss_rel_max),
        [lambda: v.test_the_trajectory_flips_just_past_each_tolerance_in_either_direction(-1),
         lambda: v.test_exact_parity_follows_the_trace_both_ways(-1)]),
    "recommendation ignores parity": (
        lambda mp: mp.setattr(recommend_mod.Candidate, "qualifies", property(lambda self: True)),
        [lambda: v.test_the_faster_candidate_is_recommended_only_when_its_parity_holds(
            "failed", "ddp")]),
    "recommendation: significance inverted": (
        lambda mp: mp.setattr(recommend_mod, "mann_whitney_p", _inverted_p(recommend_mod)),
        [v.test_the_runner_up_is_significant_on_a_clear_gap_and_not_on_noise]),
}


def _inverted_p(module: object) -> Callable:
    """``p < ALPHA`` read the wrong way round: significant exactly when it is not."""
    real = module.mann_whitney_p
    return lambda a, b: 0.0 if real(a, b) >= ALPHA else 1.0


def _load_only(fn: Callable) -> Callable:
    return lambda **k: fn(**{**k, "other_cores": None})


def _signed_loss_rel_max(losses: list[float], reference: list[float]) -> float:
    return max((a - b) / abs(b) for a, b in zip(losses, reference, strict=False))


def _exit_code_case(new: Result, code: int) -> None:
    with tempfile.TemporaryDirectory() as d, contextlib.redirect_stdout(io.StringIO()):
        assert v._compare_exit(Path(d), new) == code


@pytest.mark.parametrize("plant", list(PLANTS))
def test_the_tests_see_the_plant(monkeypatch: pytest.MonkeyPatch, plant: str) -> None:
    install, tests = PLANTS[plant]
    for test in tests:  # each passes on the real code ...
        test()
    install(monkeypatch)
    for test in tests:  # ... and fails with the plant
        with pytest.raises(AssertionError):
            test()
