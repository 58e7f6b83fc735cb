"""Tensor parallelism (``tp``, ``fsdp_tp``, ``pipeline_tp``) computes serial's mathematics.

tp over 2 ranks, fsdp_tp over a 2 x 2 mesh and pipeline_tp over 2 stages x 2 tensor ranks (4
gloo ranks, oversubscribed on 2 cores) train gpt tiny along serial's trajectory (losses and the
weights, gathered whole, within exact parity's tolerances); the degrees are validated once,
with what is wrong (a skip reason, and exit 2 when nothing in a run fits); a workload without
a tensor-parallel plan is skipped with its reason. The planted bugs (a row-parallel layer that
is not all-reduced, a tensor rank fed the wrong samples) are in
``tests/methods/test_planted_bugs_torch.py``.
"""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

from parabench.analysis.trajectory import compare_traces
from parabench.case.execute import execute
from parabench.config import ConfigError, RunConfig
from parabench.registry import methods, workloads
from parabench.torch.degrees import ParallelDegrees

pytestmark = [pytest.mark.cpu, pytest.mark.torch]


def _trace(method: str, workers: int = 1, **options: Any) -> dict[str, Any]:
    config = RunConfig(workload="gpt", method=method, workers=workers, threads_per_worker=1,
                       profile="tiny", epochs=1, steps=0, options=options)
    result = execute(config)
    assert result.status == "ok", result.reason
    assert result.trace is not None, f"{method} recorded no trace"
    return result.trace.to_dict()


@pytest.fixture(scope="module")
def serial_trace() -> dict[str, Any]:
    return _trace("serial")


def _assert_exact(trace: dict[str, Any], serial: dict[str, Any]) -> None:
    assert trace["covered"] == trace["model"] == serial["model"]  # every tensor, gathered
    verdict = compare_traces(trace, serial)
    assert verdict["ok"], verdict
    assert verdict["loss_rel_max"] < 1e-6 and verdict["weight_rel_l2"] < 1e-4, verdict


@pytest.mark.slow
def test_tp_over_two_ranks_follows_serials_trajectory(serial_trace: dict[str, Any]) -> None:
    _assert_exact(_trace("tp", 2), serial_trace)


@pytest.mark.slow
def test_sequence_parallel_tp_follows_serials_trajectory(serial_trace: dict[str, Any]) -> None:
    _assert_exact(_trace("tp", 2, sequence_parallel=True), serial_trace)


@pytest.mark.slow
def test_fsdp_tp_on_a_two_by_two_mesh_follows_serials_trajectory(
        serial_trace: dict[str, Any]) -> None:
    _assert_exact(_trace("fsdp_tp", 4, tp=2), serial_trace)


@pytest.mark.slow
def test_pipeline_tp_two_stages_by_two_tensor_ranks_follows_serials_trajectory(
        serial_trace: dict[str, Any]) -> None:
    _assert_exact(_trace("pipeline_tp", 4, tp=2, stages=2), serial_trace)


def test_degrees_are_validated_once_with_what_is_wrong() -> None:
    assert ParallelDegrees.of(4, tp=2) == ParallelDegrees(dp=2, tp=2, pp=1)
    assert ParallelDegrees.of(8, tp=2, pp=2).position(5) == (1, 0, 1)  # pp, dp, tp
    with pytest.raises(ConfigError, match="must be a multiple of 2"):
        ParallelDegrees.of(3, tp=2)
    with pytest.raises(ConfigError, match=r"dp 1 x tp 2 x pp 1 = 2 ranks, but 4"):
        ParallelDegrees.of(4, tp=2, dp=1)
    with pytest.raises(ConfigError, match=r"does not divide heads 4"):
        ParallelDegrees(dp=1, tp=3).check_sizes({"heads": 4, "width": 63})


def _config(method: str, workers: int, workload: str = "gpt", **options: Any) -> RunConfig:
    return RunConfig(workload=workload, method=method, workers=workers, profile="tiny",
                     options=options)


def test_cases_that_do_not_fit_are_skipped_with_the_reason() -> None:
    gpt = workloads.get("gpt")
    tp, fsdp_tp = methods.get("tp"), methods.get("fsdp_tp")
    assert tp.check(gpt, _config("tp", 2)) is None
    assert fsdp_tp.check(gpt, _config("fsdp_tp", 4)) is None
    assert "multiple of 2" in fsdp_tp.check(gpt, _config("fsdp_tp", 3))
    assert "4 worker(s)" in tp.check(gpt, _config("tp", 4, tp=2))  # tp: every worker
    assert "multiple of 4" in methods.get("pipeline_tp").check(gpt, _config("pipeline_tp", 2))
    reason = tp.check(gpt, _config("tp", 3))  # gpt tiny: 4 heads, width 64
    assert "tensor-parallel degree 3 must divide" in reason and "heads 4" in reason, reason


def test_a_workload_without_a_plan_is_skipped_with_its_reason() -> None:
    mlp = workloads.get("mlp")
    assert mlp.tp_plan(object()) is None  # the default: no plan
    reason = methods.get("tp").check(mlp, _config("tp", 2, workload="mlp"))
    assert reason is not None and "mlp has no tensor-parallel plan" in reason, reason


def test_a_run_in_which_no_degree_fits_exits_2_saying_why(tmp_path: Any) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "parabench", "run", "--workload", "gpt", "--method", "tp",
         "--workers", "3", "--profile", "tiny", "--out", str(tmp_path / "r.jsonl")],
        capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "tensor-parallel degree 3 must divide" in proc.stderr, proc.stderr
