"""``parabench run --executor slurm`` against a real one-node SLURM: the same rows, verdicts and
answer as the local run; a job cancelled with ``scancel`` recorded with the scheduler's reason;
a driver stopped by SIGTERM cancels its jobs; one killed outright leaves jobs that ``--resume``
gathers instead of submitting again.

Run: ``pytest -m slurm tests/slurm`` (root: ``scripts/slurm_local.sh start`` installs and
starts the cluster; a few minutes).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from casewatch import wait_for
from parabench.analysis.recommend import recommend
from parabench.case.result import Result, read_results
from parabench.sweep.slurm_queue import queued_states

pytestmark = [pytest.mark.cpu, pytest.mark.slow, pytest.mark.slurm]

RUN = [sys.executable, "-m", "parabench", "run", "--device", "cpu", "--profile", "tiny"]


def _cli(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*RUN, *args], capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)


@pytest.fixture(autouse=True)
def _nothing_left(tmp_path: Path) -> Iterator[None]:
    """A failed test leaves no driver and no job of its own behind."""
    yield
    for driver in _drivers:
        if driver.poll() is None:
            driver.kill()
            driver.communicate()
    _drivers.clear()
    mine = [j for out in tmp_path.glob("*.jsonl.slurm") for j in _ledger(Path(str(out)[:-6]))]
    if mine:
        subprocess.run(["scancel", *mine], capture_output=True, check=False)


_drivers: list[subprocess.Popen[str]] = []


def _start(*args: str) -> subprocess.Popen[str]:
    driver = subprocess.Popen([*RUN, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              stdin=subprocess.DEVNULL, text=True)
    _drivers.append(driver)
    return driver


def _ledger(out: Path) -> list[str]:
    path = Path(f"{out}.slurm") / "jobs.jsonl"
    return [json.loads(line)["job_id"] for line in path.read_text().splitlines()] \
        if path.exists() else []


def _job(job_id: str) -> dict[str, str]:
    text = subprocess.run(["scontrol", "show", "job", "-o", job_id], capture_output=True,
                          text=True, check=True).stdout
    return dict(re.findall(r"(\w+)=(\S*)", text))


def _rows(results: list[Result]) -> dict[str, Result]:
    return {f"{r.method} {r.workers}x{r.threads_per_worker}": r for r in results}


def _pids(pidfile: Path) -> list[int]:
    return [int(t) for t in pidfile.read_text().split()]


def _gone(pids: list[int]) -> bool:
    return not [p for p in pids if psutil.pid_exists(p)
                and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]


def test_a_sweep_through_slurm_gives_the_local_runs_rows_verdicts_and_answer(
        slurm: None, tmp_path: Path) -> None:
    sweep = ["--workload", "mlp", "--method", "serial,ddp", "--workers", "2"]
    local, remote = tmp_path / "local.jsonl", tmp_path / "slurm.jsonl"
    done = _cli(*sweep, "--out", str(local))
    assert done.returncode == 0, done.stderr[-3000:]
    done = _cli(*sweep, "--executor", "slurm", "--out", str(remote))
    assert done.returncode == 0, done.stderr[-3000:]
    assert re.search(r"jobs \d+ queued / \d+ running / \d+ done", done.stderr), done.stderr
    here, there = _rows(list(read_results(local))), _rows(list(read_results(remote)))
    assert sorted(here) == sorted(there) and len(there) == 3, (sorted(here), sorted(there))
    for label, r in there.items():
        assert r.status == "ok", (label, r.reason)
        assert (r.parity.status if r.parity else None) == \
            (here[label].parity.status if here[label].parity else None), label
        assert r.extra["ratios"]["speedup"] is not None, label
    # the answer: one per scope, a configuration whose parity holds, from the same candidates
    for recs in (recommend(read_results(local)), recommend(read_results(remote))):
        assert len(recs) == 1 and recs[0].best is not None and recs[0].best.qualifies
    # each row is its own job, as the scheduler saw it: completed, on the node the row names
    jobs = {r.extra["slurm"]["job_id"]: r for r in there.values()}
    assert sorted(jobs) == sorted(_ledger(remote))
    for job_id, r in jobs.items():
        seen = _job(job_id)
        assert seen["JobState"] == "COMPLETED" and seen["ExitCode"] == "0:0", seen
        assert seen["NodeList"] == r.env["host"] == r.extra["slurm"]["nodes"], (seen, r.env)
        cpus = r.workers * r.threads_per_worker
        assert int(seen["NumCPUs"]) == cpus == int(r.extra["slurm"]["cpus_on_node"]), seen


def test_a_job_the_cluster_would_refuse_is_a_usage_error_before_anything_is_submitted(
        slurm: None, tmp_path: Path) -> None:
    out = tmp_path / "r.jsonl"
    before = queued_states()
    done = _cli("--workload", "mlp", "--method", "serial", "--epochs", "1", "--executor",
                "slurm", "--slurm-partition", "nope", "--out", str(out))
    assert done.returncode == 2, done.stderr[-3000:]
    assert done.stderr.strip().startswith(
        "parabench: error: --executor slurm: SLURM would not take the job of mlp/serial"), \
        done.stderr
    assert "invalid partition" in done.stderr.lower(), done.stderr
    assert not out.exists() and queued_states() == before


def test_a_job_cancelled_with_scancel_is_recorded_failed_with_the_schedulers_reason(
        slurm: None, fault_plugin: Path, tmp_path: Path) -> None:
    out = tmp_path / "r.jsonl"
    driver = _start("--workload", "fault_hang", "--method", "serial", "--epochs", "1",
                    "--executor", "slurm", "--out", str(out))
    wait_for("the case to be inside fit", lambda: _pids(fault_plugin))
    [job_id] = _ledger(out)
    subprocess.run(["scancel", job_id], check=True)
    _, err = driver.communicate(timeout=180)
    assert driver.returncode == 1, err[-3000:]
    [r] = read_results(out)
    assert r.status == "failed" and r.extra["slurm"]["job_id"] == job_id
    assert r.reason.startswith(f"SLURM job {job_id} ended CANCELLED"), r.reason
    assert wait_for("the case's helper to be gone", lambda: _gone(_pids(fault_plugin)), 60)


def test_a_job_past_its_time_limit_is_recorded_timeout_and_leaves_nothing(
        slurm: None, fault_plugin: Path, tmp_path: Path) -> None:
    """A one-minute limit: SLURM warns the job (SIGUSR2, 30 s before), submitit ends it."""
    out = tmp_path / "r.jsonl"
    done = _cli("--workload", "fault_hang", "--method", "serial", "--epochs", "1",
                "--executor", "slurm", "--slurm-time", "1", "--out", str(out), timeout=300)
    assert done.returncode == 1, done.stderr[-3000:]
    [r] = read_results(out)
    assert r.status == "timeout", (r.status, r.reason)
    assert r.reason == (f"SLURM job {r.extra['slurm']['job_id']} raised: "
                        "submitit.core.utils.UncompletedJobError: Job not requeued because: "
                        "timed-out and not checkpointable."), r.reason
    assert wait_for("the case's helper to be gone", lambda: _gone(_pids(fault_plugin)), 60)


def test_a_driver_stopped_by_sigterm_cancels_its_jobs_and_keeps_what_it_gathered(
        slurm: None, fault_plugin: Path, tmp_path: Path) -> None:
    """mlp ends first and is kept; fault_hang is running and a second hang waits in the queue
    (every job asks for both cores): SIGTERM leaves no job in the queue and no process behind."""
    out = tmp_path / "r.jsonl"
    driver = _start("--workload", "mlp,fault_hang", "--method", "serial", "--epochs", "1",
                    "--repeats", "2", "--slurm-cpus-per-task", "2", "--executor", "slurm",
                    "--out", str(out))
    wait_for("a hanging case to be inside fit", lambda: _pids(fault_plugin))
    wait_for("both mlp results", lambda: len(list(read_results(out))) == 2)
    jobs = _ledger(out)
    assert len(jobs) == 4
    assert sum(queued_states().get(j) == "PENDING" for j in jobs) == 1, queued_states()
    driver.send_signal(signal.SIGTERM)
    _, err = driver.communicate(timeout=120)
    assert driver.returncode == 143, err[-3000:]
    assert "cancelled 2 SLURM job(s)" in err, err[-3000:]
    left = {j: s for j, s in queued_states().items() if j in jobs}
    assert left == {}, left
    assert [r.workload for r in read_results(out)] == ["mlp", "mlp"]
    assert wait_for("the case's helpers to be gone", lambda: _gone(_pids(fault_plugin)), 60)
    leftover = [p.info["cmdline"] for p in psutil.process_iter(["cmdline"])
                if str(tmp_path) in " ".join(p.info["cmdline"] or [])]
    assert leftover == [], leftover


def test_a_driver_killed_outright_leaves_jobs_that_resume_gathers(
        slurm: None, tmp_path: Path) -> None:
    out = tmp_path / "r.jsonl"
    sweep = ["--workload", "mlp", "--method", "serial", "--epochs", "1", "--repeats", "3",
             "--executor", "slurm", "--out", str(out)]
    driver = _start(*sweep)
    wait_for("three jobs submitted", lambda: len(_ledger(out)) == 3)
    os.kill(driver.pid, signal.SIGKILL)
    driver.communicate(timeout=30)
    submitted = _ledger(out)
    done = _cli(*sweep, "--resume")
    assert done.returncode == 0, done.stderr[-3000:]
    results = list(read_results(out))
    gathered = re.findall(r"gathering SLURM job (\d+) submitted earlier", done.stderr)
    assert gathered and set(gathered) <= set(submitted), done.stderr[-3000:]
    assert _ledger(out) == submitted  # nothing submitted again
    assert sorted(r.repeat for r in results) == [0, 1, 2]
    assert sorted(r.extra["slurm"]["job_id"] for r in results) == sorted(submitted)
    assert all(r.status == "ok" for r in results)


def test_a_case_across_two_nodes_runs_one_torchrun_agent_per_node_and_matches_serial(
        slurm: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One node here, so each of the job's two tasks stands in for a node
    ($PARABENCH_SLURM_NODES_AS_TASKS): a torchrun agent each, one rank each, rank 0's result."""
    monkeypatch.setenv("PARABENCH_SLURM_NODES_AS_TASKS", "1")
    out = tmp_path / "r.jsonl"
    done = _cli("--workload", "mlp", "--method", "serial,ddp", "--workers", "2", "--threads",
                "1", "--executor", "slurm", "--slurm-nodes", "2", "--out", str(out))
    assert done.returncode == 0, done.stderr[-3000:]
    rows = _rows(list(read_results(out)))
    ddp, serial = rows["ddp 2x1"], rows["serial 1x1"]
    assert ddp.status == "ok" and ddp.parity.status == "ok", ddp.parity
    assert ddp.extra["launcher"] == "torchrun" and ddp.extra["slurm"]["tasks"] == 2
    assert ddp.facts.rank_threads == [1, 1] and len(ddp.facts.rank_hosts) == 2
    assert "slurm" in serial.extra and "launcher" not in serial.extra  # one node, the runner's
    job = _job(ddp.extra["slurm"]["job_id"])
    assert (job["JobState"], job["NumTasks"]) == ("COMPLETED", "2"), job
    script = (Path(f"{out}.slurm") / f"{ddp.extra['slurm']['job_id']}_submission.sh").read_text()
    assert "#SBATCH --ntasks-per-node=2" in script and "#SBATCH --cpus-per-task=1" in script
