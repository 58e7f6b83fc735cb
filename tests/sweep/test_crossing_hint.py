"""A method graded exactly starts its mid-epoch evaluations at serial's crossing in the sweep.

``crossing_hint`` in both directions (crafted results: which baseline gives a hint, which does
not); the tracker's placement with ``eval_from``; and, through the real CLI, that such a case
stops where serial did with fewer evaluations, and that planted whole-run bugs still fail
parity with the hint in force (``tests/plugins/torch_bugs.py``).
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from parabench.case.result import Result
from parabench.case.tracker import TargetTracker
from parabench.config import RunConfig
from parabench.core.records import TimeToTarget
from parabench.method import EpochStats
from parabench.sweep.run import crossing_hint
from sweepdata import case

PLUGINS = Path(__file__).parents[1] / "plugins"
TARGET = 0.99


def _config(method: str = "ddp", **changes: object) -> RunConfig:
    base = dict(workload="cnn", method=method, workers=2, profile="tiny", epochs=10,
                target_quality=TARGET)
    return RunConfig(**{**base, **changes})  # type: ignore[arg-type]


def _serial(samples: int | None = 1664, reached: bool = True, **changes: object) -> Result:
    config = _config("serial", workers=1, **changes)
    ttt = TimeToTarget(target=config.target_quality, reached=reached,
                       samples_to_target=samples if reached else None)
    return dataclasses.replace(case("cnn", "serial", 1, epochs=2, device=config.device),
                               config=config.to_dict(), time_to_target=ttt, seed=config.seed)


@pytest.mark.parametrize("method", ["ddp", "fsdp", "pipeline"])
def test_an_exact_method_gets_serial_s_crossing(method: str) -> None:
    assert crossing_hint(_config(method), [_serial()]).eval_from == 1664
    newest_first = [_serial(1536), _serial(1664)]  # the sweep's newest baseline first
    assert crossing_hint(_config(method), newest_first).eval_from == 1536


@pytest.mark.parametrize(("config", "baselines", "why"), [
    (_config("fedavg"), [_serial()], "a statistical method measures its own crossing"),
    (_config("serial", workers=1), [_serial()], "serial itself"),
    (_config(target_quality=None), [_serial()], "fixed epochs"),
    (_config(), [], "no serial ran before it"),
    (_config(), [_serial(reached=False)], "serial did not reach the target"),
    (_config(), [_serial(target_quality=0.95)], "another target"),
    (_config(), [_serial(seed=1)], "another seed"),
    (_config(), [_serial(batch_size=32)], "another batch"),
    (_config(), [_serial(epochs=4)], "another epoch budget"),
    (_config(device="cuda"), [_serial()], "another device"),
])
def test_no_hint_where_serial_s_crossing_does_not_describe_the_case(
        config: RunConfig, baselines: list[Result], why: str) -> None:
    assert crossing_hint(config, baselines) == config, why


class _Session(SimpleNamespace):
    evaluations = 0
    qualities: tuple[float, ...] = ()

    def evaluate(self) -> float:
        self.evaluations += 1
        return self.qualities[min(self.evaluations, len(self.qualities)) - 1]


def _track(qualities: tuple[float, ...], eval_from: int = 1400) -> TargetTracker:
    session = _Session(samples_per_epoch=800, config=SimpleNamespace(method="ddp"),
                       workload=SimpleNamespace(epochs_improve=True), qualities=qualities)
    tracker = TargetTracker(target=TARGET, higher_is_better=True, eval_from=eval_from)
    for epoch in range(3):
        for part in range(8):
            if tracker.after_part(session, EpochStats(seconds=0.1, loss=0.0, samples=100),
                                  epoch, part, 8):
                break
        if tracker.stop:
            break
    return tracker


def test_the_tracker_evaluates_serial_s_crossing_only_and_stops_there() -> None:
    tracker = _track((0.995,))  # at the target where serial was: as serial's mathematics
    assert [e[1] for e in tracker.evals] == [1400] and tracker.samples == 1400
    assert tracker.evals[tracker.reached_eval][1] == 1400
    assert tracker.qualities == [None, 0.995]  # epoch 1's end was not evaluated
    summary = tracker.summary([0.1, 0.1], None, 3)
    assert summary["reached"] and summary["samples_to_target"] == 1400
    assert summary["eval_quality"] == [0.995]
    assert "evaluated once, at serial's crossing in this sweep (1,400 samples" in (
        tracker.resolution)


def test_a_method_of_whole_epochs_is_evaluated_at_the_first_epoch_end_past_the_crossing(
        ) -> None:
    session = _Session(samples_per_epoch=800, config=SimpleNamespace(method="tf_mirrored"),
                       workload=SimpleNamespace(epochs_improve=True), qualities=(0.995,))
    tracker = TargetTracker(target=TARGET, higher_is_better=True, eval_from=1400)
    stops = [tracker.after_part(session, EpochStats(seconds=0.1, loss=0.0, samples=800),
                                epoch, 0, 1) for epoch in range(2)]
    assert stops == [False, True] and session.evaluations == 1
    assert [e[1] for e in tracker.evals] == [1600] and tracker.qualities == [None, 0.995]
    assert "trains whole epochs here: the first epoch's end past it" in tracker.resolution


def test_a_method_not_at_the_target_where_serial_was_stops_there_too() -> None:
    tracker = _track((0.6, 0.995))  # it would reach it later: another mathematics
    assert [e[1] for e in tracker.evals] == [1400] and tracker.stop
    summary = tracker.summary([0.1, 0.1], None, 3)
    assert not summary["reached"] and "where serial was (1,400 samples)" in summary["reason"]
    assert "not reached where serial was" in tracker.status_line()
    # without a crossing it goes on to its own
    assert [e[1] for e in _track((0.5, 0.6, 0.995), eval_from=0).evals] == [100, 200, 300]


@pytest.mark.slow
def test_exact_methods_stop_at_serial_s_crossing_and_planted_bugs_still_fail(
        tmp_path: Path) -> None:
    out = tmp_path / "r.jsonl"
    path = os.pathsep.join(p for p in (str(PLUGINS), os.environ.get("PYTHONPATH")) if p)
    env = os.environ | {"PYTHONPATH": path, "PARABENCH_PLUGINS": "torch_bugs"}
    proc = subprocess.run(
        [sys.executable, "-m", "parabench", "run", "--workload", "cnn", "--method",
         "serial,ddp,ddp_staleorder,ddp_halfeval", "--workers", "2", "--threads", "1",
         "--profile", "tiny", "--target-quality", "--steps", "0", "--out", str(out)],
        env=env, capture_output=True, text=True, timeout=1200, cwd=tmp_path,
        stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    rows = {r["method"]: r for r in map(json.loads, out.read_text().splitlines())}
    serial = rows["serial"]["time_to_target"]
    crossing = serial["samples_to_target"]
    assert serial["reached"] and serial["epoch"] >= 2  # cnn tiny: in epoch 2
    ddp = rows["ddp"]
    assert ddp["config"]["eval_from"] == crossing
    ttt = ddp["time_to_target"]
    assert ttt["samples_to_target"] == crossing  # where serial stopped, same weights ...
    assert ddp["parity"]["status"] == "ok" and ddp["parity"]["final_weight_rel_l2"] is not None
    per_epoch = ddp["samples_per_epoch"]
    assert per_epoch < crossing and ttt["eval_samples"] == [crossing]  # ... with one look
    assert "serial's crossing" in ttt["resolution"]
    # a sampler reusing epoch 0's order would cross later (it did at 2,880): it stops at
    # serial's crossing, where its partial epoch 2 and final weights are compared and differ
    stale, half = rows["ddp_staleorder"], rows["ddp_halfeval"]["parity"]
    assert stale["config"]["eval_from"] == crossing
    assert stale["time_to_target"]["eval_samples"][-1] == crossing
    assert stale["parity"]["status"] == "failed" and stale["parity"]["trajectory_ok"], stale
    assert stale["parity"]["differs"].startswith("epoch 2 loss"), stale["parity"]
    assert half["status"] == "failed" and half["differs"].startswith("evaluation"), half
    assert "FAILED epoch 2 loss" in next(line for line in proc.stdout.splitlines()
                                         if line.startswith("ddp_staleorder"))
