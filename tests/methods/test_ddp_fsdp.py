"""``ddp`` and ``fsdp`` are serial's mathematics: same weights, disjoint shards, every sample once.

The parity tests run the real rank programs in a real 2-rank gloo pool and compare their
weights with ``serial`` at the same global batch, after two epochs (64 optimizer steps on
``mlp`` tiny). They fail when gradients are not averaged across ranks or the order is not
sharded (checked by breaking each on purpose).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from parabench.case.execute import execute
from parabench.config import RunConfig
from parabench.core.pool import WorkerPool
from parabench.method import EpochStats
from parabench.registry import methods, workloads
from parabench.torch.data_parallel import step_scales
from parabench.torch.session import fold_epochs

pytestmark = [pytest.mark.torch]  # and cpu / cuda / multigpu per test

PROGRAMS = {"ddp": "parabench.methods.ddp:DDPProgram", "fsdp": "parabench.methods.fsdp:FSDPProgram"}
EPOCHS = 2
#: float tolerance: the all-reduced mean sums in a different order than serial's batch mean,
#: and two epochs accumulate it (cnn tiny on torch 2.14.1: 2.7e-5 at most, in 26 of 18,432
#: weights of its second convolution; a summed instead of averaged gradient doubles every
#: update: tests/methods/test_planted_bugs_torch.py)
TOL = {"rtol": 1e-4, "atol": 1e-4}


def parity_workloads() -> list[Any]:
    """mlp always; cnn (a conv net: different layers, same promise) in the slow set."""
    marks = {"mlp": (), "cnn": (pytest.mark.slow,)}
    return [pytest.param(w, marks=m, id=w) for w, m in marks.items() if w in workloads]


def _config(workload: str, method: str, workers: int, **changes: Any) -> RunConfig:
    return RunConfig(workload=workload, method=method, workers=workers, threads_per_worker=1,
                     profile="tiny", epochs=EPOCHS, **changes)


def serial_weights(workload: str, **changes: Any) -> tuple[dict[str, Any], list[float]]:
    config = _config(workload, "serial", 1, **changes)
    with methods.get("serial").session(workloads.get(workload), config) as session:
        session.start()
        losses = [session.train_epoch(e).loss for e in range(EPOCHS)]
        return {k: v.detach().clone() for k, v in session.loop.model.state_dict().items()}, losses


@pytest.fixture(scope="module", params=["ddp", "fsdp"])
def method(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture(scope="module", params=parity_workloads())
def trained(method: str, request: pytest.FixtureRequest) -> Iterator[dict[str, Any]]:
    """A 2-rank pool of ``method`` on the workload, trained EPOCHS epochs, kept for checks."""
    workload = request.param
    config = _config(workload, method, 2)
    args = {"workload": workload, "config": config.to_dict()}
    with WorkerPool(2, PROGRAMS[method], args, threads=1, timeout_s=300) as pool:
        epochs = [pool.call("train_epoch", epoch=e) for e in range(EPOCHS)]
        yield {"workload": workload, "pool": pool, "epochs": epochs,
               "weights": pool.call("state_dict"), "describe": pool.call("describe")[0]}


@pytest.mark.cpu
def test_weights_match_serial_at_the_same_global_batch(trained: dict[str, Any]) -> None:
    import torch

    expected, serial_losses = serial_weights(trained["workload"])
    assert trained["describe"]["batch_size"] == 64
    assert trained["describe"]["notes"]["batch_per_rank"] == 32
    for rank, weights in enumerate(trained["weights"]):
        assert weights.keys() == expected.keys()
        for name, value in expected.items():
            torch.testing.assert_close(weights[name], value, **TOL,
                                       msg=lambda m, n=name, r=rank: f"rank {r} {n}: {m}")
    # the loss each epoch reports (sample-weighted over ranks) is serial's as well
    losses = [fold_epochs(per_rank).loss for per_rank in trained["epochs"]]
    assert losses == pytest.approx(serial_losses, rel=1e-4)


@pytest.mark.cpu
def test_ranks_see_disjoint_shards_that_cover_every_sample_once(trained: dict[str, Any]) -> None:
    from parabench.torch.loop import epoch_order

    pool: WorkerPool = trained["pool"]
    n = trained["describe"]["samples_per_epoch"]
    for epoch in range(EPOCHS):
        shards = pool.call("seen", epoch=epoch)
        assert not set(shards[0]) & set(shards[1])
        assert sorted(shards[0] + shards[1]) == list(range(n))
        # step k of both ranks together is serial's batch k
        order, local = epoch_order(n, 0, epoch).tolist(), 32
        for k in range(0, n // 64):
            together = shards[0][k * local:(k + 1) * local] + shards[1][k * local:(k + 1) * local]
            assert sorted(together) == sorted(order[k * 64:(k + 1) * 64])
    counts = [[s.samples for s in per_rank] for per_rank in trained["epochs"]]
    assert counts == [[n // 2, n // 2]] * EPOCHS


@pytest.mark.cpu
def test_epoch_time_is_the_slowest_rank_and_samples_add_up(trained: dict[str, Any]) -> None:
    for per_rank in trained["epochs"]:
        folded = fold_epochs(per_rank)
        assert folded.seconds == max(s.seconds for s in per_rank) > 0
        assert folded.samples == sum(s.samples for s in per_rank)
        assert {"data", "forward", "backward", "optimizer"} <= folded.components.keys()


@pytest.mark.cpu
def test_ddp_measures_communication_through_its_hook(trained: dict[str, Any]) -> None:
    is_ddp = trained["pool"].program == PROGRAMS["ddp"]
    for per_rank in trained["epochs"]:
        for stats in per_rank:
            if not is_ddp:  # FSDP2 has no hook: it must not pretend to measure one
                assert "communication" not in stats.components
                continue
            comm = stats.components["communication"]
            assert 0 < comm <= stats.seconds


@pytest.mark.cpu
@pytest.mark.slow
def test_uneven_last_batch_is_weighted_back_to_serial() -> None:
    """3 ranks, global batch 48 over 2048 samples: the last batch of 32 splits 11/11/10."""
    import torch

    assert step_scales(2048, 48, 2, 3)[-1] == pytest.approx(10 * 3 / 32)
    expected, _ = serial_weights("mlp", batch_size=48)
    config = _config("mlp", "ddp", 3, batch_size=48)
    args = {"workload": "mlp", "config": config.to_dict()}
    with WorkerPool(3, PROGRAMS["ddp"], args, threads=1, timeout_s=300) as pool:
        for e in range(EPOCHS):
            pool.call("train_epoch", epoch=e)
        weights = pool.call("state_dict")[2]
    for name, value in expected.items():
        torch.testing.assert_close(weights[name], value, **TOL)


@pytest.mark.cpu
def test_step_scales_refuse_a_last_batch_smaller_than_the_world() -> None:
    assert step_scales(128, 64, 0, 2) == [1.0, 1.0]
    with pytest.raises(ValueError, match="without data"):
        step_scales(129, 64, 0, 2)  # the last batch holds 1 sample for 2 ranks


@pytest.mark.cpu
def test_fold_weights_loss_by_samples() -> None:
    folded = fold_epochs([
        EpochStats(seconds=1.0, loss=1.0, samples=30, components={"forward": 0.2}),
        EpochStats(seconds=2.0, loss=4.0, samples=10, components={"forward": 0.1, "x": 1.0}),
    ])
    assert folded == EpochStats(seconds=2.0, loss=1.75, samples=40,
                                components={"forward": 0.1, "x": 1.0})  # the slowest rank's


@pytest.mark.cpu
@pytest.mark.parametrize("method_name", ["ddp", "fsdp"])
def test_check_skips_a_global_batch_not_divisible_by_workers(method_name: str) -> None:
    reason = methods.get(method_name).check(
        workloads.get("mlp"), _config("mlp", method_name, 3, batch_size=64)
    )
    assert reason is not None and "not divisible by 3 workers" in reason


@pytest.mark.cpu
def test_cuda_needs_one_gpu_per_worker() -> None:
    from parabench import hardware

    config = _config("mlp", "ddp", hardware.cuda_device_count() + 1, device="cuda")
    reason = methods.get("ddp").check(workloads.get("mlp"), config)
    assert reason is not None and ("GPU" in reason or "CUDA" in reason)


@pytest.mark.cpu
def test_execute_runs_ddp_end_to_end_with_the_thread_budget_recorded() -> None:
    result = execute(RunConfig(workload="mlp", method="ddp", workers=2, threads_per_worker=1,
                               profile="tiny", epochs=2))
    assert result.status == "ok", result.reason + str(result.extra.get("traceback"))
    assert result.workers == 2 and result.threads_per_worker == 1 and result.batch_size == 64
    assert result.facts.rank_threads == [1, 1]
    assert result.startup_s and result.quality and result.quality.value > 0.5  # 4 classes
    assert len(result.components["communication"]) == 2


@pytest.mark.slow
@pytest.mark.cpu
def test_cli_runs_fsdp(tmp_path: Path) -> None:
    """Through the runner: its own process group, the ranks its grandchildren."""
    out = tmp_path / "r.jsonl"
    proc = subprocess.run(
        [sys.executable, "-m", "parabench", "run", "--workload", "mlp", "--method", "fsdp",
         "--workers", "2", "--threads", "1", "--profile", "tiny", "--epochs", "2",
         "--out", str(out)],
        capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["method"], r["status"], r["workers"]) for r in rows] == [("fsdp", "ok", 2)], rows
    assert rows[0]["peak_rss_mb"] > 0 and rows[0]["quality"]["value"] > 0.5
    cores = rows[0]["machine"]["rank_cores"]  # each rank on its own core, said in the result
    assert len(cores) == 2 and all(cores)
    if len(os.sched_getaffinity(0)) >= 2:
        assert len(cores[0]) == len(cores[1]) == 1 and cores[0] != cores[1], cores


@pytest.mark.cpu
@pytest.mark.slow
def test_torchrun_two_simulated_nodes_write_one_result_with_serial_losses(tmp_path: Path) -> None:
    """Two torchrun agents (--nnodes 2 --nproc-per-node 1) on localhost, c10d rendezvous."""
    import os
    import shutil
    import socket

    torchrun = shutil.which("torchrun") or str(Path(sys.executable).parent / "torchrun")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = tmp_path / "r.jsonl"
    cmd = [torchrun, "--nnodes", "2", "--nproc-per-node", "1", "--rdzv-backend", "c10d",
           "--rdzv-endpoint", f"127.0.0.1:{port}", "--max-restarts", "0",
           "-m", "parabench.cli.torchrun", "--workload", "mlp", "--method", "ddp",
           "--epochs", "2", "--profile", "tiny", "--threads", "1", "--out", str(out)]
    env = {**os.environ, "GLOO_SOCKET_IFNAME": "lo"} if Path("/sys/class/net/lo").exists() \
        else dict(os.environ)
    nodes = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              env=env, cwd=tmp_path) for _ in range(2)]
    try:
        logs = [node.communicate(timeout=300)[0] for node in nodes]
    finally:
        for node in nodes:
            node.kill()
    assert [n.returncode for n in nodes] == [0, 0], "\n".join(logs)
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 1, rows  # rank 0 only
    row = rows[0]
    assert (row["status"], row["workers"], row["threads_per_worker"]) == ("ok", 2, 1), row
    assert row["extra"]["launcher"] == "torchrun" and row["facts"]["rank_threads"] == [1, 1]
    assert len(row["facts"]["rank_max_rss_mb"]) == 2 and row["peak_rss_mb"] > 0
    _, serial_losses = serial_weights("mlp")
    assert row["loss"] == pytest.approx(serial_losses, rel=1e-4)


def _cuda_parity(method: str, workers: int) -> None:
    """``method`` on ``workers`` GPUs (nccl) against serial on cuda:0 at the same global batch."""
    import torch

    expected, _ = serial_weights("mlp", device="cuda")
    config = _config("mlp", method, workers, device="cuda")
    args = {"workload": "mlp", "config": config.to_dict()}
    with WorkerPool(workers, PROGRAMS[method], args, device="cuda", threads=1,
                    timeout_s=300) as pool:
        assert pool.backend == "nccl"
        assert [i["device"] for i in pool.rank_info] == [f"cuda:{r}" for r in range(workers)]
        for e in range(EPOCHS):
            pool.call("train_epoch", epoch=e)
        all_weights = pool.call("state_dict")
        assert all(p is not None and p > 0 for p in pool.call("peak_gpu_mb"))
    for weights in all_weights:
        for name, value in expected.items():
            # cuBLAS may pick different kernels per batch shape: a looser float tolerance
            torch.testing.assert_close(weights[name], value.cpu(), rtol=1e-3, atol=1e-4)


@pytest.mark.cuda
@pytest.mark.parametrize("method_name", ["ddp", "fsdp"])
def test_nccl_world_of_one_matches_serial_on_the_gpu(method_name: str) -> None:
    _cuda_parity(method_name, 1)


@pytest.mark.multigpu
@pytest.mark.parametrize("method_name", ["ddp", "fsdp"])
def test_nccl_two_gpus_match_serial(method_name: str) -> None:
    _cuda_parity(method_name, 2)
