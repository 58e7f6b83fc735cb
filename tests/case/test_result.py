from __future__ import annotations

import json
from pathlib import Path

import pytest

from parabench.case.result import SCHEMA, QualityValue, Result, append_result, read_results

pytestmark = pytest.mark.cpu


def _result(**changes: object) -> Result:
    base = dict(
        workload="mlp", method="serial", device="cpu", workers=1, threads_per_worker=2,
        batch_size=64, epochs=3, profile="tiny", seed=0, repeat=0, status="ok",
        startup_s=1.5, epoch_s=[0.5, 0.2, 0.3], loss=[1.0, 0.7, 0.5], eval_s=0.01,
        samples_per_epoch=1000, samples_per_s=4000.0,
        quality=QualityValue(name="accuracy", value=0.9, higher_is_better=True),
        peak_rss_mb=300.0, cpu_efficiency=0.9, env={"cores": 2}, git_commit="abc",
        timestamp="2026-01-01T00:00:00+00:00",
        config={"workload": "mlp", "method": "serial", "profile": "tiny"},
    )
    base.update(changes)
    return Result(**base)  # type: ignore[arg-type]


def test_round_trip_through_json_keeps_every_field() -> None:
    r = _result()
    data = json.loads(r.to_json())
    assert data["schema"] == SCHEMA
    required = {
        "schema", "workload", "method", "device", "workers", "threads_per_worker", "batch_size",
        "epochs", "profile", "seed", "repeat", "status", "reason", "startup_s", "epoch_s",
        "eval_s", "samples_per_s", "loss", "quality", "peak_rss_mb", "peak_gpu_mb",
        "cpu_efficiency", "env", "git_commit", "timestamp",
    }
    assert required <= set(data)
    assert Result.from_dict(data) == r


def test_steady_state_drops_the_warmup_epoch() -> None:
    r = _result(epoch_s=[5.0, 1.0, 3.0])
    assert r.steady_epoch_s == [1.0, 3.0]
    assert r.median_epoch_s == 2.0
    assert _result(epoch_s=[4.0]).median_epoch_s == 4.0


def test_other_schema_versions_are_refused() -> None:
    data = json.loads(_result().to_json())
    data["schema"] = SCHEMA + 1
    with pytest.raises(ValueError, match="schema"):
        Result.from_dict(data)


def test_unknown_status_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown status 'meh'"):
        _result(status="meh")


def test_append_writes_whole_lines_and_reader_skips_a_torn_one(tmp_path: Path) -> None:
    out = tmp_path / "r.jsonl"
    append_result(out, _result(repeat=0))
    append_result(out, _result(repeat=1))
    with out.open("a") as fh:  # what a power cut mid-write could leave behind
        fh.write(_result(repeat=2).to_json()[:40])
    with pytest.warns(UserWarning, match="skipping unreadable result"):
        got = list(read_results(out))
    assert [r.repeat for r in got] == [0, 1]
    assert all(line.endswith("}") for line in out.read_text().splitlines()[:2])


def test_case_key_matches_the_config_key() -> None:
    from parabench.config import RunConfig

    cfg = RunConfig(workload="mlp", method="serial", profile="tiny", repeat=1)
    assert _result(config=cfg.to_dict()).case_key() == cfg.key()
    assert _result(config={"bogus": 1}).case_key() is None


@pytest.mark.parametrize(("old", "new"), [("threads", "rf_threads"), ("torch", "rf_torch"),
                                          ("dask+threads+torch", "rf_dask+threads+torch")])
def test_a_result_recorded_under_a_retired_method_name_reads_under_the_new_one(
        tmp_path: Path, old: str, new: str) -> None:
    """A results file written before the random-forest engines took their ``rf_`` prefix:
    its method (and requested config's) reads as the new name, so ``--resume`` finds the
    case, and ``report`` / ``compare`` put it in the same row as a new result."""
    from parabench.config import RunConfig
    from parabench.identity import CaseId

    cfg = RunConfig(workload="random_forest", method=new, profile="tiny", workers=2)
    data = json.loads(_result(workload="random_forest", method=new, config=cfg.to_dict())
                      .to_json())
    data["method"] = data["config"]["method"] = old  # as the older version wrote it
    path = tmp_path / "old.jsonl"
    path.write_text(json.dumps(data) + "\n")
    [read] = read_results(path)
    assert read.method == new and read.config["method"] == new
    assert read.case_key() == cfg.key()  # what --resume compares
    fresh = _result(workload="random_forest", method=new, config=cfg.to_dict())
    assert CaseId.recorded(read).work == CaseId.recorded(fresh).work  # what compare pairs
