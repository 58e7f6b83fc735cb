"""The busy-machine guard: the `busy` rule, the wait policy, `Result.machine` from the CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from parabench.case.machine import (
    BUSY_SLACK_CORES,
    is_busy,
    machine_record,
    other_cores,
    thread_settings,
    wait_policy,
)
from parabench.case.result import read_results

pytestmark = pytest.mark.cpu


def test_quiet_machine_is_not_busy() -> None:
    # a 2-thread case on 2 cores with daemons at a few hundredths of a core
    assert not is_busy(cores=2, cores_in_use=2, other_cores=0.05, load_before=9.0)


def test_others_on_the_cases_cores_make_it_busy() -> None:
    assert is_busy(cores=2, cores_in_use=2, other_cores=0.9, load_before=0.0)
    assert is_busy(cores=2, cores_in_use=3, other_cores=0.3, load_before=None)  # oversubscribed


def test_others_on_spare_cores_do_not() -> None:
    # 1 of 4 cores in use: another job on up to 3 cores leaves the case its core
    assert not is_busy(cores=4, cores_in_use=1, other_cores=3.0, load_before=None)
    assert is_busy(cores=4, cores_in_use=1, other_cores=3.5, load_before=None)


def test_the_edge_is_spare_plus_the_slack() -> None:
    edge = 1 + BUSY_SLACK_CORES  # 2 cores, 1 in use
    assert not is_busy(cores=2, cores_in_use=1, other_cores=edge, load_before=None)
    assert is_busy(cores=2, cores_in_use=1, other_cores=edge + 0.01, load_before=None)


def test_load_decides_only_without_the_cpu_share() -> None:
    # the measured CPU share wins over a load average that still holds a previous case
    assert not is_busy(cores=2, cores_in_use=2, other_cores=0.0, load_before=6.0)
    assert is_busy(cores=2, cores_in_use=2, other_cores=None, load_before=6.0)
    assert not is_busy(cores=2, cores_in_use=1, other_cores=None, load_before=1.2)
    assert not is_busy(cores=2, cores_in_use=2, other_cores=None, load_before=None)


def test_other_cores_is_the_cpu_nobody_in_the_case_used() -> None:
    # 10 s on 2 cores: 20 busy CPU seconds, 12 the case's, 1 the runner's -> 0.7 cores
    assert other_cores(busy_cpu_s=20.0, case_cpu_s=12.0, runner_cpu_s=1.0,
                       wall_s=10.0) == pytest.approx(0.7)
    # the case's figure rounded past the busy time (clock ticks): nobody else, not negative
    assert other_cores(busy_cpu_s=5.0, case_cpu_s=5.02, runner_cpu_s=0.0, wall_s=5.0) == 0.0


def test_passive_unless_the_user_chose() -> None:
    assert wait_policy({}) == ("PASSIVE", "parabench default")
    assert wait_policy({"OMP_WAIT_POLICY": "active"}) == ("ACTIVE", "user")
    assert wait_policy({"OMP_WAIT_POLICY": " "}) == ("PASSIVE", "parabench default")


def test_a_busy_record_says_so_and_names_a_spinning_policy() -> None:
    measured = {"cores": 2, "load_1m_before": 5.5, "load_1m_after": 6.0, "other_cores": 1.4,
                "other_cpu_share": 0.7}
    spinning = thread_settings({"OMP_WAIT_POLICY": "ACTIVE", "OMP_NUM_THREADS": "1"}, "user")
    record = machine_record(measured, settings=spinning, workers=2, threads_per_worker=1)
    assert record["busy"] and record["busy_basis"] == "cpu" and record["cores_in_use"] == 2
    assert "busy machine" in record["note"] and "OMP_WAIT_POLICY=ACTIVE" in record["note"]
    quiet = {**measured, "other_cores": 0.02, "other_cpu_share": 0.01}
    passive = thread_settings({"OMP_WAIT_POLICY": "PASSIVE"}, "parabench default")
    record = machine_record(quiet, settings=passive, workers=2, threads_per_worker=1)
    assert not record["busy"] and "note" not in record


@pytest.mark.slow
def test_every_cli_result_records_the_machine_and_both_peaks(tmp_path: Path) -> None:
    out = tmp_path / "r.jsonl"
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    proc = subprocess.run(
        [sys.executable, "-m", "parabench", "run", "--workload", "mlp", "--method", "serial",
         "--profile", "tiny", "--epochs", "1", "--threads", "1", "--out", str(out)],
        capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (result,) = read_results(out)
    m = result.machine
    assert m.omp_wait_policy == "PASSIVE" and m.omp_wait_policy_source == "parabench default"
    assert m.threads["OMP_NUM_THREADS"] == "1" and m.threads["MKL_NUM_THREADS"] == "1"
    assert m.cores >= 1 and m.cores_in_use == 1 and m.oversubscribed is False
    for key in ("load_1m_before", "load_1m_after", "other_cores", "other_cpu_share"):
        assert isinstance(getattr(m, key), float | int) and getattr(m, key) >= 0, (key, m)
    assert m.case_cpu_s > 0 and m.busy_basis == "cpu"
    assert m.other_cores == pytest.approx(m.other_cpu_share * m.cores, abs=0.01)
    assert m.busy is is_busy(cores=m.cores, cores_in_use=1, other_cores=m.other_cores,
                                load_before=m.load_1m_before)
    assert (m.note is not None) is m.busy
    json.dumps(m.to_dict())  # plain JSON all the way down
    # memory: PSS counted (libraries shared with nothing here, so PSS <= RSS), RSS kept
    assert result.extra["peak_pss_source"] == "pss"
    assert result.peak_pss_mb is not None and result.peak_rss_mb is not None
    assert 0 < result.peak_pss_mb <= result.peak_rss_mb
    assert 0 < result.extra["peak_pss_file_mb"] < result.peak_pss_mb  # libraries' share
    assert result.peak_mb == result.peak_pss_mb
