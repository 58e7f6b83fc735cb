"""The dry run's cost model: fitted per-unit costs, back-off, leave-one-out error, the history
file, and the dry run's text with and without it.

Run: ``pytest tests/sweep/test_costmodel.py`` (synthetic rows and crafted results; nothing
trains). ``data/main_job_costs.jsonl`` holds the cost rows of a real run of the README's main
job on a 2-core CPU (``tests/data/main_job_tiny.jsonl`` is the same run's results, as the
table test trims them).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from parabench.case import windows
from parabench.case.result import Result, read_results
from parabench.case.windows import rule_id, window_target_s
from parabench.config import RunConfig
from parabench.core.records import TimeToTarget
from parabench.registry import methods
from parabench.stopping import Epochs
from parabench.sweep import costs, run
from parabench.sweep.costmodel import CostModel, Plan, counts, row_plan
from parabench.sweep.costs import row_values
from parabench.sweep.dryrun import declared_for, declared_parts, describe_plan, planned
from parabench.sweep.plan import Case
from sweepdata import case

pytestmark = pytest.mark.cpu
M = "Test CPU | 2 cores | no gpu"
MAIN_JOB = Path(__file__).parents[1] / "data" / "main_job_costs.jsonl"


@pytest.fixture(autouse=True)
def _default_window_length(monkeypatch: pytest.MonkeyPatch) -> None:
    """The rows below name today's default window rule: not the suite's short windows; and
    they are of cases started plainly (no ``prestart_s``), as the cost model expects with
    ``PARABENCH_PRESTART=0``."""
    monkeypatch.delenv("PARABENCH_WINDOW_S", raising=False)
    monkeypatch.setenv("PARABENCH_PRESTART", "0")


def row(method: str = "serial", workers: int = 1, threads: int = 2, *, fixed: float = 4.0,
        epoch: float = 1.0, trained: float = 2.0, evals: int = 1, per_eval: float = 0.5,
        windows: float = 5.0, machine: str = M, workload: str = "cnn", **kw: Any
        ) -> dict[str, Any]:
    """A history row with known per-unit costs (fixed all in ``start``)."""
    parts = {"start": fixed, "train": epoch * trained, "evaluate": per_eval * evals,
             "windows": windows}
    return {"t": kw.pop("t", "2026-01-01T00:00:00"), "machine": machine, "cores": 2,
            "workload": workload, "method": method, "device": "cpu", "workers": workers,
            "threads": threads, "profile": "tiny", "batch": None, "epochs": 3, "seed": 0,
            "target": None, "math": [], "wall_s": sum(parts.values()), "parts": parts,
            "trained": trained, "evals": evals, "per_epoch": None, "mid_from": 0,
            "reach": None, "held": None, "status": "ok",
            "window_rule": rule_id(window_target_s(), None), **kw}


def plan(method: str = "serial", workers: int = 1, threads: int = 2, **kw: Any) -> Plan:
    return Plan(workload="cnn", method=method, workers=workers, threads=threads,
                profile="tiny", cores=2, declared=(7.0, 3.0), **kw)


HISTORY = [row(), row(fixed=4.2, t="2026-01-02"), row(fixed=3.8, t="2026-01-03"),
           row("ddp", 2, 1, fixed=3.0, epoch=0.6, per_eval=0.4, windows=4.0)]


def test_the_fit_recovers_the_recorded_per_unit_costs() -> None:
    model = CostModel.fit(HISTORY, M)
    est = model.estimate(plan(epochs=3))
    assert est.parts == pytest.approx({"fixed": 4.0, "train": 3.0, "evaluate": 0.5,
                                       "windows": 5.0})
    assert est.seconds == pytest.approx(12.5)
    assert set(est.levels.values()) == {"case"} and est.same == 3 and not est.guessed
    # more epochs cost more, by the recorded epoch; a method recorded faster costs less
    assert model.estimate(plan(epochs=5)).seconds == pytest.approx(14.5)
    ddp = model.estimate(plan("ddp", 2, 1, epochs=3))
    assert ddp.parts == pytest.approx({"fixed": 3.0, "train": 1.8, "evaluate": 0.4,
                                       "windows": 4.0})
    assert ddp.seconds < est.seconds


def test_more_evaluations_cost_more() -> None:
    target = dict(target=0.9, epochs=10)
    rows = [row(per_eval=0.5, evals=14, per_epoch=8, target=0.9, reach=1.75, trained=1.75)]
    model = CostModel.fit(rows, M)
    every_part = model.estimate(plan(**target))
    from_epoch_2 = model.estimate(plan(mid_from=1, **target))
    assert (every_part.evals, from_epoch_2.evals) == (14, 7)
    assert every_part.epochs == from_epoch_2.epochs == 1.75  # the recorded reach
    assert every_part.seconds - from_epoch_2.seconds == pytest.approx(7 * 0.5)


def test_a_missing_key_backs_off_to_coarser_ones_then_to_the_declared_guess() -> None:
    model = CostModel.fit(HISTORY, M, declared=declared_for)
    one_thread = model.estimate(plan(threads=1, epochs=1))  # serial 1x1: not recorded
    assert one_thread.levels == {"fixed": "method", "train": "workload",
                                 "evaluate": "workload", "windows": "method"}
    assert one_thread.parts["fixed"] == pytest.approx(4.0)  # serial at 1 worker, any threads
    # the workload's epoch in core-seconds (serial's three 1.0 x 2 cores, ddp's 0.6 x 2): its
    # median, on 1 core
    assert one_thread.parts["train"] == pytest.approx(2.0)
    unknown = model.estimate(plan("fsdp", 2, 1, epochs=2))
    # the declared 7.0 s, times this machine's recorded fixed costs against their declarations
    assert unknown.levels["fixed"] == "guess"
    assert unknown.parts["fixed"] == pytest.approx(7.0 * model.factors["fixed"])
    assert unknown.guessed == ["fixed", "windows"]  # ddp's epoch and evaluations stand in
    other = model.estimate(Plan(workload="mlp", method="serial", threads=2, profile="tiny",
                                cores=2, declared=(7.0, 3.0)))  # 3 epochs of an mlp: never
    assert other.levels["train"] == "guess"
    assert other.parts["train"] == pytest.approx(3 * 3.0 * model.factors["train"])


@pytest.mark.parametrize("speed", [0.5, 2.0])
def test_guesses_scale_by_this_machine_against_the_declarations(speed: float) -> None:
    """A machine whose recorded cases took ``speed`` x their declared start-up and epoch
    gets ``speed`` x the declarations for a case nothing recorded resembles."""
    def recorded(method: str, workers: int, threads: int) -> dict[str, Any]:
        start, epoch = declared_parts(RunConfig(workload="cnn", method=method, workers=workers,
                                                threads_per_worker=threads, profile="tiny"))
        return row(method, workers, threads, fixed=speed * start, epoch=speed * epoch)

    model = CostModel.fit([recorded("serial", 1, 2), recorded("ddp", 2, 1)], M,
                          declared=declared_for)
    assert model.factors["fixed"] == pytest.approx(speed)
    assert model.factors["train"] == pytest.approx(speed)
    unknown = model.estimate(plan("fsdp", 2, 1, epochs=2))  # declared (7.0, 3.0) here
    assert unknown.levels["fixed"] == "guess"
    assert unknown.parts["fixed"] == pytest.approx(speed * 7.0)


def test_leave_one_out_predicts_each_row_from_the_others() -> None:
    """Three runs of one case, 10, 11 and 13 s (only start-up differs): each is predicted by
    the median of the other two: 12, 11.5 and 10.5."""
    rows = [row(fixed=f, epoch=0, evals=0, windows=0, t=str(i))
            for i, f in enumerate((10.0, 11.0, 13.0))]
    err = CostModel.fit(rows, M).error()
    assert err is not None and err.n == 3
    assert err.median == pytest.approx(2.5 / 13)
    assert err.p90 == pytest.approx(0.2 - (0.2 - 2.5 / 13) * 0.2)  # inclusive 90th pct
    assert err.total == pytest.approx((12 + 11.5 + 10.5 - 34) / 34)
    assert CostModel.fit(rows[:1], M).error() is None


def test_the_counts_follow_the_evaluation_rules() -> None:
    to_target = plan(target=0.9, epochs=10)
    assert counts(plan(epochs=3), None, 8) == (3.0, 1)  # fixed epochs: one final evaluation
    assert counts(to_target, 1.75, 8) == (1.75, 14)  # 8 in epoch 1, 6 parts of epoch 2
    mid = dataclasses.replace(to_target, mid_from=1)
    assert counts(mid, 1.75, 8) == (1.75, 7)  # epoch 1 at its end only
    assert counts(to_target, None, 8) == (10.0, 80)  # never reached: every part of every epoch
    held = dataclasses.replace(to_target, hold=8)  # fedavg: to its target, then the hold's end
    assert counts(held, 1.5, 2) == (8.0, 2 + 1 + 1)
    assert counts(held, 2.0, 1) == (8.0, 3)
    assert counts(held, 8.0, 1) == (8.0, 8)  # reached at the hold's end: nothing held
    crossing = dataclasses.replace(mid, crossing=True)  # ddp at serial's crossing: 1, not 7
    assert counts(crossing, 1.75, 8) == (1.75, 1)
    assert counts(crossing, 3.0, 8) == (3.0, 1)
    # a row recorded before (no evals_sparse): every held epoch's end, the crossing's epochs'
    old_held, old_crossing = (dataclasses.replace(p, sparse=False) for p in (held, crossing))
    assert counts(old_held, 1.5, 2) == (8.0, 10)  # fedavg 2x1 in the main job: 10 evaluations
    assert counts(old_held, 2.0, 1) == (8.0, 8)
    assert counts(old_crossing, 1.75, 8) == (1.75, 2)
    assert counts(old_crossing, 3.0, 8) == (3.0, 3)  # crossing at an epoch's end: that end
    assert row_plan(row()).sparse is False and row_plan(row(evals_sparse=True)).sparse


def test_the_main_jobs_rows_reproduce_what_it_recorded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(windows, "WINDOW_TARGET_S", 0.5)  # the window rule it was recorded under
    monkeypatch.setattr(windows, "WINDOWS", 8)
    monkeypatch.setattr(windows, "MAX_WINDOWS", 16)
    # and fedavg trained its windows apart from its rounds for quality
    monkeypatch.setattr(methods.get("fedavg"), "windows_from_training", False)
    rows = [json.loads(line) for line in MAIN_JOB.read_text().splitlines()]
    serial, fedavg = rows[0], rows[-1]
    assert (serial["trained"], serial["evals"], serial["per_epoch"], serial["reach"]) == (
        1.75, 14, 8, 1.75)
    assert (fedavg["trained"], fedavg["evals"], fedavg["held"]) == (8.0, 10, 8)
    model = CostModel.fit(rows, serial["machine"])
    for r in rows:  # with every row in, its own counts come back
        est = model.estimate(row_plan(r))
        assert (est.epochs, est.evals) == (r["trained"], r["evals"]), r["method"]
    err = model.error()
    assert err is not None and err.n == 10
    assert err.median < 0.10 and err.p90 < 0.20 and abs(err.total) < 0.05


def test_windows_recorded_under_another_window_rule_are_not_used() -> None:
    old = row(windows=4.5, window_rule="0.5s x8+ci..16")  # before the rule changed
    assert "windows" not in row_values(old) and "windows" not in row_values(
        row(window_rule=None))  # a row from before rows named their rule
    assert "windows" not in row_values(row(window_rule="0.25s x5+ci"))  # before at most 8
    assert row_values(row(windows=2.0))["windows"] == 2.0
    model = CostModel.fit([old], M)
    assert model.estimate(plan()).levels["windows"] == "guess"


def test_start_up_comes_only_from_rows_started_as_today_s_case_will_be(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A case forked from a pre-started interpreter (core.prestart) has no imports in its
    start-up: rows of plainly started cases would price it seconds too high, and the other
    way round. The servers' imports are priced once a sweep."""
    fresh, forked = row(fixed=4.0), row(fixed=1.0, prestart_s=2.0)
    assert row_values(fresh)["fixed"] == 4.0 and "fixed" not in row_values(forked)
    monkeypatch.delenv("PARABENCH_PRESTART")  # the default: torch cases fork
    assert "fixed" not in row_values(fresh) and row_values(forked)["fixed"] == 1.0
    forest = row(fixed=3.0, workload="random_forest")  # never forked: plain rows serve it
    assert row_values(forest)["fixed"] == 3.0
    assert CostModel.fit([fresh, forked], M).prestart_s == 2.0
    both = describe_plan(_cases(), previous=[], history=[fresh, forked], machine=M,
                        reference=[])
    monkeypatch.setenv("PARABENCH_PRESTART", "0")
    plain = describe_plan(_cases(), previous=[], history=[fresh, forked], machine=M,
                        reference=[])
    # serial's line: 1.0 s fixed + 2 + 0.5 + 5 forked, 4.0 s fixed + 7.5 started plainly
    assert "cnn/serial cpu w=1 t=2 bs=default r0  ~0m09s" in both
    assert "cnn/serial cpu w=1 t=2 bs=default r0  ~0m12s" in plain


def test_a_pool_method_s_start_up_comes_only_from_rows_whose_ranks_started_as_today_s(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A forked case forks its pool's ranks too (core.rankfork): no interpreter nor torch
    import per rank. A row from before (no ``ranks_forked``: spawned ranks) or with spawned
    ranks would price it seconds too high; serial, which starts no pool, is priced by its
    rows either way; started plainly, only spawned ranks' rows count."""
    monkeypatch.delenv("PARABENCH_PRESTART")  # the default: torch cases fork
    old = row("ddp", 2, 1, fixed=5.0, prestart_s=2.0)  # recorded before ranks could fork
    spawned = row("ddp", 2, 1, fixed=5.0, prestart_s=2.0, ranks_forked=False)
    forked = row("ddp", 2, 1, fixed=0.5, prestart_s=2.0, ranks_forked=True)
    assert "fixed" not in row_values(old) and "fixed" not in row_values(spawned)
    assert row_values(forked)["fixed"] == 0.5
    assert row_values(row(fixed=1.0, prestart_s=2.0))["fixed"] == 1.0  # serial, before
    assert row_values(row(fixed=1.0, prestart_s=2.0, ranks_forked=None))["fixed"] == 1.0
    monkeypatch.setenv("PARABENCH_PRESTART", "0")
    plain = row("ddp", 2, 1, fixed=5.0, ranks_forked=False)
    assert row_values(plain)["fixed"] == 5.0 and row_values(row("ddp", 2, 1))["fixed"] == 4.0


def test_rows_of_another_machine_are_left_out() -> None:
    model = CostModel.fit([*HISTORY, row("fsdp", 2, 1, machine="Other CPU | 64 cores | x")], M)
    assert len(model.rows) == 4
    assert model.estimate(plan("fsdp", 2, 1)).levels["fixed"] == "guess"
    assert CostModel.fit(HISTORY, "Other CPU | 64 cores | x").rows == []


def _result(wall: float = 9.0, stamp: str = "2026-01-01T00:00:00", **kw: Any) -> Result:
    r = case("mlp", "serial", 1, epochs=2)
    return dataclasses.replace(r, wall_s=wall, timestamp=stamp, wall_parts={
        "launch": 0.3, "start": 2.0, "train": 2.0, "evaluate": 0.2, "windows": wall - 4.5}, **kw)


def test_a_result_becomes_a_compact_history_row() -> None:
    ttt = TimeToTarget(reached=True, epochs_to_target=1.75, evals_per_epoch=8,
                       eval_samples=list(range(7)), mid_epoch_from=1, resolution=(
                           "8 evaluations per epoch from epoch 2, one at the end of each "
                           "epoch before it (...)"))
    r = costs.cost_row(_result(time_to_target=ttt))
    assert r is not None
    assert (r["machine"], r["trained"], r["evals"], r["mid_from"], r["reach"]) == (
        "Test CPU | 2 cores | no gpu", 1.75, 7, 1, 1.75)
    assert row_values(r)["fixed"] == pytest.approx(2.3)
    assert costs.cost_row(dataclasses.replace(_result(), status="failed")) is None
    assert costs.cost_row(dataclasses.replace(_result(), wall_parts={})) is None


def test_the_history_appends_and_keeps_the_newest_lines_past_its_cap(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PARABENCH_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(costs, "CAP", 5)
    monkeypatch.setattr(costs, "KEEP", 3)
    for i in range(6):
        assert costs.append_costs(_result(wall=9.0 + i)) is None
    walls = [r["wall_s"] for r in costs.read_costs()]
    assert walls == [12.0, 13.0, 14.0]  # cut to the newest 3 when the 6th went past 5
    assert costs.append_costs(_result(wall=20.0)) is None
    assert len(list(costs.read_costs())) == 4
    with costs.history_path().open("a") as f:  # type: ignore[union-attr]
        f.write('{"torn": \n' + json.dumps({**costs.cost_row(_result()), "workload": None})
                + "\n")
    assert len(list(costs.read_costs())) == 4  # a torn or foreign line is skipped
    monkeypatch.setenv("PARABENCH_CACHE_DIR", "off")
    assert costs.append_costs(_result()) is None and list(costs.read_costs()) == []


def test_an_unwritable_history_never_fails_a_sweep(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("PARABENCH_CACHE_DIR", str(tmp_path / "file" / "cache"))
    assert "NotADirectoryError" in (costs.append_costs(_result()) or "")

    class Fake:
        name, ordered = "fake", True

        def gather(self, cases, *, workdir, progress, hint=None):  # type: ignore[no-untyped-def]
            for c in cases:
                yield c, dataclasses.replace(_result(), workers=c.config.workers,
                                             threads_per_worker=c.config.threads)

    grid = run.Grid(workloads=["mlp"], methods=["serial", "ddp"], workers=[2], profile="tiny",
                    stop=Epochs(1), threads_per_worker=1)
    out = tmp_path / "r.jsonl"
    results = run.run_grid(grid, out=out, executor=Fake())
    assert {r.status for r in results} == {"ok"} and len(results) > 1
    assert len(list(read_results(out))) == len(results)
    warned = [ln for ln in capsys.readouterr().err.splitlines() if "cost history" in ln]
    assert len(warned) == 1 and "the sweep goes on" in warned[0]


def test_a_sweep_appends_what_it_ran(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PARABENCH_CACHE_DIR", str(tmp_path / "cache"))

    class Fake:
        name, ordered = "fake", True

        def gather(self, cases, *, workdir, progress, hint=None):  # type: ignore[no-untyped-def]
            for c in cases:
                yield c, _result()

    run.run_grid(run.Grid(workloads=["mlp"], methods=["serial"], profile="tiny",
                          stop=Epochs(1), threads_per_worker=1),
                 out=tmp_path / "r.jsonl", executor=Fake())
    assert [r["method"] for r in costs.read_costs()] == ["serial"]


def _cases() -> list[Case]:
    cfg = RunConfig(workload="cnn", method="serial", profile="tiny", epochs=3,
                    threads_per_worker=2)
    return [Case(config=cfg), Case(config=cfg.replace(method="fsdp", workers=2,
                                                      threads_per_worker=1))]


def test_the_dry_run_without_history_guesses_as_before() -> None:
    text = describe_plan(_cases(), previous=[], history=[], machine=M, reference=[])
    assert "cnn/serial cpu w=1 t=2 bs=default r0  ~0m" in text and "?" in text
    assert "model" not in text and "±" not in text
    assert "estimated" in text and "guessed (no earlier results of these cases in --out)" in text
    other = describe_plan(_cases(), previous=[], machine=M, reference=[],
                          history=[row(machine="Other CPU | 8 cores | no gpu")])
    assert other == text  # another machine's rows: as if none


def test_the_dry_run_with_history_says_the_model_and_its_error() -> None:
    text = describe_plan(_cases(), previous=[], history=HISTORY, machine=M, reference=[])
    serial, fsdp, _, total = text.splitlines()[1:]
    assert serial.endswith("~0m12s (model: 4 case(s) of this machine, 3 of this case)")
    assert "?" in fsdp and "guessed: start-up, windows" in fsdp
    err = CostModel.fit(HISTORY, M).error()
    assert err is not None
    assert (f"± {err.median * 100:.0f} % (leave-one-out over 4 recorded cases of this machine)"
            in total)
    assert total.startswith("2 case(s) planned: 2 to run, 0 skipped; estimated ")
    assert "1 partly guessed (marked ?)" in total


def test_the_out_files_results_count_once() -> None:
    ran = _result(wall=12.0)  # in --out and in the history: one case
    text = describe_plan(_cases()[:1], previous=[ran], history=[costs.cost_row(ran)],
                         machine=M, reference=[])
    assert "(model: 1 case(s) of this machine; guessed: epochs" in text  # an mlp ran
    assert "± ? (1 recorded case of this machine: too few to measure the error)" in text


def test_planned_counts_time_to_target_cases_by_the_codes_rules() -> None:
    cfg = RunConfig(workload="cnn", method="fedavg", profile="tiny", epochs=10, workers=2,
                    threads_per_worker=1, target_quality=0.99)
    p = planned(cfg, cores=2)
    assert p.target == 0.99 and p.per_epoch_guess == 2 and p.cores == 2
    assert planned(cfg.replace(target_quality=None)).per_epoch_guess == 1
    # a method graded exactly stops at serial's crossing; fedavg and serial itself do not
    assert not p.crossing and not planned(cfg.replace(method="serial", workers=1)).crossing
    assert planned(cfg.replace(method="ddp")).crossing
    assert not planned(cfg.replace(method="ddp", target_quality=None)).crossing


def test_a_history_row_says_whether_it_stopped_at_serial_s_crossing() -> None:
    hinted = _result(config={"eval_from": 1664, "target_quality": 0.99})
    assert costs.cost_row(hinted)["crossing"] and row_plan(costs.cost_row(hinted)).crossing
    assert not costs.cost_row(_result())["crossing"]


def test_fedavg_s_windows_come_only_from_rows_that_timed_its_rounds_trained_for_quality(
        ) -> None:
    """In time-to-target mode fedavg times the rounds it trained for quality as its windows
    (Method.windows_from_training): a row from before (no ``windows_trained``) trained its
    windows apart and would price today's seconds too high; with fixed epochs, or for a
    method whose windows are always trained apart, old rows still say what windows cost."""
    old = row("fedavg", 2, 1, windows=9.0, target=0.98)
    new = row("fedavg", 2, 1, windows=0.0, target=0.98, windows_trained=6)
    assert "windows" not in row_values(old) and row_values(new)["windows"] == 0.0
    assert row_values(row("fedavg", 2, 1, windows=9.0))["windows"] == 9.0  # fixed epochs
    assert row_values(row("ddp", 2, 1, windows=2.0, target=0.98))["windows"] == 2.0
