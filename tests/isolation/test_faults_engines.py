"""The engines' fault matrix, for real: a Dask worker, an MPI rank or the Spark JVM is
SIGKILLed in the middle of a case run through the CLI.

Each scenario asserts the exit code (1: a case failed), the status and the reason recorded
(which engine process died, and how), that nothing of the case is left running (its process
group and every pid seen, see :mod:`casewatch`), and that the result written earlier in the
same file is intact. The kill lands after the case has printed its first epoch, so the engine
is up and working. The runner-side faults are in ``test_faults.py``.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from casewatch import kill_engine_process, watch_run
from parabench.case.result import read_results
from parabench.registry import methods

pytestmark = [pytest.mark.cpu, pytest.mark.slow]

CASE = ["--workload", "random_forest", "--workers", "2", "--device", "cpu",
        "--profile", "tiny", "--epochs", "200", "--timeout", "600"]


@pytest.fixture(scope="module")
def earlier(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A results file holding one real, earlier ``ok`` result."""
    out = tmp_path_factory.mktemp("earlier") / "results.jsonl"
    run = watch_run(["--workload", "random_forest", "--method", "rf_threads", "--workers", "1",
                     "--profile", "tiny", "--epochs", "1"], out=out)
    assert run.rc == 0, run.stderr
    return out


def _strike_case(method: str, match: Callable[[list[str]], bool], earlier: Path,
                 tmp_path: Path) -> tuple[str, str]:
    """Run ``method`` with ``earlier``'s results before it, kill the matching engine process
    in steady state, check the common promises; return (what was killed, the reason)."""
    if (why := methods.get(method).unavailable("cpu")) is not None:
        pytest.skip(f"{method}: {why}")
    out = tmp_path / "results.jsonl"
    shutil.copy(earlier, out)
    before = out.read_bytes()
    run = watch_run([*CASE, "--method", method], out=out, strike=kill_engine_process(match))
    assert run.struck, f"the engine process never appeared in steady state:\n{run.stdout}"
    assert run.rc == 1, run.stderr
    assert out.read_bytes().startswith(before), "the earlier result was changed"
    results = list(read_results(out))
    assert [r.status for r in results] == ["ok", "failed"], [r.reason for r in results]
    assert not (left := run.leftovers()), f"left running after the case: {left}"
    print(f"{method}: killed {run.struck}\nstatus {results[-1].status}: {results[-1].reason}")
    return run.struck, results[-1].reason or ""


def _pid(struck: str) -> int:
    return int(re.match(r"pid (\d+)", struck).group(1))  # type: ignore[union-attr]


@pytest.mark.dask
def test_killed_dask_worker_fails_the_case_and_says_so(earlier: Path, tmp_path: Path) -> None:
    struck, reason = _strike_case(
        # a worker retitles itself "dask worker [ADDRESS]" where setproctitle is installed
        "rf_dask", lambda cmd: " ".join(cmd).startswith("dask worker [")
        or ("--multiprocessing-fork" in cmd and "spawn_main" in " ".join(cmd)),
        earlier, tmp_path,
    )
    assert re.search(r"WorkerLost: (Dask worker\(s\) tls://127\.0\.0\.1:\d+ left the cluster|"
                     r"a Dask worker died while running a task)", reason), reason
    # which notice comes first races: the pid watcher names the process, Dask the worker
    assert (f"worker process pid {_pid(struck)} is gone" in reason
            or "1 of 2 original workers remain" in reason), reason


@pytest.mark.mpi
def test_killed_mpi_rank_fails_the_case_and_names_it(earlier: Path, tmp_path: Path) -> None:
    struck, reason = _strike_case(
        # a rank, not the launcher (whose command line names the rank program too)
        "rf_mpi", lambda cmd: "parabench.forest.mpi_rank" in cmd and "mpiexec" not in cmd[0],
        earlier, tmp_path,
    )
    assert re.search(rf"MPI rank \d \(pid {_pid(struck)}\) was killed by SIGKILL", reason), reason


@pytest.mark.spark
def test_killed_spark_jvm_fails_the_case_and_names_it(earlier: Path, tmp_path: Path) -> None:
    struck, reason = _strike_case(
        "rf_spark", lambda cmd: "org.apache.spark.deploy.SparkSubmit" in cmd, earlier, tmp_path,
    )
    assert f"the Spark JVM (pid {_pid(struck)}) died (SIGKILL)" in reason, reason
