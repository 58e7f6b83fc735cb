"""The one planner: the CLI's sweep and the benchmark cases share configs, skip reasons, markers."""

from __future__ import annotations

import pytest

from parabench import hardware
from parabench.analysis.ratios import baseline_threads
from parabench.stopping import Epochs, ToTarget
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
                workers=[1, 2], profile="tiny", stop=Epochs(1))
    cases = plan(grid)
    assert [c.config.method for c in cases][:3] == ["serial", "serial", "ddp"]  # baselines first
    # (serial at 1 thread too: ddp 2 x 1's scaling baseline, which a benchmark measures apart)
    for case in [c for c in cases if c.config.threads_per_worker is None]:
        bench = BenchCase(workload=case.config.workload, method=case.config.method,
                          device=case.config.device, workers=case.config.workers)
        assert bench.id == case.id and bench.markers == case.markers
        assert bench.config("tiny") == case.config
        assert bench.skip_reason("tiny") == case.skip_reason
    assert any(c.skip_reason and "does not support" in c.skip_reason for c in cases)


def test_a_sweep_with_serial_gets_the_serial_runs_its_ratios_need() -> None:
    def planned(methods: list[str], threads: int | None) -> list[tuple[str, int, int]]:
        grid = Grid(workloads=["mlp"], methods=methods, devices=["cpu"], workers=[2],
                    profile="tiny", stop=Epochs(1), threads_per_worker=threads)
        return [(c.config.method, c.config.workers, c.config.threads) for c in plan(grid)
                if c.skip_reason is None]

    # 2 x 1: serial at 2 threads (equal cores) and at 1 (scaling); the grid's own comes last
    assert planned(["serial", "ddp"], 1) == [("serial", 1, 2), ("serial", 1, 1), ("ddp", 2, 1)]
    assert planned(["ddp"], 1) == [("ddp", 2, 1)]  # no serial asked for: none added
    cases = plan(Grid(workloads=["mlp"], methods=["serial", "ddp"], devices=["cpu"],
                      workers=[4], profile="tiny", stop=Epochs(1), threads_per_worker=1))
    assert [c.config.threads for c in cases if c.config.method == "serial"] == [1]  # ddp x4
    # is skipped on 2 cores, so it asks for no serial at 4 threads


def test_benchmark_params_are_json() -> None:
    import json

    case = BenchCase(workload="mlp", method="ddp", device="cpu", workers=2)
    assert json.loads(json.dumps({"case": case})) == {"case": ["mlp", "ddp", "cpu", 2]}


def test_the_coverage_grid_covers_every_method_and_every_workload() -> None:
    from parabench.registry import methods, workloads
    from parabench.sweep.coverage import data_parallel_methods

    DATA_PARALLEL = data_parallel_methods()  # declared by the methods (coverage_rank)

    cases = plan(Grid(coverage=True, profile="tiny", stop=Epochs(1)))
    planned = {c.config.method for c in cases}
    assert planned == set(methods.names())  # runnable or a skipped row with its reason
    assert all(c.skip_reason is None or c.skip_reason.strip() for c in cases)
    for wl in workloads.names():
        ran = {c.config.method for c in cases
               if c.config.workload == wl and c.skip_reason is None}
        if not workloads.get(wl).in_coverage:  # sized for another machine (gpt2): left out
            assert not ran, (wl, ran)
            continue
        assert "serial" in ran, wl
        assert ran & set(DATA_PARALLEL), (wl, ran)
    assert any(not workloads.get(wl).in_coverage for wl in workloads.names())  # gpt2
    for c in cases:  # every runnable row has its baseline at equal cores, planned before it
        if c.skip_reason is None and c.config.method not in ("serial", "tf_serial"):
            base = "tf_serial" if c.config.method.startswith("tf_") else "serial"
            before = cases[:cases.index(c)]
            cores = baseline_threads(c.config.workload, base,
                                     c.config.workers * c.config.threads)
            assert any(b.config.method == base and b.config.workload == c.config.workload
                       and b.config.threads == cores for b in before), c.config.label()
    assert len(cases) < len(plan(Grid(profile="tiny", stop=Epochs(1)))) / 3


def test_without_coverage_the_plan_is_the_full_product() -> None:
    full = plan(Grid(profile="quick"))
    by_hand = plan(Grid(workloads=None, methods=None, profile="quick", coverage=False))
    assert [c.config for c in full] == [c.config for c in by_hand]
    from parabench.registry import methods, workloads

    assert {(c.config.workload, c.config.method) for c in full} == {
        (w, m) for w in workloads.names() for m in methods.names()}


def test_the_coverage_grid_holds_a_cheap_statistical_workload_to_its_target() -> None:
    """One tiny epoch leaves fedavg's quality verdict blind to ~0.1 accuracy; the coverage grid
    runs mlp (where fedavg is) to its measured target and its epoch budget, so fedavg gets the
    converged check, and leaves the other workloads at their one epoch (vgg11's BatchNorm ddp
    is statistical too, but its hold is too dear for the default run)."""
    from parabench.case.stopping import hold_epochs
    from parabench.registry import workloads
    from parabench.sweep.coverage import COVERAGE_HOLD_MAX_S
    from parabench.sweep.dryrun import guess_epochs, guess_s
    from parabench.workloads.quality_targets import quality_target

    cases = plan(Grid(coverage=True, profile="tiny", stop=Epochs(1)))
    mlp = quality_target("mlp", "tiny")
    held = {c.config.workload for c in cases if c.config.target_quality is not None}
    assert held == {"mlp"}
    for c in cases:
        if c.config.workload == "mlp":  # every row of the workload, so it ranks on one scale
            assert (c.config.target_quality, c.config.epochs) == (mlp.value, mlp.epochs)
        else:
            assert (c.config.target_quality, c.config.epochs) == (None, 1), c.config.label()
    [fedavg] = [c.config for c in cases if c.config.method == "fedavg"]
    assert hold_epochs(workloads.get("mlp"), fedavg) == mlp.epochs == guess_epochs(fedavg)
    [serial] = [c.config for c in cases if c.config.workload == "mlp"
                and c.config.method == "serial" and c.config.threads == 1]
    assert 1 < guess_epochs(serial) < mlp.epochs  # serial stops at the target: ~10 epochs
    [vgg] = [c.config for c in cases if c.config.workload == "vgg11"
             and c.config.method == "ddp"]
    budget = quality_target("vgg11", "tiny")
    assert guess_s(vgg.replace(epochs=budget.epochs, target_quality=budget.value)) \
        > COVERAGE_HOLD_MAX_S
    # asked for a target, every workload is held to it, with the run's own epochs
    asked = plan(Grid(coverage=True, profile="tiny", stop=ToTarget(0.5, max_epochs=24)))
    assert {(c.config.target_quality, c.config.epochs) for c in asked} == {(0.5, 24)}


def test_a_sweep_trains_to_the_measured_target_unless_told_a_fixed_count(tmp_path) -> None:
    """``parabench run --workload cnn ... --profile tiny`` (no --epochs, no --target-quality)
    ranks by time to the target: every workload with a measured target at the profile runs to
    it, up to its epoch budget; --epochs N, a profile without a measured target, or the
    user's own data (--data-dir) train fixed epochs."""
    from parabench.cli import build_parser, grid_from
    from parabench.workloads.quality_targets import quality_target

    def configs(*argv: str) -> list:
        args = build_parser().parse_args(["run", "--method", "serial", *argv])
        return [c.config for c in plan(grid_from(args))]

    cnn = quality_target("cnn", "tiny")
    [one] = {(c.target_quality, c.epochs) for c in configs("--workload", "cnn", "--profile",
                                                            "tiny")}
    assert one == (cnn.value, 10)  # the larger of the default cap and the 8-epoch budget
    assert {(c.target_quality, c.epochs) for c in configs(
        "--workload", "cnn", "--profile", "tiny", "--max-epochs", "4")} == {(cnn.value, 4)}
    assert {(c.target_quality, c.epochs) for c in configs(
        "--workload", "cnn", "--profile", "tiny", "--epochs", "2")} == {(None, 2)}
    quick = quality_target("cnn", "quick")  # shipped: the default profile ranks by time too
    assert quick is not None and {(c.target_quality, c.epochs) for c in configs(
        "--workload", "cnn")} == {(quick.value, 10)}
    assert {(c.target_quality, c.epochs) for c in configs(
        "--workload", "cnn", "--profile", "full")} == {(None, 3)}  # nothing measured there
    images = tmp_path / "images"
    for label in ("a", "b"):
        (images / label).mkdir(parents=True)
    assert {(c.target_quality, c.epochs) for c in configs(
        "--workload", "cnn", "--profile", "tiny", "--data-dir", str(images))} == {(None, 3)}
