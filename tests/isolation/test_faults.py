"""The runner's fault matrix, for real: the CLI as a subprocess, real signals, real kills.

Each scenario asserts the exit code, the status and reason recorded, that the case's process
group is empty afterwards, that results written earlier are intact, and that the runner's
temporary directory is gone. Cases come from ``tests/plugins/faulty.py`` (``fault_hang``
writes its helper's pid once it is inside ``fit``: the moment a test strikes) and from
``mlp`` at ``--profile tiny``. The engines' faults are in ``test_faults_engines.py``.
"""

from __future__ import annotations

import json
import math
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from casewatch import case_command, command_line, wait_for
from parabench.case.result import Result, read_results
from parabench.core import rankfork

pytestmark = pytest.mark.cpu

RUN = [sys.executable, "-m", "parabench", "run", "--method", "serial", "--device", "cpu",
       "--profile", "tiny", "--epochs", "1"]


@pytest.fixture
def tmpdir_env(fault_plugin: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The runner's TMPDIR, private to this test, so its temporary directories can be seen."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp))
    return tmp


def _start(*args: str) -> subprocess.Popen[str]:
    # faulthandler on: a runner that does not stop can be made to print its threads (_stopped)
    return subprocess.Popen([*RUN, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, text=True,
                            env=os.environ | {"PYTHONFAULTHANDLER": "1"})


def _stopped(runner: subprocess.Popen[str], sig: int, timeout: float = 60) -> str:
    """The runner's stderr once ``sig`` ended it; if it does not end, where its threads were."""
    runner.send_signal(sig)
    try:
        return runner.communicate(timeout=timeout)[1]
    except subprocess.TimeoutExpired:
        runner.send_signal(signal.SIGABRT)  # faulthandler prints every thread's stack
        stderr = runner.communicate(timeout=30)[1]
        pytest.fail(f"the runner did not end {timeout:g} s after {signal.Signals(sig).name}; "
                    f"its threads then:\n{stderr[-8000:]}")


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*RUN, *args], capture_output=True, text=True, timeout=300,
                          stdin=subprocess.DEVNULL)


def _hang_started(pidfile: Path) -> int:
    """Wait until fault_hang is inside fit; return its case's process group."""
    text = wait_for("the hanging case to start", lambda: pidfile.read_text().strip())
    return os.getpgid(int(str(text).split()[0]))


def _group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes of the group."""
    alive = []
    for proc in psutil.process_iter(["pid", "status"]):
        try:
            if os.getpgid(proc.pid) == pgid and proc.info["status"] != psutil.STATUS_ZOMBIE:
                alive.append(proc.pid)
        except (ProcessLookupError, psutil.Error):
            continue
    return alive


def _assert_group_empty(pgid: int, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while (members := _group_members(pgid)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not members, f"the case left processes running: {members}"


def _runner_dirs(tmp: Path) -> list[Path]:
    return sorted(tmp.glob("parabench-run-*"))


def _results(out: Path) -> list[Result]:
    return list(read_results(out))


# --- signals to the runner ------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize(
    ("sig", "code", "message"),
    [(signal.SIGINT, 130, "interrupted; results recorded so far are kept"),
     (signal.SIGTERM, 143, "terminated by SIGTERM; the running case was stopped")],
    ids=["ctrl-c", "sigterm"],
)
def test_a_signal_stops_the_case_keeps_earlier_results_and_cleans_up(
    fault_plugin: Path, tmpdir_env: Path, tmp_path: Path, sig: int, code: int, message: str
) -> None:
    out = tmp_path / "r.jsonl"
    runner = _start("--workload", "fault_ok,fault_hang", "--timeout", "300", "--out", str(out))
    pgid = _hang_started(fault_plugin)
    assert _runner_dirs(tmpdir_env), "the runner has a temporary directory while it runs"
    stderr = _stopped(runner, sig)

    assert runner.returncode == code
    line = stderr.strip().splitlines()[-1]  # (progress lines come before it)
    assert line.startswith("parabench: ") and message in line
    assert "Traceback" not in stderr
    _assert_group_empty(pgid)
    [earlier] = _results(out)  # the ok case before the signal, whole; the stopped one absent
    assert (earlier.workload, earlier.status) == ("fault_ok", "ok")
    assert not _runner_dirs(tmpdir_env), "the temporary directory was left behind"


@pytest.mark.slow
def test_sigkill_of_the_runner_takes_the_case_down_and_resume_finishes_the_grid(
    fault_plugin: Path, tmpdir_env: Path, tmp_path: Path
) -> None:
    out = tmp_path / "r.jsonl"
    grid = ["--workload", "fault_ok,fault_hang", "--out", str(out)]
    runner = _start(*grid, "--timeout", "300")
    pgid = _hang_started(fault_plugin)
    runner.kill()
    runner.communicate(timeout=60)
    _assert_group_empty(pgid)  # the worker's parent-death signal killed its group
    assert _runner_dirs(tmpdir_env), "a SIGKILLed runner cannot clean up after itself"

    proc = _run(*grid, "--timeout", "5", "--resume")  # timeout_s is not part of a case's key
    assert proc.returncode == 1, proc.stderr  # the hang times out this time
    assert [(r.workload, r.status) for r in _results(out)] == [
        ("fault_ok", "ok"), ("fault_hang", "timeout")]  # fault_ok was not run again
    assert not _runner_dirs(tmpdir_env), "the stale directory of the dead runner was not removed"


def test_a_worker_sigkilled_from_outside_is_failed_not_a_guessed_oom(
    fault_plugin: Path, tmpdir_env: Path, tmp_path: Path
) -> None:
    out = tmp_path / "r.jsonl"
    runner = _start("--workload", "fault_ok,fault_hang", "--timeout", "300", "--out", str(out))
    pgid = _hang_started(fault_plugin)
    os.kill(pgid, signal.SIGKILL)  # the worker leads its group; its helper is left alive
    runner.communicate(timeout=120)

    assert runner.returncode == 1
    earlier, killed = _results(out)
    assert (earlier.workload, earlier.status) == ("fault_ok", "ok")
    assert killed.workload == "fault_hang" and killed.status == "failed"
    assert killed.reason.startswith("killed by SIGKILL (signal 9) from outside the case")
    _assert_group_empty(pgid)
    assert not _runner_dirs(tmpdir_env)


@pytest.mark.slow
@pytest.mark.torch
def test_a_ddp_rank_sigkilled_mid_case_fails_the_case_naming_rank_and_signal(
    tmpdir_env: Path, tmp_path: Path
) -> None:
    out = tmp_path / "r.jsonl"
    runner = subprocess.Popen(
        [sys.executable, "-m", "parabench", "run", "--workload", "mlp", "--method", "ddp",
         "--workers", "2", "--threads", "1", "--profile", "tiny", "--epochs", "400",
         "--timeout", "400", "--out", str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)

    def ranks_training() -> list[psutil.Process]:
        logs = list(tmpdir_env.glob("parabench-run-*/case-*.out"))
        if not logs or "epoch 2/" not in logs[0].read_text(errors="replace"):
            return []
        worker = next(p for p in psutil.Process(runner.pid).children(recursive=True)
                      if case_command(p) is not None)
        # spawned ranks run multiprocessing's spawn_main; forked ones (core.rankfork, the
        # default) are listed by the case for the runner's sampler
        listing = next(iter(tmpdir_env.glob("parabench-run-*/case-*.ranks")), None)
        forked = rankfork.read_record(listing)["rank"]
        return sorted((p for p in worker.children()
                       if p.pid in forked or "spawn_main" in " ".join(command_line(p))),
                      key=lambda p: p.create_time())

    ranks = wait_for("two ddp ranks past epoch 1", ranks_training)
    assert isinstance(ranks, list) and len(ranks) == 2
    pgid = os.getpgid(ranks[1].pid)
    ranks[1].send_signal(signal.SIGKILL)
    runner.communicate(timeout=180)

    assert runner.returncode == 1
    [result] = _results(out)
    assert result.status == "failed"
    # the pool names the rank by its number; which number the second-spawned pid holds is
    # the pool's business, so either is accepted
    assert re.search(r"rank [01] died \(exit -9, SIGKILL\)", result.reason), result.reason
    _assert_group_empty(pgid)
    assert not _runner_dirs(tmpdir_env)


@pytest.mark.slow
def test_two_runners_appending_to_one_file_lose_nothing(
    fault_plugin: Path, tmpdir_env: Path, tmp_path: Path
) -> None:
    out = tmp_path / "r.jsonl"
    runners = [_start("--workload", "fault_ok", "--repeats", "4", "--seed", str(seed),
                      "--out", str(out)) for seed in (1, 2)]
    for runner in runners:
        runner.communicate(timeout=300)
        assert runner.returncode == 0
    lines = out.read_text().splitlines()
    assert len(lines) == 8 and all(json.loads(line)["status"] == "ok" for line in lines)
    assert sorted((r.seed, r.repeat) for r in _results(out)) == [
        (s, r) for s in (1, 2) for r in range(4)]


# --- damaged results files ------------------------------------------------------------------

@pytest.mark.slow
def test_resume_survives_torn_garbage_foreign_and_nan_lines_and_runs_each_case_once(
    fault_plugin: Path, tmpdir_env: Path, tmp_path: Path
) -> None:
    out = tmp_path / "r.jsonl"
    grid = ["--workload", "fault_ok", "--out", str(out)]
    assert _run(*grid, "--repeats", "2").returncode == 0
    first, second = out.read_text().splitlines()
    data = json.loads(second)
    data["startup_s"] = float("nan")  # what json.dumps(allow_nan=True) writes: NaN
    out.write_text("\n".join([
        first, "garbage that is not JSON", '{"hello": "a JSON line of some other tool"}',
        "[1, 2, 3]", json.dumps(data), first[: len(first) // 2],  # torn: no newline at the end
    ]))

    for _ in range(2):  # the second resume must find every case done
        proc = _run(*grid, "--repeats", "4", "--resume")
        assert proc.returncode == 0, proc.stderr
        assert "4 case(s)" in proc.stdout
    with pytest.warns(UserWarning, match="skipping unreadable result") as seen:
        results = _results(out)
    assert len(seen) == 4  # garbage, foreign object, foreign list, torn
    assert sorted(r.repeat for r in results) == [0, 1, 2, 3]  # each ok case ran exactly once
    assert all(r.status == "ok" for r in results)
    lines = out.read_text().splitlines()
    assert lines[5] == first[: len(first) // 2], "the torn line must stay on its own line"
    assert len(lines) == 8


def test_a_non_finite_number_is_written_as_valid_json_with_the_reason(tmp_path: Path) -> None:
    from parabench.case.result import append_result

    result = Result(workload="mlp", method="serial", device="cpu", workers=1,
                    threads_per_worker=1, batch_size=64, epochs=2, profile="tiny", seed=0,
                    repeat=0, status="ok", loss=[0.5, float("nan")], samples_per_s=float("inf"))
    out = tmp_path / "r.jsonl"
    out.write_text("torn")
    append_result(out, result)

    torn, line = out.read_text().splitlines()
    data = json.loads(line, parse_constant=lambda c: pytest.fail(f"non-standard JSON {c}"))
    assert torn == "torn" and data["loss"] == [0.5, None] and data["samples_per_s"] is None
    assert data["extra"]["non_finite"] == ["loss[1]=nan", "samples_per_s=inf"]
    with pytest.warns(UserWarning, match=r"r.jsonl:1: skipping unreadable result"):
        [back] = _results(out)  # in memory the numbers are what they were
    assert back.loss[0] == 0.5 and math.isnan(back.loss[1])
    assert back.samples_per_s == float("inf")
    assert json.loads(back.to_json()) == data  # and it writes the same strict line again


# --- bad input: one line, exit 2, before anything runs --------------------------------------

BAD_INPUTS = [
    (["--timeout", "nan"], "--timeout must be > 0 and finite"),
    (["--timeout", "inf"], "--timeout must be > 0 and finite"),
    (["--timeout", "-5"], "--timeout must be > 0"),
    (["--out", "/proc/parabench/r.jsonl"], "cannot create files in /proc"),
    (["--out", "{file}/sub/r.jsonl"], "is a file, not a directory"),
    (["--out", "{tmp}"], "is a directory; give a file path"),
    (["--microbatches", "4", "--method", "ddp"],
     "--microbatches applies to none of the selected methods (ddp) or workloads (mlp); "
     "it is read by: hybrid, pipeline"),
    (["--device", "cuda"], "nothing to run: every case would be skipped; mlp/serial cuda"),
    (["--method", "ddp", "--workers", "1000", "--batch-size", "1000"],
     "nothing to run: every case would be skipped; mlp/ddp cpu w=1000"),
    (["--workload", "random_forest", "--batch-size", "auto"],
     "--batch-size auto applies to mini-batch workloads, not random_forest"),
    (["--batch-size", "10000000"],
     "--batch-size 10000000 is larger than mlp's training set at --profile tiny "
     "(2048 samples); valid: 1..2048"),
]


#: the one bad input checked through a subprocess (planning and the runnable check included;
#: it runs on every machine); the others call parabench.cli.main in this process, the same
#: code without an interpreter's start-up each (~5 s on 2 busy cores)
E2E_BAD_INPUT = "--method ddp --workers 1000 --batch-size 1000"


def _in_process(argv: list[str], tmpdir: Path, capsys: pytest.CaptureFixture[str],
                monkeypatch: pytest.MonkeyPatch) -> subprocess.CompletedProcess[str]:
    """``parabench ARGV`` run by :func:`parabench.cli.main` here, read like a subprocess's."""
    import tempfile

    from parabench.cli import main

    monkeypatch.setattr(tempfile, "tempdir", str(tmpdir))  # TMPDIR, as a new process reads it
    capsys.readouterr()
    code = main(argv)
    out, err = capsys.readouterr()
    return subprocess.CompletedProcess(argv, code, out, err)


@pytest.mark.parametrize(("args", "expected"), BAD_INPUTS,
                         ids=[" ".join(a) for a, _ in BAD_INPUTS])
def test_bad_input_is_one_line_exit_2_before_anything_runs(
    tmpdir_env: Path, tmp_path: Path, args: list[str], expected: str,
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    from parabench import hardware

    if "cuda" in args and hardware.probe("cuda") is None:
        pytest.skip("a GPU is present: --device cuda runs here")
    e2e = " ".join(args) == E2E_BAD_INPUT
    a_file = tmp_path / "a_file"
    a_file.write_text("not a directory\n")
    out = tmp_path / "r.jsonl"
    out.write_text("")  # an existing results file (earlier results) stays as it is
    args = [a.format(file=a_file, tmp=tmp_path) for a in args]
    if "--out" not in args:
        args += ["--out", str(out)]
    before = sorted(p.name for p in tmp_path.rglob("*"))

    argv = ["run", "--workload", "mlp", "--profile", "tiny", "--method", "serial", *args]
    if e2e:  # as a user runs it
        proc = subprocess.run([sys.executable, "-m", "parabench", *argv], capture_output=True,
                              text=True, timeout=300, stdin=subprocess.DEVNULL)
    else:
        proc = _in_process(argv, tmpdir_env, capsys, monkeypatch)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("parabench: error: "), proc.stderr
    assert expected in lines[0]
    assert proc.stdout == ""
    assert sorted(p.name for p in tmp_path.rglob("*")) == before, "junk files were left"
    assert out.read_text() == ""


def test_every_option_is_read_by_some_method_or_workload() -> None:
    from parabench.registry import option_specs
    from parabench.sweep.preflight import readers_of

    assert [name for name in option_specs() if not readers_of(name)] == []


# --- the pieces, without a runner -------------------------------------------------------------

def test_only_the_directories_of_dead_runners_are_swept(tmp_path: Path) -> None:
    from parabench.core.tempdirs import PREFIX, remove_stale, runner_tempdir

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = tmp_path / f"{PREFIX}{dead.pid}-abc"
    live = tmp_path / f"{PREFIX}{os.getppid()}-def"  # pytest's parent: alive
    other = tmp_path / "parabench-mnist-xyz"  # someone else's naming: never touched
    for path in (stale, live, other):
        path.mkdir()
    assert remove_stale(tmp_path) == [stale]
    assert live.exists() and other.exists()
    with runner_tempdir(tmp_path) as mine:
        assert mine.name.startswith(f"{PREFIX}{os.getpid()}-")
    assert not mine.exists()


def test_sigkill_is_oom_only_when_an_oom_kill_counter_rose() -> None:
    from parabench.case.isolate import _ending, _oom_evidence, oom_kill_counts
    from parabench.config import RunConfig

    cfg = RunConfig(workload="mlp", method="serial", profile="tiny")
    assert all(v >= 0 for v in oom_kill_counts().values())
    assert _oom_evidence({"/x": 3}, {"/x": 3}) is None
    assert _oom_evidence({}, {"/x": 1}) is None  # a counter not read before proves nothing
    evidence = _oom_evidence({"/x": 3}, {"/x": 4})
    assert evidence == "/x oom_kill 3 -> 4"
    status, reason = _ending(-9, False, cfg, 500.0, "", evidence)
    assert status == "oom" and "out-of-memory killer (/x oom_kill 3 -> 4" in reason
    status, reason = _ending(-9, False, cfg, 500.0, "", None)
    assert status == "failed"
    assert reason.startswith("killed by SIGKILL (signal 9) from outside the case")


def test_skips_inside_a_sweep_stay_skips_and_only_an_all_skipped_grid_is_refused(
    fault_plugin: Path,
) -> None:
    from parabench.config import ConfigError
    from parabench.sweep.preflight import check_runnable
    from parabench.sweep.run import Grid, plan

    sweep = Grid(workloads=["fault_ok"], devices=["cpu", "cuda"], methods=["serial", "ddp"],
                 profile="tiny")
    check_runnable(plan(sweep))  # serial on cpu runs; the rest are skips, not an error
    only_cuda = Grid(workloads=["fault_ok"], devices=["cuda"],
                     methods=["ddp", "wide_serial"], profile="tiny")  # ddp is planned first
    with pytest.raises(ConfigError) as info:
        check_runnable(plan(only_cuda))
    # the reason the user can act on comes first, not "ddp does not support fault_ok"
    assert "fault_ok/wide_serial cuda" in str(info.value) and "\n" not in str(info.value)


def test_a_plugin_option_is_accepted_where_its_method_is_selected(fault_plugin: Path) -> None:
    from parabench.config import ConfigError
    from parabench.sweep.preflight import check_options
    from parabench.sweep.run import Grid

    check_options(Grid(workloads=["fault_ok"], methods=["wide_serial"],
                       options={"fault_knob": [2]}))
    with pytest.raises(ConfigError, match="--fault-knob applies to none .* read by: wide_serial"):
        check_options(Grid(workloads=["fault_ok"], methods=["serial"],
                           options={"fault_knob": [2]}))


def test_the_training_set_size_known_up_front_is_the_size_built() -> None:
    from parabench.registry import workloads

    known = [w for w in workloads if w.train_size("tiny") is not None]
    assert {"mlp", "cnn", "vgg11"} <= {w.name for w in known}
    for workload in known:
        for seed in (0, 1):
            built = workload.make_data("tiny", seed).n_train
            assert workload.train_size("tiny") == built, workload.name
