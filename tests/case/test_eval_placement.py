"""Where time to target evaluates: between the parts of an epoch only from the epoch at whose
end serial's first measured seed reached the target; the epochs before it at their ends
(:func:`parabench.case.stopping.mid_epoch_from`). ``scripts/eval_placement.py`` measures what
that changes on real runs (docs/measurements.md, "Evaluations placed by serial's curves").
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from parabench.case.stopping import mid_epoch_from
from parabench.case.tracker import TargetTracker
from parabench.config import RunConfig
from parabench.method import EpochStats
from parabench.registry import workloads
from parabench.workloads.quality_targets import TABLE, first_reach_epoch

pytestmark = [pytest.mark.cpu]


def _curves(workload: str) -> tuple[float, list[list[float]], bool]:
    entry = json.loads(TABLE.read_text())["entries"][workload]["tiny"]
    return entry["target"], entry["curves"], entry["higher_is_better"]


@pytest.mark.parametrize("workload", ["cnn", "mlp", "conv_autoencoder", "gpt"])
def test_the_first_epoch_any_measured_seed_was_at_the_target(workload: str) -> None:
    target, curves, higher = _curves(workload)
    first = first_reach_epoch(workload, "tiny", target, higher)
    assert first is not None

    def at(q: float) -> bool:
        return q >= target if higher else q <= target

    assert any(at(c[first - 1]) for c in curves)  # a seed was there at that epoch's end
    assert not any(at(q) for c in curves for q in c[:first - 1])  # none before it
    # an unreachable target, an unmeasured profile: nothing to place by
    assert first_reach_epoch(workload, "tiny", 2.0 if higher else -1.0, higher) is None
    assert first_reach_epoch(workload, "no-such-profile", target, higher) is None


def _config(**changes: object) -> RunConfig:
    target, *_ = _curves("cnn")
    return RunConfig(workload="cnn", method="serial", profile="tiny", epochs=8,
                     target_quality=target).replace(**changes)


def test_placement_applies_only_where_serial_s_curves_describe_the_case(
        monkeypatch: pytest.MonkeyPatch) -> None:
    cnn = workloads.get("cnn")
    first = first_reach_epoch("cnn", "tiny", _config().target_quality)
    assert first is not None and first > 1 and mid_epoch_from(cnn, _config()) == first - 1
    assert mid_epoch_from(cnn, _config(method="ddp", workers=2)) == first - 1  # same math
    assert mid_epoch_from(cnn, _config(target_quality=None)) == 0
    assert mid_epoch_from(cnn, _config(batch_size=32)) == 0  # another batch: other curves
    assert mid_epoch_from(cnn, _config(options={"data_dir": "/data"})) == 0  # other data
    assert mid_epoch_from(cnn, _config(profile="full")) == 0  # no curves measured
    monkeypatch.setenv("PARABENCH_EVAL_ALL_PARTS", "1")
    assert mid_epoch_from(cnn, _config()) == 0


def test_a_calibrated_entry_for_the_user_s_data_places_the_evaluations(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--data-dir: the curves of a store entry calibrated on those files place them (here
    serial's seeds reach the target at the end of epoch 3, so from epoch index 2); another
    directory's entry does not."""
    from parabench.workloads.targetstore import ENV, current_version, data_fingerprint, write_entry

    mine, other = tmp_path / "mine", tmp_path / "other"
    for folder, text in ((mine, "a"), (other, "b")):
        folder.mkdir()
        (folder / "x.txt").write_text(text)
    store = tmp_path / "T.json"
    monkeypatch.setenv(ENV, str(store))
    write_entry(store, "cnn", "tiny", {
        "target": 0.9, "percentile": 10, "values": [0.91, 0.92], "seeds": [0, 1], "epochs": 4,
        "curves": [[0.5, 0.8, 0.9, 0.91], [0.6, 0.85, 0.88, 0.92]], "higher_is_better": True,
        "command": "parabench calibrate", "date": "2026-11-29", "device": "cpu",
        "workload_version": current_version("cnn"), "data": data_fingerprint(mine)})
    cnn = workloads.get("cnn")
    assert mid_epoch_from(cnn, _config(target_quality=0.9, options={"data_dir": str(mine)})) == 2
    assert mid_epoch_from(cnn, _config(target_quality=0.9, options={"data_dir": str(other)})) == 0
    assert mid_epoch_from(cnn, _config(target_quality=0.9, batch_size=32,
                                       options={"data_dir": str(mine)})) == 0


class _Session:
    """Counts its evaluations; the quality climbs 0.1 per evaluation from 0.5."""

    def __init__(self) -> None:
        self.evaluations = 0
        self.samples_per_epoch = 400
        self.workload = SimpleNamespace(epochs_improve=True)
        self.config = SimpleNamespace(method="serial")

    def evaluate(self) -> float:
        self.evaluations += 1
        return 0.5 + 0.1 * self.evaluations


@pytest.mark.parametrize("mid_from", [0, 2])
def test_epochs_before_the_crossing_are_evaluated_at_their_ends_only(mid_from: int) -> None:
    tracker = TargetTracker(target=0.95, higher_is_better=True, mid_from=mid_from)
    session, parts, trained = _Session(), 4, 0
    for epoch in range(5):
        for part in range(parts):
            trained += 100
            if tracker.after_part(session, EpochStats(seconds=0.1, loss=0.0, samples=100),
                                  epoch, part, parts):
                break
        if tracker.stop:
            break
    # at the ends of epochs 1..mid_from, then after every part: 0.6, 0.7, ... 1.0 reaches 0.95
    ends = [400 * (e + 1) for e in range(mid_from)]
    after = [ends[-1] if ends else 0] if mid_from else [0]
    every = [after[0] + 100 * (k + 1) for k in range(5 - len(ends))]
    assert [e[1] for e in tracker.evals] == ends + every
    assert session.evaluations == 5 and tracker.samples == trained == (ends + every)[-1]
    assert tracker.evals[tracker.reached_eval][1] == trained  # samples at the crossing
    assert tracker.qualities[:mid_from] == pytest.approx([0.6, 0.7][:mid_from])
    text = tracker.summary([0.4] * 3, None, 5)["resolution"]
    assert text.startswith("4 evaluations per epoch")
    assert ("from epoch 3, one at the end of each epoch before it" in text) == bool(mid_from)
