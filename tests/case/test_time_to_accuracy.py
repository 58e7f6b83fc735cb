"""Time-to-accuracy mode: held-out quality between parts of each epoch, the first evaluation
reaching the target, and the default target per workload and profile.

The logic is checked on scripted sessions whose epoch times and qualities are fixed (so sums
are exact; they train whole epochs); the real CLI and a real serial session check the
plumbing end to end. Mid-epoch evaluation itself: tests/case/test_target_parts.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest

from parabench.case import execute as execute_mod
from parabench.case.result import Result
from parabench.case.stopping import (
    DEFAULT_MAX_EPOCHS,
    default_max_epochs,
    default_target,
    fallback_target,
    mid_epoch_from,
    resolve,
    target_source,
)
from parabench.case.tracker import TargetTracker, reached
from parabench.config import ConfigError, RunConfig
from parabench.method import EpochStats, Method, Session
from parabench.registry import workloads
from parabench.stopping import Epochs, StopError, ToTarget
from parabench.sweep.run import Grid, plan
from parabench.sweep.table import format_table, summarize
from parabench.workload import Dataset, Quality, Workload
from parabench.workloads.quality_targets import quality_target

pytestmark = pytest.mark.cpu

EPOCH_S = [1.0, 2.0, 4.0, 8.0, 16.0]  # powers of two: any wrong sum shows


class Scripted(Workload):
    """A workload whose quality after epoch k is ``curve[k]``: nothing is trained."""

    name: ClassVar[str] = "scripted"
    family: ClassVar[str] = "scripted"
    quality: ClassVar[Quality] = Quality(name="accuracy", higher_is_better=True)
    curve: ClassVar[list[float]] = [0.5, 0.7, 0.8, 0.85, 0.86]

    def make_data(self, profile: str, seed: int, data_dir: str | None = None) -> Dataset:
        x = np.zeros((10, 1), dtype=np.float32)
        return Dataset(x_train=x, y_train=x[:, 0], x_test=x, y_test=x[:, 0])


class ScriptedMSE(Scripted):
    name: ClassVar[str] = "scripted_mse"
    quality: ClassVar[Quality] = Quality(name="mse", higher_is_better=False)
    curve: ClassVar[list[float]] = [0.09, 0.05, 0.03, 0.02, 0.019]


class ScriptedRefit(Scripted):
    """Like a seeded forest: every epoch is the same fit, so quality never moves."""

    name: ClassVar[str] = "scripted_refit"
    epochs_improve: ClassVar[bool] = False
    curve: ClassVar[list[float]] = [0.8] * 5


class ScriptedSession(Session):
    EVAL_SLEEP = 0.02

    def start(self) -> None:
        self.samples_per_epoch = 10
        self.trained = 0
        self.evaluations = 0

    def train_epoch(self, epoch: int) -> EpochStats:
        self.trained += 1
        return EpochStats(seconds=EPOCH_S[epoch], loss=1.0 / (epoch + 1), samples=10)

    def evaluate(self) -> float:
        time.sleep(self.EVAL_SLEEP)  # a slow evaluation must not leak into epoch times
        self.evaluations += 1
        return self.workload.curve[self.trained - 1]


class ScriptedMethod(Method):
    name: ClassVar[str] = "scripted_method"
    families: ClassVar[frozenset[str]] = frozenset({"scripted"})

    def session(self, workload: Workload, config: RunConfig) -> Session:
        self.last = ScriptedSession(workload, config)
        return self.last


@pytest.fixture
def scripted(monkeypatch: pytest.MonkeyPatch) -> ScriptedMethod:
    """execute() sees the scripted workloads and method (the real registries are untouched)."""
    method = ScriptedMethod()
    table = {w.name: w() for w in (Scripted, ScriptedMSE, ScriptedRefit)}

    class Lookup:
        def __init__(self, entries: dict[str, Any]) -> None:
            self.entries = entries

        def get(self, name: str) -> Any:
            return self.entries[name]

    monkeypatch.setattr(execute_mod, "workloads", Lookup(table))
    monkeypatch.setattr(execute_mod, "methods", Lookup({method.name: method}))
    return method


def run(workload: str, target: float | None, max_epochs: int = 5) -> Result:
    # steps=0: no speed windows; these tests count the epochs the target mode trains
    config = RunConfig(workload=workload, method="scripted_method", epochs=max_epochs,
                       target_quality=target, steps=0)
    return execute_mod.execute(config)


def test_a_method_that_reaches_the_target_stops_there_and_counts_the_warmup_once(
    scripted: ScriptedMethod,
) -> None:
    result = run("scripted", target=0.8)
    ttt = result.time_to_target
    assert result.status == "ok" and ttt is not None
    assert ttt.reached and ttt.epoch == 3 and ttt.stopped_early
    assert ttt.train_s == 1.0 + 2.0 + 4.0  # epochs 1..3, warm-up included once
    assert ttt.startup_s == result.startup_s and ttt.startup_s is not None
    assert result.epoch_s == [1.0, 2.0, 4.0]  # evaluation (sleeps) kept off the epoch clock
    assert result.epoch_quality == [0.5, 0.7, 0.8]
    assert scripted.last.trained == 3 and scripted.last.evaluations == 3  # no extra evaluate
    assert ttt.eval_s_total >= 3 * ScriptedSession.EVAL_SLEEP
    # a session that trains whole epochs is evaluated once an epoch, and the record says so
    assert ttt.evals_per_epoch == 1 and ttt.eval_samples == [10, 20, 30]
    assert ttt.samples_to_target == 30 and ttt.epochs_to_target == 3.0
    assert ttt.resolution == ("one evaluation per epoch: scripted_method trains whole epochs "
                              "here, so samples_to_target is resolved to an epoch")
    assert result.quality is not None and result.quality.value == 0.8


def test_a_method_that_never_reaches_it_says_so_after_max_epochs(
    scripted: ScriptedMethod,
) -> None:
    result = run("scripted", target=0.9, max_epochs=4)
    ttt = result.time_to_target
    assert ttt is not None and not ttt.reached
    assert ttt.reason == "not reached in 4 epochs"
    assert ttt.train_s is None and ttt.epoch is None
    assert result.epoch_quality == [0.5, 0.7, 0.8, 0.85] and ttt.best_quality == 0.85
    assert len(result.epoch_s) == 4 and result.status == "ok"


def test_lower_is_better_reaches_when_at_or_below_the_target(scripted: ScriptedMethod) -> None:
    ttt = run("scripted_mse", target=0.03).time_to_target
    assert ttt is not None and ttt.reached and ttt.epoch == 3
    assert not ttt.higher_is_better and ttt.best_quality == 0.03
    missed = run("scripted_mse", target=0.01).time_to_target
    assert missed is not None and not missed.reached and missed.best_quality == 0.019


def test_refit_workloads_time_the_first_fit_or_stop_after_it(scripted: ScriptedMethod) -> None:
    hit = run("scripted_refit", target=0.75)
    assert hit.time_to_target is not None and hit.time_to_target.epoch == 1
    assert hit.time_to_target.resolution.startswith("one evaluation per fit")
    assert hit.time_to_target.train_s == 1.0 and hit.epoch_s == [1.0]
    miss = run("scripted_refit", target=0.9)
    assert miss.time_to_target is not None and not miss.time_to_target.reached
    assert miss.time_to_target.reason == "not reached: every epoch refits the same model"
    assert miss.epoch_s == [1.0]  # nine more identical fits would prove nothing


def test_without_a_target_nothing_is_evaluated_per_epoch(scripted: ScriptedMethod) -> None:
    result = run("scripted", target=None, max_epochs=3)
    assert result.time_to_target is None and result.epoch_quality == []
    assert scripted.last.evaluations == 1 and len(result.epoch_s) == 3


def test_the_fallback_target_is_97_percent_of_serial_quick_quality() -> None:
    assert fallback_target(workloads.get("mlp")) == pytest.approx(0.97 * 0.80)
    assert fallback_target(workloads.get("random_forest")) == pytest.approx(0.97 * 0.834)
    # lower is better: the target is above the reference, by the same factor
    assert fallback_target(workloads.get("conv_autoencoder")) == pytest.approx(0.013 / 0.97)
    # every shipped workload; test plugins registered by other tests (faulty) have none
    for wl in workloads:
        if type(wl).__module__.startswith("parabench."):
            assert wl.reference_quality is not None, f"{wl.name} has no default target"
    with pytest.raises(ConfigError, match="give --target-quality Q"):
        fallback_target(Scripted())


def test_the_default_target_is_the_measured_one_else_the_fallback_said_so(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from parabench.workloads import quality_targets as targets

    entry = {"target": 0.8125, "percentile": 10, "seeds": list(range(10)), "epochs": 8,
             "command": "python scripts/quality_targets.py --profile tiny", "date": "2026-11-26"}
    monkeypatch.setattr(targets, "table", lambda: {"mlp": {"tiny": entry}})
    mlp = workloads.get("mlp")
    value, source = default_target(mlp, "tiny")
    assert value == 0.8125 and "p10 of serial's quality after 8 epoch(s) over 10 seeds" in source
    assert resolve(ToTarget(), mlp, "tiny") == ToTarget(0.8125, max_epochs=10)
    assert target_source(0.8125, mlp, "tiny") == source
    assert target_source(0.5, mlp, "tiny") == "--target-quality"
    # an unmeasured profile (or workload): the old rule, and the source says so
    value, source = default_target(mlp, "quick")
    assert value == pytest.approx(0.97 * 0.80)
    assert source == ("no measured target for mlp at quick; `parabench calibrate --workload "
                      "mlp --profile quick --seeds 3` measures one: using 0.97 x quick "
                      "reference")
    assert target_source(value, mlp, "quick") == source


def test_the_shipped_table_has_every_workload_the_default_run_trains() -> None:
    """Every workload of `parabench run` (no options: the coverage grid at tiny) and of the
    README's main job (cnn at tiny) has a measured target, at most 1 of 10 seeds below it."""
    from parabench.cli import COVERAGE_PROFILE
    from parabench.workloads.quality_targets import table

    cases = plan(Grid(coverage=True, profile=COVERAGE_PROFILE, stop=Epochs(1)))
    default_run = {c.config.workload for c in cases if c.skip_reason is None
                   # shipped ones: test plugins registered by other tests (faulty) have none
                   and type(workloads.get(c.config.workload)).__module__.startswith("parabench.")}
    assert "cnn" in default_run  # the main job's
    for name in sorted(default_run):
        entry = quality_target(name, COVERAGE_PROFILE)
        assert entry is not None, f"no measured target for {name} at {COVERAGE_PROFILE}"
        raw = table()[name][COVERAGE_PROFILE]
        assert len(raw["values"]) == len(raw["seeds"]) >= 10 and entry.epochs == raw["epochs"]
        assert raw["reached_by"] >= 0.9 * len(raw["values"]), name
        assert raw["min"] <= entry.value <= raw["max"]


def test_resolving_targets() -> None:
    mlp = workloads.get("mlp")
    assert resolve(Epochs(4), mlp, "tiny") == Epochs(4)
    assert resolve(ToTarget(0.5, max_epochs=6), mlp, "tiny") == ToTarget(0.5, max_epochs=6)
    # the cap: the measured budget where it is over the default (mlp quick's is 15)
    budget = quality_target("mlp", "quick").epochs
    assert budget > DEFAULT_MAX_EPOCHS and default_max_epochs(["mlp"], "quick") == budget
    assert resolve(ToTarget(), mlp, "quick") == ToTarget(default_target(mlp, "quick")[0],
                                                          max_epochs=budget)
    with pytest.raises(StopError):
        ToTarget(float("nan"))
    assert reached(0.8, 0.8, True) and not reached(0.79, 0.8, True)
    assert reached(0.01, 0.01, False) and not reached(0.02, 0.01, False)
    assert not reached(None, 0.5, True) and not reached(float("nan"), 0.5, False)


@pytest.mark.parametrize("name", ["cnn", "mlp", "nbow", "conv_autoencoder", "random_forest",
                                  "seq2seq", "gpt"])
def test_the_shipped_quick_entries_are_calibrated_at_serial_s_plateau(name: str) -> None:
    """The quick entries come from `parabench calibrate` (scripts/quality_targets.py
    --from-store): 10 seeds, the budget where the curves stop rising (a forest: its one fit),
    the target the 10th percentile there (90th for the MSE), samples to it per seed."""
    import numpy as np

    from parabench.workloads.quality_targets import table

    raw = table()[name]["quick"]
    assert raw["shipped_by"].startswith("python scripts/quality_targets.py --profile quick")
    assert raw["command"].startswith(f"parabench calibrate --workload {name} --profile quick")
    assert len(raw["seeds"]) == len(raw["values"]) == len(raw["samples_to_target"]) >= 10
    assert raw["epochs"] <= raw["max_epochs"] and "budget_rule" in raw
    assert all(len(c) == raw["epochs"] for c in raw["curves"])
    assert raw["values"] == [c[-1] for c in raw["curves"]]  # the quality at the budget
    higher = workloads.get(name).quality.higher_is_better
    assert raw["target"] == pytest.approx(np.percentile(raw["values"], 10 if higher else 90))
    assert raw["reached_by"] >= 0.9 * len(raw["values"])
    assert quality_target(name, "quick").value == raw["target"]


def test_the_planner_gives_each_workload_its_own_default_target() -> None:
    cases = plan(Grid(workloads=["mlp", "conv_autoencoder"], methods=["serial"],
                      profile="tiny", stop=ToTarget(max_epochs=7)))
    targets = {c.config.workload: c.config.target_quality for c in cases}
    assert targets == {name: default_target(workloads.get(name), "tiny")[0]
                       for name in ("mlp", "conv_autoencoder")}
    quick = plan(Grid(workloads=["mlp", "conv_autoencoder", "vgg11"], methods=["serial"],
                      profile="quick", stop=ToTarget(max_epochs=7)))
    assert {c.config.workload: c.config.target_quality for c in quick} == {
        "mlp": quality_target("mlp", "quick").value,  # shipped
        "conv_autoencoder": quality_target("conv_autoencoder", "quick").value,
        "vgg11": pytest.approx(0.97 * 0.859)}  # unmeasured: the fallback
    assert all(c.config.epochs == 7 for c in cases)
    # a target changes the case: --resume must not take a fixed-epoch result for it
    plain = plan(Grid(workloads=["mlp"], methods=["serial"], profile="tiny", stop=Epochs(7)))[0]
    assert plain.config.key() != cases[0].config.key()


def test_tracker_summary_of_a_run_cut_short() -> None:
    tracker = TargetTracker(target=0.9, higher_is_better=True, qualities=[0.4, 0.6])
    summary = tracker.summary([3.0, 1.0], startup_s=2.0, max_epochs=10)
    assert summary["reason"] == "not reached in 2 epochs" and summary["max_epochs"] == 10


def _result(method: str, train_s: float | None, epoch_s: float = 1.0) -> Result:
    ttt = {"reached": train_s is not None, "train_s": train_s, "epoch": 2, "startup_s": 0.5,
           "epochs_run": 2 if train_s else 10}
    return Result(workload="mlp", method=method, device="cpu", workers=2, threads_per_worker=1,
                  batch_size=64, epochs=10, profile="quick", seed=0, repeat=0, status="ok",
                  epoch_s=[epoch_s, epoch_s], time_to_target=ttt)


def test_summary_table_ranks_methods_by_time_to_target() -> None:
    rows = summarize([_result("serial", 9.0), _result("ddp", None, epoch_s=0.1),
                      _result("fedavg", 3.0)])
    assert [r.method for r in rows] == ["fedavg", "serial", "ddp"]
    table = format_table(rows)
    assert "to target" in next(ln for ln in table.splitlines() if ln.endswith("quality / status"))
    assert "3.00s (ep 2, +0.5s start)" in table and "not reached (10 ep)" in table


def test_results_keep_the_new_fields_and_old_results_still_load() -> None:
    r = _result("serial", 2.0)
    back = Result.from_dict(json.loads(r.to_json()))
    assert back.time_to_target == r.time_to_target
    old = json.loads(r.to_json())
    for key in ("time_to_target", "epoch_quality", "energy"):
        old.pop(key)
    legacy = Result.from_dict(old)
    assert legacy.time_to_target is None and legacy.epoch_quality == [] and legacy.energy is None


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "parabench", *args], capture_output=True,
                          text=True, timeout=600, stdin=subprocess.DEVNULL)


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--target-quality", "0.9", "--epochs", "3"], "give its cap as --max-epochs N"),
        (["--max-epochs", "3"], "--max-epochs caps a --target-quality run"),
        (["--target-quality", "high"], "'high' is not a finite number or 'default'"),
        (["--target-quality", "nan"], "is not a finite number"),
        (["--target-quality", "0.9", "--max-epochs", "0"], "--max-epochs"),
    ],
)
def test_contradictory_or_bad_input_exits_2(args: list[str], expected: str) -> None:
    proc = cli("run", "--workload", "mlp", "--method", "serial", "--profile", "full", *args)
    assert proc.returncode == 2, proc.stderr  # full: no measured target
    assert expected in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


@pytest.mark.torch
@pytest.mark.slow
def test_cli_reports_time_to_target_for_a_real_serial_run(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    out = tmp_path / "r.jsonl"
    proc = cli("run", "--workload", "mlp", "--method", "serial", "--profile", "tiny",
               "--target-quality", "0.3", "--max-epochs", "3", "--out", str(out), "--wide")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(out.read_text().splitlines()[-1])
    ttt = result["time_to_target"]
    assert ttt["reached"] and ttt["epoch"] == 1 and ttt["stopped_early"]  # chance is 0.1
    assert result["epochs"] == 3 and len(result["epoch_s"]) == 1
    assert ttt["train_s"] == result["epoch_s"][0] and result["epoch_quality"][0] >= 0.3
    assert result["config"]["target_quality"] == 0.3
    shown = f"({ttt['samples_to_target']:,} samples, +"  # the samples the target took (--wide)
    assert "to target" in proc.stdout and shown in proc.stdout
    assert result["energy"]["source"] is not None or result["energy"]["reason"]


@pytest.fixture(scope="module")
def serial_curve() -> Result:
    """Serial mlp at tiny for 3 epochs against a target no accuracy can reach."""
    pytest.importorskip("torch")
    config = RunConfig(workload="mlp", method="serial", profile="tiny", epochs=3,
                       threads_per_worker=1, target_quality=1.01)
    return execute_mod.execute(config)


@pytest.mark.torch
@pytest.mark.slow
def test_a_target_above_serials_best_is_not_reached(serial_curve: Result) -> None:
    ttt = serial_curve.time_to_target
    assert serial_curve.status == "ok", serial_curve.reason
    assert ttt is not None and not ttt.reached and ttt.reason == "not reached in 3 epochs"
    assert len(serial_curve.epoch_quality) == 3 == len(serial_curve.epoch_s)
    assert serial_curve.epoch_quality == ttt.eval_quality[7::8]  # each epoch's last
    assert ttt.best_quality == max(serial_curve.epoch_quality) < 1.01
    assert serial_curve.quality is not None
    assert serial_curve.quality.value == serial_curve.epoch_quality[-1]


@pytest.mark.torch
@pytest.mark.slow
def test_serials_own_best_is_reached_at_the_evaluation_it_was_first_seen(
    serial_curve: Result, monkeypatch: pytest.MonkeyPatch,
) -> None:
    full = serial_curve.time_to_target
    assert full is not None and full.evals_per_epoch == 8 and len(full.eval_quality) == 24
    best = max(q for q in full.eval_quality if q is not None)
    first = next(i for i, q in enumerate(full.eval_quality) if q is not None and q >= best - 1e-6)
    config = RunConfig(workload="mlp", method="serial", profile="tiny", epochs=3,
                       threads_per_worker=1, target_quality=best - 1e-6)
    placed = execute_mod.execute(config)  # epochs before serial's first crossing: ends only
    mid = mid_epoch_from(workloads.get("mlp"), config)
    assert 0 < mid <= first // 8  # what this test is about: the crossing is past the ends
    monkeypatch.setenv("PARABENCH_EVAL_ALL_PARTS", "1")
    result = execute_mod.execute(config)
    ttt = result.time_to_target
    assert ttt is not None and ttt.reached and ttt.epoch == first // 8 + 1
    # the same trajectory: the same qualities at the same samples, up to the stop
    assert ttt.eval_quality == full.eval_quality[: first + 1]
    assert ttt.samples_to_target == full.eval_samples[first] == 256 * (first + 1)
    assert ttt.train_s == pytest.approx(sum(result.epoch_s))
    assert len(result.epoch_s) == first // 8 + 1  # stopped there (maybe mid-epoch)
    # placed: the same crossing, the epochs before it evaluated at their ends only
    pt = placed.time_to_target
    assert pt is not None and pt.samples_to_target == ttt.samples_to_target
    ends = [full.eval_quality[8 * e + 7] for e in range(min(mid, first // 8))]
    assert pt.eval_quality == ends + full.eval_quality[8 * len(ends): first + 1]


def test_torchrun_launcher_takes_the_same_target(monkeypatch: pytest.MonkeyPatch) -> None:
    from parabench.cli.torchrun import config_from, parse_args

    monkeypatch.setenv("WORLD_SIZE", "2")
    base = ["--workload", "mlp", "--method", "ddp", "--out", "r.jsonl"]  # parabench run's args
    base_max = [*base, "--max-epochs", "6"]  # with a target, the cap is --max-epochs
    config = config_from(parse_args([*base_max, "--target-quality", "default"]), threads=1)
    assert config.target_quality == quality_target("mlp", "quick").value and config.epochs == 6
    assert config_from(parse_args([*base_max, "--target-quality", "0.5"]), 1).target_quality == 0.5
    # no flag: the measured target where there is one (as `parabench run`), else fixed epochs
    assert config_from(parse_args(base), threads=1).target_quality == config.target_quality
    full = config_from(parse_args([*base, "--profile", "full"]), threads=1)
    assert full.target_quality is None


def test_a_killed_case_keeps_the_qualities_it_printed(tmp_path: Path) -> None:
    """The runner salvages a timed-out worker's epochs; in this mode its qualities too."""
    from parabench.case.isolate import _salvaged

    log = tmp_path / "out.log"
    tracker = TargetTracker(target=0.9, higher_is_better=True)
    lines = ["starting", f"target 0.9: {tracker.source}"]
    for epoch, quality in enumerate([0.41, 0.62], 1):  # two parts an epoch, 100 samples each
        for part in range(2):
            tracker.record(quality - 0.1 * (1 - part), epoch=epoch - 1, part=part, parts=2,
                           samples=100, seconds=EPOCH_S[epoch - 1] / 2)
            lines.append(tracker.status_line())
        lines.append(f"epoch {epoch}/10 {EPOCH_S[epoch - 1]:.3f}s loss 0.5000")
    tracker.record(0.95, epoch=2, part=0, parts=2, samples=100, seconds=2.0)
    lines.append(tracker.status_line())  # reached in the third epoch, then killed
    assert lines[-1].endswith("(500 samples, 5.000000s training): reached, stopping early")
    log.write_text("\n".join(lines) + "\n")
    config = RunConfig(workload="mlp", method="serial", epochs=10, target_quality=0.9)
    result = _salvaged(config, "timeout", "killed", log)
    assert result.status == "timeout" and result.epoch_s == [1.0, 2.0]
    assert result.epoch_quality == pytest.approx([0.41, 0.62, 0.95])
    ttt = result.time_to_target
    assert ttt is not None and ttt.reached and ttt.samples_to_target == 500
    assert ttt.train_s == 5.0 and ttt.epoch == 3 and ttt.epochs_to_target == 2.5
    assert ttt.eval_samples == [100, 200, 300, 400, 500] and ttt.evals_per_epoch == 2
    assert ttt.max_epochs == 10 and ttt.startup_s is None
    lines = [ln for ln in lines if "0.95" not in ln]  # killed before it got there
    log.write_text("\n".join(lines) + "\n")
    missed = _salvaged(config, "timeout", "killed", log).time_to_target
    assert missed is not None and missed.reason == "not reached in 2 epochs"
    assert missed.samples_to_target is None and missed.best_quality == 0.62
    plain = _salvaged(config.replace(target_quality=None), "timeout", "killed", log)
    assert plain.time_to_target is None and plain.epoch_quality == []


def test_a_killed_case_s_epochs_without_an_evaluation_read_none() -> None:
    """Held past the target (fedavg) or graded at serial's crossing (ddp), a case evaluates
    some epochs not at all: the salvaged qualities stay aligned with its epochs."""
    from parabench.case.stopping import salvage

    def lines(*evals: tuple[float, int, int, int]) -> list[str]:
        tracker = TargetTracker(target=0.9, higher_is_better=True, hold_epochs=8)
        out = []
        for quality, epoch, part, parts in evals:
            tracker.record(quality, epoch=epoch, part=part, parts=parts, samples=100,
                           seconds=1.0)
            out.append(tracker.status_line())
        return out

    held = RunConfig(workload="cnn", method="fedavg", workers=2, epochs=10, profile="tiny",
                     target_quality=0.9)
    # reached at epoch 2's end, killed in epoch 5 while held: epochs 3 and 4 not evaluated
    out = salvage(held, lines((0.5, 0, 0, 1), (0.95, 1, 0, 1)), [1.0] * 4)
    assert out["epoch_quality"] == [0.5, 0.95, None, None]
    assert out["time_to_target"].reached and out["time_to_target"].converged_quality is None
    exact = held.replace(method="ddp", eval_from=1_500)
    # evaluated only at serial's crossing, in epoch 2; killed before the epoch's end
    out = salvage(exact, lines((0.95, 1, 5, 8)), [1.0])
    assert out["epoch_quality"] == [None, 0.95]


def test_a_last_epoch_cut_short_is_no_steady_epoch() -> None:
    """Time to target stopped it between parts: its seconds are a part's, not an epoch's."""
    from dataclasses import replace

    cut = replace(_result("serial", 3.5), epoch_s=[1.0, 2.0, 0.5],
                  components={"forward": [0.5, 1.0, 0.25]},
                  time_to_target={"reached": True, "train_s": 3.5, "epochs_to_target": 2.25})
    assert cut.steady_epoch_s == [2.0] and cut.median_components() == {"forward": 1.0}
    whole = replace(cut, time_to_target={"reached": True, "epochs_to_target": 3.0})
    assert whole.steady_epoch_s == [2.0, 0.5]
    alone = replace(cut, epoch_s=[0.5])  # stopped in its first epoch: all there is
    assert alone.steady_epoch_s == [0.5]


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--workload", "mlp"], 24),  # its measured budget is longer than the default cap
        (["--workload", "cnn"], 10),
        (["--workload", "cnn,mlp"], 24),
        (["--workload", "mlp", "--max-epochs", "5"], 5),  # asked for: kept
        (["--workload", "mlp", "--profile", "quick"], 10),  # nothing measured there
    ],
)
def test_max_epochs_default_reaches_the_measured_budget(
        monkeypatch: pytest.MonkeyPatch, args: list[str], expected: int) -> None:
    """A statistical case is judged where it trained on to its target's budget
    (:func:`hold_epochs`): the default cap must let it get there."""
    from parabench import cli as cli_mod
    from parabench.case import stopping as target_mod
    from parabench.workloads.quality_targets import TargetEntry

    budgets = {("mlp", "tiny"): 24, ("cnn", "tiny"): 8}
    monkeypatch.setattr(target_mod, "quality_target", lambda name, profile: (
        TargetEntry(0.8, "test", budgets[name, profile], 10)
        if (name, profile) in budgets else None))
    parsed = cli_mod.build_parser().parse_args(
        ["run", "--method", "serial,fedavg", "--profile", "tiny", "--target-quality", *args])
    assert cli_mod.grid_from(parsed).stop.max_epochs == expected
