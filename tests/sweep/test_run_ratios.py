"""Results written by a sweep carry their ratios (``extra["ratios"]``), as the table shows them.

Run: ``pytest tests/sweep/test_run_ratios.py`` (crafted results, no case runs: a second).
"""

from __future__ import annotations

import dataclasses

from parabench.stopping import Epochs
from parabench.sweep.run import with_ratios
from sweepdata import case


def _at(r, threads: int, epoch: float):  # type: ignore[no-untyped-def]
    return dataclasses.replace(r, threads_per_worker=threads, epoch_s=[9.0, epoch, epoch])


def test_a_result_carries_both_ratios_with_their_baselines() -> None:
    serial2 = _at(case("mlp", "serial", 1), 2, 1.0)
    serial1 = _at(case("mlp", "serial", 1), 1, 1.6)
    ddp = _at(case("mlp", "ddp", 2), 1, 0.5)
    out = with_ratios(ddp, [serial2, serial1, ddp])
    ratios = out.extra["ratios"]
    assert ratios["speedup"] == 2.0 and ratios["speedup_baseline"] == "serial/cpu t=2 bs=64"
    assert ratios["scaling_efficiency"] == 1.6
    assert ratios["scaling_baseline"] == "serial/cpu t=1 bs=64" and ratios["missing"] == []
    assert with_ratios(serial2, [serial2]).extra["ratios"]["speedup"] == 1.0


def test_this_sweeps_baseline_wins_and_a_missing_one_is_named() -> None:
    ddp = _at(case("mlp", "ddp", 2), 1, 0.5)
    old = _at(case("mlp", "serial", 1), 2, 4.0)
    new = _at(case("mlp", "serial", 1), 2, 1.0)
    ratios = with_ratios(ddp, [new, ddp], earlier=[old]).extra["ratios"]
    assert ratios["speedup"] == 2.0  # this sweep's serial, not the earlier 4 s one
    assert ratios["scaling_efficiency"] is None
    assert ratios["missing"] == ["no serial at 1 thread and batch 64: add --method serial "
                                 "--threads 1 --batch-size 64"]
    assert with_ratios(ddp, [ddp], earlier=[old]).extra["ratios"]["speedup"] == 8.0
    failed = dataclasses.replace(ddp, status="failed", epoch_s=[])
    assert "ratios" not in with_ratios(failed, [new]).extra


def test_run_grid_writes_each_result_with_its_ratios(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The sweep itself (cases faked, no process started): the JSONL lines carry the ratios."""
    from parabench.case.result import read_results
    from parabench.sweep import executor, run

    seconds = {("serial", 2): 1.0, ("serial", 1): 1.6, ("ddp", 1): 0.5}

    def fake(config, **_kw):  # type: ignore[no-untyped-def]
        r = case(config.workload, config.method, config.workers)
        return dataclasses.replace(_at(r, config.threads, seconds[config.method, config.threads]),
                                   batch_size=config.batch_size)

    monkeypatch.setattr(executor, "run_isolated", fake)
    out = tmp_path / "r.jsonl"
    grid = run.Grid(workloads=["mlp"], methods=["serial", "ddp"], workers=[2], profile="tiny",
                    stop=Epochs(1), threads_per_worker=1)
    run.run_grid(grid, out=out)
    written = {(r.method, r.threads_per_worker): r.extra.get("ratios")
               for r in read_results(out)}
    assert written[("ddp", 1)]["speedup"] == 2.0, written
    assert written[("ddp", 1)]["scaling_efficiency"] == 1.6, written
    assert written[("serial", 1)]["speedup"] == 1.0, written


def test_ratios_compare_equal_work_per_sample() -> None:
    """A fedavg epoch is each of 2 clients processing serial's samples: the same epoch time
    is twice serial's throughput, so its speedup is 2 (the scaling plot's samples/s ratio);
    a result that does not know its samples gets no ratio rather than a per-epoch one."""
    serial = _at(case("mlp", "serial", 1), 2, 1.0)
    fedavg = _at(case("mlp", "fedavg", 2), 1, 1.0)
    fedavg = dataclasses.replace(fedavg, samples_per_epoch=2 * serial.samples_per_epoch)
    assert with_ratios(fedavg, [serial, fedavg]).extra["ratios"]["speedup"] == 2.0
    unknown = dataclasses.replace(fedavg, samples_per_epoch=None)
    assert "ratios" not in with_ratios(unknown, [serial]).extra
