"""The coverage grid plans every baseline run its rows are compared with (issue 40, part 5).

The planner (:func:`parabench.sweep.plan.with_ratio_baselines`) and the comparer
(:func:`parabench.analysis.ratios.ratios`) both take the baseline runs of a row from
:func:`parabench.analysis.ratios.baseline_keys`, so a bare ``parabench run`` ends with no
"missing baseline" hint; a plan that lacks a baseline (a user's ``--method ddp``) still gets
the hint naming the run to add.
"""

from __future__ import annotations

from parabench.analysis.ratios import baseline_keys, find_baseline, ratios
from parabench.identity import CaseId, is_baseline
from parabench.stopping import Epochs
from parabench.sweep.plan import Case, Grid, plan


def _runnable_groups(cases: list[Case]) -> dict[tuple, float]:
    """Every runnable planned case's table key, each with a made-up time (1 s)."""
    return {CaseId.of(c.config).group: 1.0 for c in cases if c.skip_reason is None}


def _hints(cases: list[Case]) -> list[str]:
    """The "missing baseline" hints the table would print for these cases' results."""
    times = _runnable_groups(cases)
    return sorted({hint for key in times if not is_baseline(key.method)
                   for hint in ratios(key, times).as_dict()["missing"]})


def test_the_default_coverage_grid_plans_every_baseline_its_rows_are_compared_with() -> None:
    cases = plan(Grid(coverage=True, profile="tiny", stop=Epochs(1)))  # the bare `parabench run`
    times = _runnable_groups(cases)
    rows = [k for k in times if not is_baseline(k.method)]
    assert rows and any(k.method.startswith("tf_") for k in rows)  # both baseline families
    for key in rows:
        for want in baseline_keys(key):  # equal cores, then the threads per worker
            base = find_baseline(key, times, want.threads)
            assert base is not None, f"{key}: no {want.method} at t={want.threads}"
            assert base.method == want.method and base.threads == want.threads
            runnable = [c for c in cases if c.skip_reason is None]
            first = next(i for i, c in enumerate(runnable)
                         if CaseId.of(c.config).group == key)
            assert any(CaseId.of(c.config).group == base for c in runnable[:first]), (
                f"{base} is planned after {key}")  # baselines run before the rows they serve
    assert _hints(cases) == []
    # the dear scaling baselines the grid used to leave out are planned now
    planned = {(k.workload, k.method, k.threads) for k in times}
    assert {("conv_autoencoder", "serial", 1), ("seq2seq", "serial", 1),
            ("mlp", "tf_serial", 1)} <= planned


def test_a_plan_lacking_a_baseline_still_names_the_run_to_add() -> None:
    """``--method ddp`` alone plans no serial run: both ratios say which run to add."""
    cases = plan(Grid(workloads=["mlp"], methods=["ddp"], workers=[2], profile="tiny",
                      stop=Epochs(1)))
    assert {c.config.method for c in cases} == {"ddp"}
    assert _hints(cases) == ["no serial at 1 thread: add --method serial --threads 1",
                             "no serial at 2 threads: add --method serial --threads 2"]
    # with serial at the grid's threads only (a results file from another sweep), the
    # scaling efficiency's run is the one named
    ddp = [c for c in cases if c.skip_reason is None]
    serial_2 = plan(Grid(workloads=["mlp"], methods=["serial"], threads_per_worker=2,
                         profile="tiny", stop=Epochs(1)))
    assert _hints(serial_2 + ddp) == ["no serial at 1 thread: add --method serial --threads 1"]
    # and a TensorFlow row asks for its own baseline, tf_serial, with the batch it ran at
    tf = plan(Grid(workloads=["mlp"], methods=["tf_multiworker"], workers=[2],
                   batch_sizes=[64], profile="tiny", stop=Epochs(1)))
    assert _hints(tf) == [
        "no tf_serial at 1 thread and batch 64: add --method tf_serial --threads 1 "
        "--batch-size 64",
        "no tf_serial at 2 threads and batch 64: add --method tf_serial --threads 2 "
        "--batch-size 64"]


def test_selecting_serial_plans_both_baselines_a_sweep_needs() -> None:
    """The full product's planner uses the same rule: ``--method serial,ddp`` has no hint."""
    cases = plan(Grid(workloads=["mlp", "random_forest"], methods=["serial", "rf_threads", "ddp"],
                      workers=[2], profile="tiny", stop=Epochs(1)))
    assert _hints(cases) == []
