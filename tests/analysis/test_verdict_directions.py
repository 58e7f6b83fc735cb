"""Every verdict parabench makes, on crafted inputs just either side of its threshold.

The other tests mostly check one direction of each verdict (a busy machine flagged, a slowdown
caught, a wrong method failed). A verdict broken the other way (a flag never set, a speed-up
reported as a regression, a better-than-serial run failed) would leave them green; these tests
assert both outcomes; ``tests/analysis/test_verdict_plants.py`` plants each inverted-direction
bug with ``monkeypatch`` and checks that a test here fails.

Verdicts: the busy-machine rule and what the table / recommendation show for it; ``compare``'s
SLOWER / faster / within threshold / slower? / same (not significant) / PARITY FAILED /
BROKEN, a busy side said and widened, another machine not judged, and the CLI's exit code;
parity's quality tolerance (exact and statistical, higher and lower is better) and the
trajectory's; the recommendation's parity gate; significance.
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

import pytest

from parabench.analysis import figures
from parabench.analysis import parity as parity_mod
from parabench.analysis import recommend as recommend_mod
from parabench.analysis.compare import EXIT_OTHER_MACHINE, Change, compare
from parabench.analysis.parity import EXACT_TOLERANCE, assess
from parabench.analysis.ratios import MIN_STATISTICAL_TOLERANCE, SPREAD_FACTOR
from parabench.analysis.recommend import describe, recommend
from parabench.analysis.stats import ALPHA, mann_whitney_p
from parabench.analysis.trajectory import LOSS_RTOL, WEIGHT_RTOL, compare_traces
from parabench.case import machine
from parabench.case.machine import BUSY_SLACK_CORES
from parabench.case.result import Grading, QualityValue, Result
from parabench.cli import common as cli_common
from parabench.cli import compare as cli_compare
from parabench.sweep.table import format_table, summarize
from sweepdata import ENV, case, write

pytestmark = pytest.mark.cpu

#: a step past a threshold, small against every threshold here (relative where it is one)
EPS = 1e-6


# --- busy machine ------------------------------------------------------------------------------

def _is_busy(**kw: object) -> bool:
    return machine.is_busy(**kw)  # through the module, so a planted rule is the one called


@pytest.mark.parametrize(("cores", "in_use"), [(2, 2), (2, 1), (4, 1), (2, 3)])
def test_busy_by_cpu_flips_just_past_spare_plus_slack(cores: int, in_use: int) -> None:
    edge = max(0, cores - in_use) + BUSY_SLACK_CORES
    assert not _is_busy(cores=cores, cores_in_use=in_use, other_cores=edge - 0.01,
                        load_before=99.0)
    assert _is_busy(cores=cores, cores_in_use=in_use, other_cores=edge + 0.01, load_before=0.0)


@pytest.mark.parametrize(("cores", "in_use"), [(2, 2), (2, 1), (4, 1)])
def test_busy_by_load_flips_just_past_spare_plus_slack(cores: int, in_use: int) -> None:
    edge = max(0, cores - in_use) + BUSY_SLACK_CORES
    assert not _is_busy(cores=cores, cores_in_use=in_use, other_cores=None,
                        load_before=edge - 0.01)
    assert _is_busy(cores=cores, cores_in_use=in_use, other_cores=None, load_before=edge + 0.01)


def _record(**measured: object) -> dict:
    return machine.machine_record({"cores": 2, **measured},
                                  settings={"omp_wait_policy": "PASSIVE"},
                                  workers=2, threads_per_worker=1)


def test_machine_record_says_busy_and_quiet_on_either_basis() -> None:
    quiet_cpu = _record(other_cores=BUSY_SLACK_CORES - 0.01, load_1m_before=5.0)
    busy_cpu = _record(other_cores=BUSY_SLACK_CORES + 0.01, load_1m_before=0.0)
    quiet_load = _record(other_cores=None, load_1m_before=BUSY_SLACK_CORES - 0.01)
    busy_load = _record(other_cores=None, load_1m_before=BUSY_SLACK_CORES + 0.01)
    for rec, busy, basis in ((quiet_cpu, False, "cpu"), (busy_cpu, True, "cpu"),
                             (quiet_load, False, "load"), (busy_load, True, "load")):
        assert rec["busy"] is busy and rec["busy_basis"] == basis
        assert ("busy machine" in rec.get("note", "")) is busy
    assert "cores during the case" in busy_cpu["note"]
    assert "load 0.26 before the case" in busy_load["note"]


QUIET = {"busy": False, "load_1m_before": 0.3, "load_1m_after": 0.4, "cores_in_use": 2}
BUSY = {"busy": True, "load_1m_before": 5.2, "load_1m_after": 4.0, "cores_in_use": 2}


def test_recorded_busy_reads_the_flag_both_ways() -> None:
    r = case("cnn", "ddp", 2)
    assert not figures.recorded_busy(r)  # no machine record: not busy
    assert not figures.recorded_busy(dataclasses.replace(r, machine=QUIET))
    assert figures.recorded_busy(dataclasses.replace(r, machine=BUSY))


def _ddp_line(results: list[Result]) -> tuple[str, str]:
    table = format_table(summarize(results))
    [line] = [ln for ln in table.splitlines() if ln.startswith("ddp")]
    return line, table


def test_the_table_marks_busy_rows_and_only_them() -> None:
    serial = dataclasses.replace(case("cnn", "serial", 1), machine=QUIET)
    quiet_line, quiet_table = _ddp_line([serial, dataclasses.replace(case("cnn", "ddp", 2),
                                                                     machine=QUIET)])
    busy_line, busy_table = _ddp_line([serial, dataclasses.replace(case("cnn", "ddp", 2),
                                                                   machine=BUSY)])
    assert " !" not in quiet_line and "busy" not in quiet_table
    assert " !" in busy_line and "! cnn/ddp 2x1: measured on a busy machine" in busy_table


def test_a_row_with_some_busy_repeats_says_how_many() -> None:
    reps = [dataclasses.replace(case("cnn", "ddp", 2, repeat=i), machine=m)
            for i, m in enumerate((BUSY, QUIET))]
    [row] = summarize(reps)
    assert row.busy.endswith(", 1/2 repeats")
    [row] = summarize([dataclasses.replace(r, machine=BUSY) for r in reps])
    assert row.busy and "repeats" not in row.busy


def test_a_busy_row_names_the_evidence_that_decided_not_a_false_inequality() -> None:
    """Busy on the CPU share with a low load used to read 'load 0.4 > cores in use 2'."""
    by_cpu = {"busy": True, "busy_basis": "cpu", "cores": 2, "cores_in_use": 2,
              "other_cores": 1.5, "load_1m_before": 0.3, "load_1m_after": 0.4}
    by_load = {"busy": True, "busy_basis": "load", "cores": 2, "cores_in_use": 1,
               "load_1m_before": 1.3}
    [cpu_row] = summarize([dataclasses.replace(case("cnn", "ddp", 2), machine=by_cpu)])
    [load_row] = summarize([dataclasses.replace(case("cnn", "ddp", 1), machine=by_load)])
    assert cpu_row.busy == "other processes used 1.50 cores, 2 of 2 in use"
    assert load_row.busy == "load 1.3 before the case, 1 of 2 in use"


def _busy_rec(machines: tuple[dict, ...]) -> list[str]:
    results = [case("cnn", "serial", 1, repeat=i) for i in range(len(machines))]
    results += [dataclasses.replace(case("cnn", "ddp", 2, repeat=i), machine=m)
                for i, m in enumerate(machines)]
    [rec] = recommend(results)
    assert rec.best is not None and rec.best.method == "ddp"
    return describe(rec)


def test_the_recommendation_warns_only_when_every_repeat_was_busy() -> None:
    assert any(figures.BUSY_WARNING in ln for ln in _busy_rec((BUSY, BUSY)))
    assert not any(figures.BUSY_WARNING in ln for ln in _busy_rec((QUIET, QUIET)))
    assert not any(figures.BUSY_WARNING in ln for ln in _busy_rec((BUSY, QUIET)))


# --- compare: slower / faster / within / not significant ------------------------------------

BASE_RATE = 1000.0
#: seven steady windows per run, tight around the run's rate
SPREAD = (-0.3, -0.2, -0.1, 0.0, 0.1, 0.2, 0.3)


def timed(rate: float, *, runs: int = 5, run_spread: float = 0.005, parity: str = "ok",
          status: str = "ok", machine: dict | None = None, env: dict | None = None
          ) -> list[Result]:
    """ddp x2 measured in ``runs`` runs (repeats) whose rates sit evenly over
    ``rate * (1 +- run_spread)``, each with seven steady windows within +-0.03 % of its rate."""
    par = {"status": parity, "kind": "exact", "gap": 0.0 if parity == "ok" else -0.5,
           "tolerance": 0.015, "baseline": "serial/cpu"}
    out = []
    for i in range(runs):
        level = rate * (1 + run_spread * (2 * i / (runs - 1) - 1 if runs > 1 else 0.0))
        rates = [level + o for o in SPREAD]
        r = dataclasses.replace(case("cnn", "ddp", 2, repeat=i), status=status, parity=par,
                                window_s=[1000.0 / v for v in rates],
                                window_samples=[1000] * len(rates), machine=machine)
        out.append(dataclasses.replace(r, env=env) if env is not None else r)
    return out


def judge(base: list[Result], new: list[Result], threshold: float = 0.10, **kw: object
          ) -> Change:
    [change] = compare(base, new, threshold, **kw).changes
    return change


T = 0.10
SLOW_EDGE, FAST_EDGE = 1 / (1 + T), 1 + T


def test_slower_just_past_the_threshold_is_a_regression() -> None:
    c = judge(timed(BASE_RATE), timed(BASE_RATE * SLOW_EDGE * (1 - 1e-3)))
    assert c.p_value < ALPHA and c.verdict.startswith("SLOWER") and c.regressed


def test_slower_just_inside_the_threshold_is_not() -> None:
    c = judge(timed(BASE_RATE), timed(BASE_RATE * SLOW_EDGE * (1 + 1e-3)))
    assert c.p_value < ALPHA and c.verdict == "within threshold" and not c.regressed


def test_faster_just_past_the_threshold_is_faster_not_a_regression() -> None:
    c = judge(timed(BASE_RATE), timed(BASE_RATE * FAST_EDGE * (1 + 1e-3)))
    assert c.ratio > 1 and c.p_value < ALPHA
    assert c.verdict == "faster 10%" and not c.regressed


def test_faster_just_inside_the_threshold_is_within_it() -> None:
    c = judge(timed(BASE_RATE), timed(BASE_RATE * FAST_EDGE * (1 - 1e-3)))
    assert c.p_value < ALPHA and c.verdict == "within threshold" and not c.regressed


@pytest.mark.parametrize(("factor", "verdict"), [(1 / 1.3, "slower 30%? (not significant)"),
                                                 (1.3, "faster 30%? (not significant)")])
def test_a_big_change_amid_a_big_run_to_run_spread_is_not_significant_either_way(
        factor: float, verdict: str) -> None:
    c = judge(timed(BASE_RATE, runs=3, run_spread=0.3),
              timed(BASE_RATE * factor, runs=3, run_spread=0.3))
    assert c.p_value >= ALPHA and c.verdict == verdict and not c.regressed


@pytest.mark.parametrize("factor", [0.97, 1.03])
def test_a_small_change_is_within_threshold_when_significant_inconclusive_when_noisy(
        factor: float) -> None:
    # runs that agree to 0.5 % on a machine known to be that quiet (--run-cv 0.5%) show 3 %;
    # runs 10 % apart do not, and their interval reaches past the threshold
    clear = judge(timed(BASE_RATE), timed(BASE_RATE * factor), run_cv=0.005)
    noisy = judge(timed(BASE_RATE, run_spread=0.1), timed(BASE_RATE * factor, run_spread=0.1))
    assert clear.p_value < ALPHA and clear.verdict == "within threshold"
    assert noisy.p_value >= ALPHA and noisy.verdict == "inconclusive (CI spans the threshold)"
    assert noisy.ratio_ci[0] < SLOW_EDGE or noisy.ratio_ci[1] > FAST_EDGE


@pytest.mark.parametrize("factor", [0.99, 1.01])
def test_same_only_when_the_interval_stays_inside_the_threshold(factor: float) -> None:
    same = judge(timed(BASE_RATE), timed(BASE_RATE * factor))
    assert same.p_value >= ALPHA and same.verdict == "same (not significant)"
    assert SLOW_EDGE <= same.ratio_ci[0] and same.ratio_ci[1] <= FAST_EDGE
    wide = judge(timed(BASE_RATE, runs=1), timed(BASE_RATE * factor, runs=1))
    assert wide.verdict == "inconclusive (CI spans the threshold)" and not wide.regressed


def test_the_threshold_moves_the_verdict_both_ways() -> None:
    base, slow, fast = timed(BASE_RATE), timed(BASE_RATE / 1.3), timed(BASE_RATE * 1.3)
    assert judge(base, slow, 0.25).verdict.startswith("SLOWER")
    assert judge(base, slow, 0.35).verdict == "within threshold"
    assert judge(base, fast, 0.25).verdict.startswith("faster")
    assert judge(base, fast, 0.35).verdict == "within threshold"


@pytest.mark.parametrize(("factor", "verdict"), [(1 / 1.5, "SLOWER 50%"),
                                                 (1.5, "faster 50%")])
def test_a_1_5x_change_over_two_repeats_is_flagged_either_way(factor: float,
                                                              verdict: str) -> None:
    """Two runs a side (``--repeats 2``): Mann-Whitney on 2 vs 2 run figures can never go
    below p = 0.33; the two-level test sees a 1.5x change between runs 2 % apart."""
    c = judge(timed(BASE_RATE, runs=2, run_spread=0.01),
              timed(BASE_RATE * factor, runs=2, run_spread=0.01))
    assert c.verdict == verdict and c.p_value < ALPHA and c.regressed is (factor < 1)
    assert c.samples == "2x7 vs 2x7"


@pytest.mark.parametrize("runs", [1, 2, 3])
def test_a_a_runs_a_few_percent_apart_are_not_significant(runs: int) -> None:
    """The same code measured twice: each side's runs a few % apart, the sides' means 7 %
    apart (both directions); window-level tests called such pairs significant."""
    for shift in (1.07, 1 / 1.07):
        c = judge(timed(BASE_RATE, runs=runs, run_spread=0.03),
                  timed(BASE_RATE * shift, runs=runs, run_spread=0.03))
        assert c.p_value >= ALPHA and not c.regressed, (shift, c)
        assert c.verdict in ("same (not significant)", "inconclusive (CI spans the threshold)")


# --- compare: busy sides and other machines ----------------------------------------------------

def test_a_busy_side_is_said_and_widens_the_interval_a_quiet_one_is_not() -> None:
    """One run a side 26 % apart: quiet, the prior calls it SLOWER; with NEW busy the busy
    prior makes it not significant, and the verdict says NEW was busy."""
    base = timed(BASE_RATE, runs=1, machine=QUIET)
    quiet = judge(base, timed(BASE_RATE / 1.26, runs=1, machine=QUIET))
    busy = judge(base, timed(BASE_RATE / 1.26, runs=1, machine=BUSY))
    assert quiet.verdict == "SLOWER 26%" and quiet.notes == ()
    assert busy.verdict == "slower 26%? (not significant)" and not busy.regressed
    assert busy.notes == ("NEW busy 1/1 runs",)
    assert busy.ratio_ci[1] - busy.ratio_ci[0] > quiet.ratio_ci[1] - quiet.ratio_ci[0]
    base_busy = judge(timed(BASE_RATE, runs=2, machine=BUSY), timed(BASE_RATE, runs=2))
    assert base_busy.notes == ("BASE busy 2/2 runs",)


OTHER_CPU = {**ENV, "cpu": "Other CPU"}


def test_other_machines_are_not_judged_for_speed_unless_allowed() -> None:
    base, slow = timed(BASE_RATE, env=ENV), timed(BASE_RATE / 1.5, env=OTHER_CPU)
    same = judge(base, timed(BASE_RATE / 1.5, env=ENV))
    other = judge(base, slow)
    allowed = judge(base, slow, allow_cross_machine=True)
    assert same.verdict == "SLOWER 50%" and not same.other_machine and same.notes == ()
    assert other.verdict == 'not comparable: other machine (cpu "Test CPU" -> "Other CPU")'
    assert other.other_machine and not other.regressed
    assert allowed.verdict == "SLOWER 50%" and allowed.regressed
    assert allowed.notes == ('other machine: cpu "Test CPU" -> "Other CPU"',)
    # a new parity failure is still one on another machine
    broken = judge(base, timed(BASE_RATE, env=OTHER_CPU, parity="failed"))
    assert broken.verdict == "PARITY FAILED"


def test_another_host_name_alone_is_said_not_refused() -> None:
    c = judge(timed(BASE_RATE, env=ENV), timed(BASE_RATE / 1.5, env={**ENV, "host": "h2"}))
    assert c.verdict == "SLOWER 50%" and c.notes == ("another host",)


@pytest.mark.parametrize("field", ["threads", "omp_wait_policy"])
def test_other_thread_settings_are_another_machine(field: str) -> None:
    settings = {"threads": {"OMP_NUM_THREADS": "1"}, "omp_wait_policy": "PASSIVE"}
    changed = {**settings, field: {"OMP_NUM_THREADS": "2"} if field == "threads" else "ACTIVE"}
    c = judge(timed(BASE_RATE, machine={**QUIET, **settings}),
              timed(BASE_RATE, machine={**QUIET, **changed}))
    assert c.verdict.startswith(f"not comparable: other machine ({field} ")
    assert not judge(timed(BASE_RATE, machine={**QUIET, **settings}),
                     timed(BASE_RATE, machine={**QUIET, **settings})).other_machine


# --- compare: parity and status ------------------------------------------------------------

@pytest.mark.parametrize(("before", "after", "regressed"), [
    ("ok", "failed", True), ("failed", "ok", False), ("failed", "failed", False),
    ("ok", "ok", False)])
def test_parity_failed_only_when_it_held_before_and_fails_now(before: str, after: str,
                                                              regressed: bool) -> None:
    c = judge(timed(BASE_RATE, parity=before), timed(BASE_RATE * 1.5, parity=after))
    assert (c.verdict == "PARITY FAILED") is regressed and c.regressed is regressed
    assert (c.base_parity, c.new_parity) == (before, after)
    if not regressed:
        assert c.verdict == "faster 50%"  # the speed-up is still reported as one


@pytest.mark.parametrize(("before", "after", "verdict"), [
    ("ok", "failed", "BROKEN: failed"), ("ok", "timeout", "BROKEN: timeout"),
    ("ok", "oom", "BROKEN: oom"), ("failed", "ok", "not comparable"),
    ("timeout", "failed", "not comparable")])
def test_broken_only_when_an_ok_case_stops_finishing(before: str, after: str,
                                                     verdict: str) -> None:
    c = judge(timed(BASE_RATE, status=before), timed(BASE_RATE, status=after))
    assert c.verdict == verdict and c.regressed is verdict.startswith("BROKEN")


def _compare_exit(tmp_path: Path, new: list[Result], *, allow: bool = False) -> int:
    base_file = write(tmp_path / "base.jsonl", timed(BASE_RATE, env=ENV))
    new_file = write(tmp_path / "new.jsonl", new)
    args = argparse.Namespace(base=str(base_file), new=str(new_file), threshold="10%",
                              run_cv=None, allow_cross_machine=allow)
    return cli_compare.compare_command(args)


@pytest.mark.parametrize(("new", "code"), [
    (timed(BASE_RATE / 1.3), cli_common.EXIT_FAILED), (timed(BASE_RATE * 1.3), cli_common.EXIT_OK),
    (timed(BASE_RATE * 1.3, parity="failed"), cli_common.EXIT_FAILED),
    (timed(BASE_RATE, status="failed"), cli_common.EXIT_FAILED),
    (timed(BASE_RATE / 1.05), cli_common.EXIT_OK),
    (timed(BASE_RATE / 1.3, env=OTHER_CPU), EXIT_OTHER_MACHINE),
    (timed(BASE_RATE * 1.3, env=OTHER_CPU, parity="failed"), cli_common.EXIT_FAILED)])
def test_compare_exits_1_on_a_regression_and_0_on_a_speedup(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], new: list[Result],
        code: int) -> None:
    assert _compare_exit(tmp_path, new) == code
    out = capsys.readouterr().out
    assert ("no regression" in out) is (code != cli_common.EXIT_FAILED)
    assert ("not judged for speed" in out) is (code == EXIT_OTHER_MACHINE)


def test_allow_cross_machine_judges_the_other_machines_speed(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    slow = timed(BASE_RATE / 1.3, env=OTHER_CPU)
    assert _compare_exit(tmp_path, slow, allow=True) == cli_common.EXIT_FAILED
    assert 'other machine: cpu "Test CPU" -> "Other CPU"' in capsys.readouterr().out


# --- parity ----------------------------------------------------------------------------------

def _q(method: str, quality: float, *, higher: bool = True,
       grading: Grading | None = None, trace: dict | None = None) -> Result:
    return Result(workload="mlp", method=method, device="cpu",
                  workers=1 if method == "serial" else 2, threads_per_worker=1,
                  batch_size=64, epochs=3, profile="tiny", seed=0, repeat=0, status="ok",
                  epoch_s=[1.0, 1.0, 1.0],
                  quality=QualityValue(name="accuracy", value=quality, higher_is_better=higher),
                  config={"options": {}}, grading=grading, trace=trace)


def _status(method: str, q: float, q0: float, *, higher: bool = True, **kw: object) -> str:
    p = assess(_q(method, q, higher=higher, **kw), [_q("serial", q0, higher=higher)])
    assert p is not None
    return p.status


@pytest.mark.parametrize("higher", [True, False])
def test_exact_parity_flips_just_past_the_tolerance_and_better_always_holds(higher: bool
                                                                             ) -> None:
    q0 = 0.80 if higher else 0.020
    tol = EXACT_TOLERANCE if higher else EXACT_TOLERANCE * q0  # relative for a loss
    worse = -1 if higher else 1
    assert _status("wide_serial", q0 + worse * (tol - EPS * tol), q0, higher=higher) == "ok"
    assert _status("wide_serial", q0 + worse * (tol + EPS * tol), q0, higher=higher) == "failed"
    assert _status("wide_serial", q0 - worse * 10 * tol, q0, higher=higher) == "ok"  # better


STATISTICAL = Grading(kind="statistical", reason="crafted: another algorithm")


@pytest.mark.parametrize("higher", [True, False])
def test_statistical_parity_flips_just_past_the_tolerance_and_better_always_holds(
        monkeypatch: pytest.MonkeyPatch, higher: bool) -> None:
    spread = 0.02
    monkeypatch.setattr(parity_mod, "spread_for", lambda *a, **k: {
        "spread": spread, "spread_source": "crafted"})
    q0 = 0.80 if higher else 0.5
    tol = max(SPREAD_FACTOR * spread, MIN_STATISTICAL_TOLERANCE) * (1 if higher else q0)
    worse = -1 if higher else 1
    kw = {"higher": higher, "grading": STATISTICAL}
    assert _status("wide_serial", q0 + worse * (tol - EPS), q0, **kw) == "ok"
    assert _status("wide_serial", q0 + worse * (tol + EPS), q0, **kw) == "failed"
    assert _status("wide_serial", q0 - worse * 3 * tol, q0, **kw) == "ok"


def _trace(losses: list[float], proj: list[float]) -> dict:
    return {"steps": len(losses), "losses": losses,
            "digest": {"w": {"sum": sum(proj), "norm": 1.0, "proj": proj}}}


SERIAL_LOSSES, SERIAL_PROJ = [2.0, 1.5, 1.2], [3.0, 4.0]  # |proj| = 5


@pytest.mark.parametrize("sign", [1, -1])
def test_the_trajectory_flips_just_past_each_tolerance_in_either_direction(sign: int) -> None:
    ref = _trace(SERIAL_LOSSES, SERIAL_PROJ)

    def loss_at(rel: float) -> dict:
        return _trace([SERIAL_LOSSES[0], SERIAL_LOSSES[1] * (1 + sign * rel),
                       SERIAL_LOSSES[2]], SERIAL_PROJ)

    def weight_at(rel: float) -> dict:  # move proj[0] by rel x |proj|
        return _trace(SERIAL_LOSSES, [SERIAL_PROJ[0] + sign * rel * 5.0, SERIAL_PROJ[1]])

    assert compare_traces(loss_at(LOSS_RTOL * 0.99), ref)["ok"]
    assert not compare_traces(loss_at(LOSS_RTOL * 1.01), ref)["ok"]
    assert compare_traces(weight_at(WEIGHT_RTOL * 0.99), ref)["ok"]
    assert not compare_traces(weight_at(WEIGHT_RTOL * 1.01), ref)["ok"]


@pytest.mark.parametrize("sign", [1, -1])
def test_exact_parity_follows_the_trace_both_ways(sign: int) -> None:
    ref = _trace(SERIAL_LOSSES, SERIAL_PROJ)
    off = _trace([x * (1 + sign * 10 * LOSS_RTOL) for x in SERIAL_LOSSES], SERIAL_PROJ)
    base = dataclasses.replace(_q("serial", 0.80), trace=ref)
    same = assess(dataclasses.replace(_q("wide_serial", 0.80), trace=ref), [base])
    drifted = assess(dataclasses.replace(_q("wide_serial", 0.80), trace=off), [base])
    assert same.status == "ok" and same.basis == "trajectory"
    assert drifted.status == "failed" and drifted.basis == "trajectory"


@pytest.mark.parametrize(("shift", "status"), [(10 * EXACT_TOLERANCE, "ok"),
                                                (-2 * EXACT_TOLERANCE, "failed")])
def test_a_matching_trace_still_needs_serials_quality_but_better_holds(shift: float,
                                                                        status: str) -> None:
    ref = _trace(SERIAL_LOSSES, SERIAL_PROJ)
    base = dataclasses.replace(_q("serial", 0.80), trace=ref)
    p = assess(dataclasses.replace(_q("wide_serial", 0.80 + shift), trace=ref), [base])
    assert p.trajectory_ok and p.status == status


# --- the recommendation and significance ------------------------------------------------------

def _cands(parity: str) -> list[Result]:
    """serial, a slower ddp with parity ok, a faster fsdp with parity ``parity``."""
    ok = {"status": "ok", "kind": "exact", "gap": 0.0, "tolerance": 0.015}
    fsdp_par = {**ok, "status": parity, "gap": 0.0 if parity == "ok" else -0.3}
    return [case("cnn", "serial", 1),
            dataclasses.replace(case("cnn", "ddp", 2), parity=ok),
            dataclasses.replace(case("cnn", "fsdp", 2, slow=0.5), parity=fsdp_par)]


@pytest.mark.parametrize(("parity", "best"), [("ok", "fsdp"), ("failed", "ddp")])
def test_the_faster_candidate_is_recommended_only_when_its_parity_holds(parity: str,
                                                                         best: str) -> None:
    [rec] = recommend(_cands(parity))
    assert rec.best is not None and rec.best.method == best
    assert [c.method for c in rec.failed_faster] == ([] if parity == "ok" else ["fsdp"])
    assert ("FAILED parity" in "\n".join(describe(rec))) is (parity == "failed")


@pytest.mark.parametrize("n", [4, 7])
def test_mann_whitney_is_significant_both_ways_and_not_when_mixed(n: int) -> None:
    low = [1.0 + i / 100 for i in range(n)]
    high = [2.0 + i / 100 for i in range(n)]
    mixed = [1.0 + i / 100 + (0.5 if i % 2 else 0.0) for i in range(n)]
    assert mann_whitney_p(low, high) == mann_whitney_p(high, low) < ALPHA
    assert mann_whitney_p(low, mixed) >= ALPHA and mann_whitney_p(mixed, low) >= ALPHA


def one_run(rate: float, interleave: bool) -> Result:
    """One run of ddp x2 with seven windows around ``rate``: tight, or over +-15 %."""
    rates = [rate + o * (rate * 0.5 if interleave else 1.0) for o in SPREAD]
    return dataclasses.replace(case("cnn", "ddp", 2), window_s=[1000.0 / v for v in rates],
                               window_samples=[1000] * len(rates))


def test_the_runner_up_is_significant_on_a_clear_gap_and_not_on_noise() -> None:
    def rec_for(fsdp_rate: float, interleave: bool) -> recommend_mod.Recommendation:
        ok = {"status": "ok", "kind": "exact", "gap": 0.0, "tolerance": 0.015}
        ddp = dataclasses.replace(one_run(BASE_RATE, interleave), parity=ok)
        fsdp = dataclasses.replace(one_run(fsdp_rate, interleave), method="fsdp",
                                   parity=ok, config={**ddp.config, "method": "fsdp"})
        [rec] = recommend([case("cnn", "serial", 1), ddp, fsdp])
        return rec

    clear, noisy = rec_for(BASE_RATE * 0.9, False), rec_for(BASE_RATE * 0.99, True)
    assert clear.best.method == "ddp" and clear.significant and clear.runner_up_p < ALPHA
    assert noisy.best.method == "ddp" and not noisy.significant and noisy.runner_up_p >= ALPHA
    assert "difference significant" in describe(clear)[1]
    assert "difference not significant" in describe(noisy)[1]
