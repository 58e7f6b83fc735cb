"""``pipeline`` (both schedules), ``hybrid`` and ``model_parallel`` are serial's mathematics.

Each parity case trains the real method (real gloo rank pools for pipeline / hybrid, the real
session for model_parallel) and compares every weight with ``serial`` at the same global batch
over the same sample order. ``mlp`` runs with batch 48 and 3 micro-batches, so its short last
batch (2048 % 48 = 32) takes the tail path (2 micro-batches of 16); ``cnn`` uses its defaults
(64, 4 micro-batches). The parity tests fail when the micro-batch losses are not weighted by
their share of the global batch (checked by breaking ``MicrobatchLoss`` on purpose).
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Any

import pytest

from parabench.case.execute import execute
from parabench.config import RunConfig
from parabench.core.pool import WorkerPool
from parabench.method import EpochStats
from parabench.registry import methods, workloads
from parabench.torch.session import fold_epochs
from parabench.torch.staged import fold_stage_epochs
from parabench.torch.stages import (
    Layout,
    balanced_bounds,
    bubble_for_shares,
    cut_points,
    micro_split,
    sequential_reason,
)
from weight_parity import assert_same_weights

pytestmark = [pytest.mark.cpu, pytest.mark.torch]

PROGRAM = "parabench.torch.pipeline:PipelineProgram"
#: (epochs, global batch, micro-batches) per workload
SETUP = {"mlp": (2, 48, 3), "cnn": (1, 64, 4)}
#: method case -> (method, workers, stages, extra options)
CASES = {
    "pipeline-gpipe": ("pipeline", 2, 2, {"schedule": "gpipe"}),
    "pipeline-1f1b": ("pipeline", 2, 2, {"schedule": "1f1b"}),
    "hybrid-2x2": ("hybrid", 4, 2, {"schedule": "1f1b", "stages": 2}),
}


def _config(workload: str, method: str, workers: int = 1, **options: Any) -> RunConfig:
    epochs, batch, micro = SETUP[workload]
    if method != "serial" and method != "model_parallel":
        options = {"microbatches": micro, **options}
    return RunConfig(workload=workload, method=method, workers=workers, threads_per_worker=1,
                     profile="tiny", epochs=epochs, batch_size=batch, options=options)


@functools.cache
def serial_run(workload: str) -> tuple[dict[str, Any], list[float], float]:
    config = _config(workload, "serial")
    with methods.get("serial").session(workloads.get(workload), config) as session:
        session.start()
        losses = [session.train_epoch(e).loss for e in range(config.epochs)]
        weights = {k: v.detach().clone() for k, v in session.loop.model.state_dict().items()}
        return weights, losses, session.evaluate()


@pytest.fixture(scope="module", params=list(CASES))
def method_case(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture(scope="module", params=[
    pytest.param("mlp", id="mlp"),
    pytest.param("cnn", id="cnn", marks=pytest.mark.slow),  # a conv net: the same promise
])
def trained(method_case: str, request: pytest.FixtureRequest) -> Iterator[dict[str, Any]]:
    """A pool of the case's ranks on the workload, trained, kept for the checks below."""
    workload = request.param
    method, workers, stages, options = CASES[method_case]
    config = _config(workload, method, workers, **options)
    assert methods.get(method).check(workloads.get(workload), config) is None
    args = {"workload": workload, "config": config.to_dict(), "stages": stages}
    with WorkerPool(workers, PROGRAM, args, threads=1, timeout_s=300) as pool:
        epochs = [pool.call("train_epoch", epoch=e) for e in range(config.epochs)]
        yield {"workload": workload, "pool": pool, "epochs": epochs, "stages": stages,
               "weights": pool.call("state_dict"), "describe": pool.call("describe")[0],
               "quality": pool.call("evaluate")[0], "notes": pool.call("extra_notes")}


def test_weights_match_serial_at_the_same_global_batch(trained: dict[str, Any]) -> None:
    expected, serial_losses, serial_quality = serial_run(trained["workload"])
    for rank, weights in enumerate(trained["weights"]):
        assert_same_weights(weights, expected, f"rank {rank}")
    # the epoch loss (last stages only, sample-weighted) and the held-out quality are serial's
    losses = [fold_epochs(per_rank).loss for per_rank in trained["epochs"]]
    assert losses == pytest.approx(serial_losses, rel=1e-4)
    assert trained["quality"] == pytest.approx(serial_quality, abs=1e-6)


def test_every_global_sample_counts_once_and_idle_is_the_bubble(
    trained: dict[str, Any],
) -> None:
    n = trained["describe"]["samples_per_epoch"]
    stages = trained["stages"]
    for per_rank in trained["epochs"]:
        # only the last stage of each replica counts samples; replicas shard the epoch
        assert sum(s.samples for s in per_rank) == n
        assert [s.samples > 0 for s in per_rank] == [r % stages == stages - 1
                                                     for r in range(len(per_rank))]
        for stats in per_rank:
            c = stats.components
            busy = c["data"] + c["forward"] + c["backward"] + c["optimizer"] + c["communication"]
            assert c["forward"] > 0 and c["backward"] > 0
            assert (c["communication"] > 0) == (len(per_rank) > stages)  # hybrid's all-reduce
            assert c["idle"] == pytest.approx(max(0.0, stats.seconds - busy))  # the rest
        notes: dict[str, Any] = {}
        folded = fold_stage_epochs(per_rank, notes)
        assert notes["bubble_fraction"][0] == pytest.approx(
            sum(s.components["idle"] for s in per_rank) / len(per_rank) / folded.seconds,
            abs=1e-4)
        assert 0 < notes["bubble_fraction"][0] < 1
        slowest = max(per_rank, key=lambda s: s.seconds)
        assert folded.components == slowest.components  # they partition the epoch


def test_replicas_take_disjoint_shards_like_ddp(trained: dict[str, Any]) -> None:
    from parabench.torch.loop import epoch_order

    stages, pool = trained["stages"], trained["pool"]
    shards = pool.call("seen", epoch=0)
    replicas = len(shards) // stages
    n = trained["describe"]["samples_per_epoch"]
    order = epoch_order(n, 0, 0).tolist()
    for rank, shard in enumerate(shards):
        assert shard == order[rank // stages::replicas]  # every stage of a replica agrees


def test_stage_plan_is_recorded(trained: dict[str, Any]) -> None:
    notes = trained["describe"]["notes"]
    bounds = notes["stage_layers"]
    assert len(bounds) == trained["stages"] and bounds[0][0] == 0
    assert all(a[1] == b[0] for a, b in zip(bounds, bounds[1:], strict=False))
    assert sum(notes["stage_cost_shares"]) == pytest.approx(1.0, abs=1e-3)
    assert notes["bubble_theory"] == pytest.approx(
        (trained["stages"] - 1) / (notes["microbatches"] + trained["stages"] - 1), abs=1e-4)


@pytest.mark.slow
def test_bf16_pipeline_stays_with_serial_bf16() -> None:
    """bf16 activations cross the stage boundary: receive buffers must be bf16 too (else NaN).

    Not bit-exact: micro-batch gradients accumulate in fp32 where serial's full-batch matmul
    rounds once. So the yardstick is bf16's own error: the pipeline must be closer to serial
    bf16 than serial bf16 is to serial fp32, with the same epoch losses to 0.5 %.
    """
    import torch

    def distance(a: dict[str, Any], b: dict[str, Any]) -> float:
        return float(torch.cat([(a[k] - b[k]).flatten() for k in a]).norm())

    serial_config = _config("mlp", "serial", precision="bf16")
    with methods.get("serial").session(workloads.get("mlp"), serial_config) as s:
        s.start()
        losses = [s.train_epoch(e).loss for e in range(serial_config.epochs)]
        expected = {k: v.detach().clone() for k, v in s.loop.model.state_dict().items()}
    config = _config("mlp", "pipeline", 2, schedule="1f1b", precision="bf16")
    args = {"workload": "mlp", "config": config.to_dict(), "stages": 2}
    with WorkerPool(2, PROGRAM, args, threads=1, timeout_s=300) as pool:
        epochs = [pool.call("train_epoch", epoch=e) for e in range(config.epochs)]
        weights = pool.call("state_dict")[0]
    assert all(torch.isfinite(v).all() for v in weights.values())
    assert distance(weights, expected) < distance(expected, serial_run("mlp")[0])
    assert [fold_epochs(e).loss for e in epochs] == pytest.approx(losses, rel=5e-3)


@pytest.mark.parametrize("workload", list(SETUP))
def test_model_parallel_matches_serial(workload: str) -> None:
    config = _config(workload, "model_parallel", stages=3)
    method = methods.get("model_parallel")
    assert method.check(workloads.get(workload), config) is None
    with method.session(workloads.get(workload), config) as session:
        session.start()
        for epoch in range(config.epochs):
            session.train_epoch(epoch)
        assert_same_weights(session.state_dict(), serial_run(workload)[0], "model_parallel")
        assert session.notes["devices"] == ["cpu"] * 3
        assert "one CPU device" in session.notes["model_parallel_note"]


@pytest.mark.slow
def test_execute_runs_cnn_pipeline_1f1b_end_to_end() -> None:
    """Through ``execute`` (the runner's worker body): cnn's pipeline parity."""
    epochs = SETUP["cnn"][0]
    result = execute(RunConfig(workload="cnn", method="pipeline", workers=2,
                               threads_per_worker=1, profile="tiny", epochs=epochs,
                               options={"schedule": "1f1b", "microbatches": 4}))
    assert result.status == "ok", result.reason + str(result.extra.get("traceback"))
    assert result.workers == 2 and result.batch_size == 64 and result.startup_s
    assert result.extra["schedule"] == "1f1b" and result.extra["bubble_theory"] == 0.2
    assert len(result.extra["bubble_fraction"]) == epochs
    assert {"idle", "communication", "forward"} <= result.components.keys()
    _, serial_losses, serial_quality = serial_run("cnn")
    assert result.loss == pytest.approx(serial_losses, rel=1e-4)
    assert result.quality is not None
    assert result.quality.value == pytest.approx(serial_quality, abs=1e-6)


@pytest.mark.parametrize("method", ["pipeline", "hybrid", "model_parallel"])
def test_a_workload_without_a_sequential_view_is_skipped_with_the_reason(method: str) -> None:
    workers = 1 if method == "model_parallel" else 2
    config = RunConfig(workload="seq2seq", method=method, workers=workers, profile="tiny")
    result = execute(config)
    assert result.status == "skipped"
    assert "no nn.Sequential view" in result.reason


@pytest.mark.parametrize(("method", "workers", "options", "batch", "says"), [
    ("pipeline", 2, {"stages": 3}, None, "one stage per worker"),
    ("pipeline", 2, {"schedule": "1f1b", "microbatches": 1}, None, "at least as many"),
    ("pipeline", 2, {"microbatches": 5}, None, "equal micro-batches"),
    ("pipeline", 2, {}, "auto", "auto"),
    ("pipeline", 2, {"num_workers": 1}, None, "DataLoader"),
    ("hybrid", 3, {"stages": 2}, None, "not a multiple"),
    ("hybrid", 4, {"stages": 2, "microbatches": 4}, 36, "equal micro-batches"),
    ("pipeline", 3, {}, None, "at most 2 stages"),
])
def test_check_gives_the_reason(method: str, workers: int, options: dict[str, Any],
                                batch: int | str | None, says: str) -> None:
    workload = "nbow" if says == "at most 2 stages" else "mlp"
    config = RunConfig(workload=workload, method=method, workers=workers, profile="tiny",
                       batch_size=batch, options=options)
    reason = methods.get(method).check(workloads.get(workload), config)
    assert reason is not None and says in reason


def test_balanced_bounds_minimise_the_largest_stage() -> None:
    assert balanced_bounds([1, 1, 1, 1], 2) == [(0, 2), (2, 4)]
    assert balanced_bounds([8, 1, 1, 1, 1], 2) == [(0, 1), (1, 5)]
    assert balanced_bounds([1, 2, 3, 4, 5, 6], 3) == [(0, 3), (3, 5), (5, 6)]
    # stage 1 may not start at index 1 or 2: the best allowed cut is after layer 3
    assert balanced_bounds([1, 1, 1, 1], 2, allowed={3}) == [(0, 3), (3, 4)]
    with pytest.raises(ValueError, match="non-empty"):
        balanced_bounds([1, 1], 3)


def test_cut_points_skip_in_place_layers() -> None:
    from torch import nn

    view = nn.Sequential(nn.Linear(2, 2), nn.ReLU(inplace=True), nn.Linear(2, 2), nn.ReLU())
    assert cut_points(view) == {2, 3}


def test_micro_split_keeps_micro_batches_equal() -> None:
    assert micro_split(64, 4) == (4, 16)
    assert micro_split(32, 3) == (2, 16)  # the tail: the largest count <= 3 dividing 32
    assert micro_split(7, 4) == (1, 7)
    assert Layout(stages=2, replicas=1, microbatches=4, schedule="gpipe").bubble_theory() == 0.2


def test_bubble_for_shares_is_the_theory_when_stages_are_equal() -> None:
    assert bubble_for_shares([0.5, 0.5], 4) == pytest.approx(0.2)
    assert bubble_for_shares([0.25] * 4, 8) == pytest.approx(3 / 11)
    # 90 / 10: the slow stage paces 3 micro-batches after the first crossed both stages
    assert bubble_for_shares([0.9, 0.1], 4) == pytest.approx(1 - 4 / (2 * 3.7))


def test_sequential_reason_counts_usable_cut_points() -> None:
    assert sequential_reason(workloads.get("mlp"), 5) is None
    assert "at most 5 stages" in (sequential_reason(workloads.get("mlp"), 6) or "")


def test_fold_stage_epochs_keeps_the_slowest_rank_and_records_the_bubble() -> None:
    notes: dict[str, Any] = {}
    folded = fold_stage_epochs([
        EpochStats(seconds=2.0, loss=0.0, samples=0, components={"idle": 0.2, "forward": 1.0}),
        EpochStats(seconds=1.9, loss=3.0, samples=10, components={"idle": 0.6, "forward": 0.5}),
    ], notes)
    assert folded.seconds == 2.0 and folded.loss == 3.0 and folded.samples == 10
    # the slowest rank's components (they add up with its epoch); the bubble is the mean idle
    assert folded.components == {"idle": 0.2, "forward": 1.0}
    assert notes["bubble_fraction"] == [0.2]


@pytest.mark.cuda
def test_model_parallel_on_cuda_matches_serial_on_cuda() -> None:
    """One GPU: one stage on cuda:0 (k GPUs: ``--stages k``, see the multigpu test)."""
    _cuda_model_parallel_parity(stages=1)


@pytest.mark.multigpu
def test_model_parallel_across_two_gpus_matches_serial() -> None:
    _cuda_model_parallel_parity(stages=2)


def _cuda_model_parallel_parity(stages: int) -> None:
    config = _config("cnn", "model_parallel", stages=stages).replace(device="cuda")
    serial_config = _config("cnn", "serial").replace(device="cuda")
    with methods.get("serial").session(workloads.get("cnn"), serial_config) as s:
        s.start()
        for epoch in range(config.epochs):
            s.train_epoch(epoch)
        expected = {k: v.detach().cpu() for k, v in s.loop.model.state_dict().items()}
    with methods.get("model_parallel").session(workloads.get("cnn"), config) as session:
        session.start()
        for epoch in range(config.epochs):
            session.train_epoch(epoch)
        assert session.notes["devices"] == [f"cuda:{i}" for i in range(stages)]
        assert_same_weights(session.state_dict(), expected, "model_parallel cuda")
        assert session.peak_gpu_mb()


@pytest.mark.multigpu
def test_pipeline_on_two_gpus_runs_with_nccl() -> None:
    result = execute(_config("cnn", "pipeline", 2).replace(device="cuda", epochs=2))
    assert result.status == "ok", result.reason + str(result.extra.get("traceback"))
    assert result.extra["rank_devices"] == ["cuda:0", "cuda:1"]
    assert len(result.extra["peak_gpu_mb_per_rank"]) == 2
