"""torchrun's entry point is `parabench run`'s parser and the runner's tail, not a second CLI.

The lifecycle itself is faked here (it is the one every front end runs, tested elsewhere, and
under real torchrun by tests/methods/test_ddp_fsdp.py); what is checked is what rank 0 does with its
result: stamped, graded against the baselines already in ``--out``, appended.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

import sweepdata
from parabench.case.result import Facts, read_results

pytestmark = pytest.mark.cpu


@pytest.fixture
def rank0(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0",
                        "OMP_WAIT_POLICY": "PASSIVE"}.items():
        monkeypatch.setenv(name, value)


def test_a_torchrun_result_is_stamped_graded_and_appended_as_the_runner_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, rank0: None,
) -> None:
    from parabench.cli import torchrun as launch

    serial = sweepdata.case("cnn", "serial", 1)  # 2 threads: the speedup's baseline
    out = sweepdata.write(tmp_path / "r.jsonl",
                          [serial, dataclasses.replace(serial, threads_per_worker=1)])
    ddp = dataclasses.replace(sweepdata.case("cnn", "ddp", 2), parity=None, facts=Facts(
        rank_max_rss_mb=[300.0, 310.0], rank_threads=[1, 1], rank_hosts=["h", "h"]))
    seen = {}

    def execute(config, progress=None, launcher=None):  # noqa: ANN001, ANN202
        seen["config"] = config
        return ddp

    monkeypatch.setattr("parabench.case.execute.execute", execute)
    monkeypatch.setattr(launch, "set_threads", lambda n: n)
    argv = ["--workload", "cnn", "--method", "ddp", "--profile", "tiny", "--epochs", "6",
            "--threads", "1", "--out", str(out)]
    assert launch.main(argv) == 0
    config = seen["config"]
    assert (config.workers, config.threads, config.timeout_s) == (2, 1, 600.0)  # run's default
    row = list(read_results(out))[-1]
    assert row.method == "ddp" and row.parity is not None and row.parity.status == "ok"
    ratios = row.extra["ratios"]
    assert ratios["speedup"] is not None and ratios["scaling_efficiency"] is not None, ratios
    assert row.extra["launcher"] == "torchrun" and row.peak_rss_mb == 610.0
    assert row.machine is not None and row.machine.cores
    assert row.env and row.git_commit is not None and row.timestamp


@pytest.mark.parametrize("extra", [["--method", "ddp,fsdp"], ["--repeats", "2"], ["--dry-run"],
                                   ["--workers", "4"], ["--epochs", "0"]])
def test_torchrun_takes_parabench_runs_arguments_for_exactly_one_case(
    extra: list[str], capsys: pytest.CaptureFixture[str], rank0: None,
) -> None:
    from parabench.cli import torchrun as launch

    argv = ["--workload", "mlp", "--method", "ddp", "--out", "r.jsonl", *extra]
    assert launch.main(argv) == 2
    assert "error" in capsys.readouterr().err
