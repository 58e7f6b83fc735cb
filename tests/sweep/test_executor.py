"""Executors: results that come as jobs finish are graded as a local run grades them; what a
SLURM job asks for; how a job that ended without a result is recorded.

Run: ``pytest tests/sweep/test_executor.py`` (crafted results, no case and no job runs).
The executor against a real SLURM: ``tests/slurm/``.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest

from parabench.case.result import read_results
from parabench.config import RunConfig
from parabench.stopping import Epochs
from parabench.sweep import run
from parabench.sweep.slurm import (
    Ledger,
    SlurmOptions,
    ended_result,
    job_parameters,
    sbatch_parameters,
    spans,
)
from parabench.sweep.slurm_queue import JobEnd
from sweepdata import case

SECONDS = {("serial", 2): 1.0, ("serial", 1): 1.6, ("ddp", 1): 0.5}


def _fake(config):  # type: ignore[no-untyped-def]
    r = case(config.workload, config.method, config.workers)
    return dataclasses.replace(r, threads_per_worker=config.threads, batch_size=config.batch_size,
                               epoch_s=[9.0, *[SECONDS[config.method, config.threads]] * 2])


class _Fake:
    """Yields the cases' crafted results in plan order, or last first (as jobs may end)."""

    name = "fake"

    def __init__(self, *, ordered: bool) -> None:
        self.ordered = ordered

    def gather(self, cases, *, workdir, progress, hint=None):  # type: ignore[no-untyped-def]
        for c in (cases if self.ordered else reversed(cases)):
            yield c, _fake(c.config)


def _sweep(tmp_path: Path, *, ordered: bool) -> tuple[list, list]:
    out = tmp_path / f"r-{ordered}.jsonl"
    grid = run.Grid(workloads=["mlp"], methods=["serial", "ddp"], workers=[2], profile="tiny",
                    stop=Epochs(1), threads_per_worker=1)
    returned = run.run_grid(grid, out=out, executor=_Fake(ordered=ordered))
    return returned, list(read_results(out))


@pytest.mark.parametrize("ordered", [True, False])
def test_results_that_come_last_first_are_graded_as_a_local_run_grades_them(
        tmp_path: Path, ordered: bool) -> None:
    """ddp finishes before both serial runs: it is held until they are written, so its ratios
    are against this sweep's serial runs, as in plan order."""
    returned, written = _sweep(tmp_path, ordered=ordered)
    assert [(r.method, r.threads_per_worker) for r in returned] == [
        ("serial", 2), ("serial", 1), ("ddp", 1)]  # the planned order, either way
    assert [(r.method, r.threads_per_worker) for r in written] == [
        ("serial", 2), ("serial", 1), ("ddp", 1)]  # no case before the baselines it needs
    ddp = written[-1]
    assert ddp.extra["ratios"]["speedup"] == 2.0
    assert ddp.extra["ratios"]["scaling_efficiency"] == 1.6
    assert ddp.parity is not None and ddp.parity.status != "no baseline", ddp.parity


def test_without_the_hold_the_method_would_lack_its_baselines(tmp_path: Path) -> None:
    """The hold matters: graded on its own, before serial, ddp has no ratios against it."""
    ddp = run.record(_fake(RunConfig(workload="mlp", method="ddp", workers=2,
                                     threads_per_worker=1, profile="tiny")),
                     tmp_path / "alone.jsonl", baselines=[])
    assert ddp.extra["ratios"]["speedup"] is None


def test_a_job_asks_for_the_cases_cores_gpus_and_time() -> None:
    cpu = RunConfig(workload="mlp", method="ddp", workers=2, threads_per_worker=3,
                    timeout_s=600)
    params = job_parameters(cpu, SlurmOptions())
    assert params["cpus_per_task"] == 6 and params["nodes"] == 1
    assert params["time"] == 15 and "gpus_per_node" not in params
    gpu = job_parameters(cpu.replace(device="cuda"),
                         SlurmOptions(partition="gpu", account="a1", time_min=30,
                                      sbatch=("--constraint=h100", "--exclusive")))
    assert gpu["gpus_per_node"] == 2 and gpu["partition"] == "gpu" and gpu["account"] == "a1"
    assert gpu["time"] == 30
    assert gpu["additional_parameters"] == {"constraint": "h100", "exclusive": True}


def test_a_case_spans_nodes_only_where_its_ranks_can_be_torchruns(
        monkeypatch: pytest.MonkeyPatch) -> None:
    two = SlurmOptions(nodes=2)
    ddp = RunConfig(workload="mlp", method="ddp", workers=4, threads_per_worker=3)
    params = job_parameters(ddp, two)
    assert (params["nodes"], params["ntasks_per_node"], params["cpus_per_task"]) == (2, 1, 6)
    assert job_parameters(ddp.replace(device="cuda"), two)["gpus_per_node"] == 2
    for alone in (ddp.replace(workers=3), RunConfig(workload="mlp", method="serial"),
                  RunConfig(workload="mlp", method="tf_multiworker", workers=2)):
        assert spans(alone, two) == 1 and job_parameters(alone, two)["nodes"] == 1, alone
    monkeypatch.setenv("PARABENCH_SLURM_NODES_AS_TASKS", "1")
    params = job_parameters(ddp, two)
    assert (params["nodes"], params["ntasks_per_node"], params["cpus_per_task"]) == (1, 2, 6)


def test_the_dry_run_counts_alike_job_requests() -> None:
    from parabench.sweep.slurm import describe_jobs

    ddp = RunConfig(workload="mlp", method="ddp", workers=2, threads_per_worker=1)
    lines = describe_jobs([ddp, ddp.replace(seed=1), ddp.replace(workers=1)],
                          SlurmOptions(sbatch=("--exclusive",)))
    assert lines == ["through SLURM: 3 job(s), each asking for",
                     "  2 x --nodes=1 --ntasks-per-node=1 --cpus-per-task=2 --time=15 "
                     "--exclusive",
                     "  1 x --nodes=1 --ntasks-per-node=1 --cpus-per-task=1 --time=15 "
                     "--exclusive"]


def test_an_sbatch_line_that_is_not_an_option_is_refused() -> None:
    with pytest.raises(ValueError, match="--name=value"):
        sbatch_parameters(["constraint=h100"])


@pytest.mark.parametrize("state,status", [("TIMEOUT", "timeout"), ("OUT_OF_MEMORY", "oom"),
                                          ("CANCELLED", "failed"), ("NODE_FAIL", "failed")])
def test_a_job_that_ended_without_a_result_is_recorded_with_the_schedulers_reason(
        state: str, status: str) -> None:
    config = RunConfig(workload="mlp", method="serial", profile="tiny")
    r = ended_result(config, "42", JobEnd(state, "0:15", "Resources"), "line a | line b")
    assert r.status == status and r.extra["slurm"]["job_id"] == "42"
    assert r.reason == (f"SLURM job 42 ended {state} (exit code 0:15, reason Resources); "
                        "its log ends: line a | line b")


def test_the_ledger_finds_a_cases_latest_job(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path)
    a = RunConfig(workload="mlp", method="serial", profile="tiny")
    ledger.add(a, "7")
    ledger.add(a, "9")
    with ledger.path.open("a") as f:
        f.write('{"job_id": "1", "case": {"wor')  # a driver killed mid-line
    known = ledger.jobs()
    assert ledger.job_for(a, known) == "9"
    assert ledger.job_for(a.replace(seed=1), known) is None


def _cli(*args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    import subprocess

    done = subprocess.run([sys.executable, "-m", "parabench", "run", "--workload", "mlp",
                           "--method", "serial", "--profile", "tiny", *args],
                          capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
                          env=env)
    return done.returncode, done.stderr.strip()


def test_slurm_flags_without_the_slurm_executor_are_a_usage_error(tmp_path: Path) -> None:
    code, err = _cli("--slurm-partition", "gpu", "--out", str(tmp_path / "r.jsonl"))
    assert code == 2 and err == ("parabench: error: --slurm-partition only apply with "
                                 "--executor slurm"), err
    code, err = _cli("--executor", "slurm", "--slurm-sbatch=constraint",
                     "--out", str(tmp_path / "r.jsonl"))
    assert code == 2 and "give an sbatch option as --name=value or --flag" in err, err
    assert not (tmp_path / "r.jsonl").exists()


def test_a_sweep_for_a_clusters_nodes_is_planned_for_their_cores() -> None:
    """Planned on a 2-core login node for 8-core nodes: the fair thread share and the
    oversubscription check are the nodes'."""
    grid = run.Grid(workloads=["mlp"], methods=["ddp"], workers=[2, 4, 16], profile="tiny",
                    stop=Epochs(1), cores=8)
    cases = {c.config.workers: c for c in run.plan(grid)}
    assert [cases[w].config.threads for w in (2, 4)] == [4, 2]
    assert cases[2].skip_reason is None and cases[4].skip_reason is None
    assert "exceeds the 8 cores" in (cases[16].skip_reason or ""), cases[16].skip_reason


def _on(r, cpu: str):  # type: ignore[no-untyped-def]
    return dataclasses.replace(r, env={"cpu": cpu, "cores": 2, "gpus": [], "host": "n1"})


def test_rows_from_different_machine_types_are_answered_apart() -> None:
    """serial on one kind of node and ddp on another: no speedup of one against the other (its
    parity, checked when it was recorded, stands); one kind: one answer with the speedup."""
    from parabench.analysis.recommend import describe, recommend

    serial, ddp = case("mlp", "serial", 1), case("mlp", "ddp", 2)
    [same] = recommend([_on(serial, "A"), _on(ddp, "A")])
    assert same.machine is None and same.best is not None and same.best.method == "ddp"
    assert same.speedup is not None and same.speedup > 1
    apart = recommend([_on(serial, "A"), _on(ddp, "B")])
    assert [r.machine for r in apart] == ["A x2", "B x2"]
    assert apart[0].best is not None and apart[0].best.method == "serial"
    assert apart[1].best is not None and apart[1].best.method == "ddp"
    assert apart[1].baseline is None and apart[1].speedup is None  # no serial on B
    assert describe(apart[1])[0].startswith("mlp on cpu (tiny) [B x2]: use ddp")


def test_the_report_gives_each_machine_type_its_own_sections(tmp_path: Path) -> None:
    from parabench.sweep.site.build import build

    serial, ddp = case("mlp", "serial", 1), case("mlp", "ddp", 2)
    one = build([_on(serial, "A"), _on(ddp, "A")], out_dir=tmp_path, figures=False)
    assert "note" not in one.env
    two = build([_on(serial, "A"), _on(ddp, "B")], out_dir=tmp_path, figures=False)
    assert two.env["note"] == ("results come from 2 machine types, answered apart: "
                               "A x2 (n1); B x2 (n1)")
    assert [line.split(":")[0] for line in two.recommendation_lines()][:1] == [
        "mlp on cpu (tiny) [A x2]"]
    assert [s.title for s in one.scopes] == ["mlp on cpu (tiny)"]
    assert [(s.title, [c.method for c in s.candidates]) for s in two.scopes] == [
        ("mlp on cpu (tiny) [A x2]", ["serial"]), ("mlp on cpu (tiny) [B x2]", ["ddp"])]


def test_the_slurm_executor_where_slurm_is_not_says_what_to_do(tmp_path: Path) -> None:
    import os

    code, err = _cli("--executor", "slurm", "--out", str(tmp_path / "r.jsonl"),
                     env={**os.environ, "PATH": str(tmp_path)})  # no sbatch here
    assert code == 2, err
    assert err == ("parabench: error: --executor slurm: sbatch, squeue, scancel not found on "
                   "PATH; run parabench where SLURM's commands work (a login node), or start "
                   "the local one-node cluster: scripts/slurm_local.sh start"), err


def test_with_jobs_running_at_once_the_eta_counts_them_side_by_side() -> None:
    """Two 10 s jobs ended just now: the mean job time would say 20 s for two more; the
    elapsed time per finished case says well under a second."""
    import io

    from parabench.sweep.progress import Progress

    stream = io.StringIO()
    progress = Progress(total=4, runnable=4, stream=stream, enabled=False)
    progress.jobs(queued=2, running=2, done=0)
    for _ in range(2):
        progress.case_done("mlp/serial", case("mlp", "serial", 1), seconds=10.0)
    eta = progress.eta_s()
    assert eta is not None and eta < 5.0, eta
    assert "jobs 2 queued / 2 running / 0 done" in stream.getvalue()
    alone = Progress(total=4, runnable=4, stream=io.StringIO(), enabled=False)
    for _ in range(2):
        alone.case_done("mlp/serial", case("mlp", "serial", 1), seconds=10.0)
    assert alone.eta_s() == 20.0  # one after another: the mean case time
