"""The one planner: the CLI's sweep and the benchmark cases share configs, skip reasons, markers."""

from __future__ import annotations

import pytest

from parabench import hardware
from parabench.sweep.plan import BenchCase, Grid, bench_cases, case_markers, plan

pytestmark = pytest.mark.cpu


def test_benchmark_ids_and_markers_come_from_the_requirements_table() -> None:
    cases = bench_cases()
    assert cases[0].method == "serial"  # the baseline first
    known = set(hardware.markers()) | {"cpu", "cuda"}
    for case in cases:
        assert case.id == f"{case.workload}-{case.method}-{case.device}-w{case.workers}"
        assert case.markers <= known, case.markers
    ddp = BenchCase(workload="mlp", method="ddp", device="cuda", workers=2)
    assert ddp.markers == {"cuda", "multigpu", "torch"}
    assert case_markers("mlp", "serial", "cpu", 1) == {"cpu", "torch"}


def test_a_sweep_case_and_a_benchmark_case_agree() -> None:
    grid = Grid(workloads=["mlp", "random_forest"], methods=["ddp", "serial"], devices=["cpu"],
                workers=[1, 2], profile="tiny", epochs=1)
    cases = plan(grid)
    assert [c.config.method for c in cases][:2] == ["serial", "ddp"]  # the baseline first
    for case in cases:
        bench = BenchCase(workload=case.config.workload, method=case.config.method,
                          device=case.config.device, workers=case.config.workers)
        assert bench.id == case.id and bench.markers == case.markers
        assert bench.config("tiny") == case.config
        assert bench.skip_reason("tiny") == case.skip_reason
    assert any(c.skip_reason and "does not support" in c.skip_reason for c in cases)
