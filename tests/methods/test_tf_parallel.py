"""TensorFlow data parallelism: tf_multiworker (and MirroredStrategy) against tf_serial.

Parity is checked on what is computed: the trainable weights after K global steps at the same
global batch must equal tf_serial's to float tolerance (a loss divided by the local instead of
the global batch, or a missing all-reduce, is off by far more). Also: a worker killed mid-case
fails the case naming it and leaves no process, and the CLI compares tf_multiworker with
tf_serial. TensorFlow starts slowly, so each test starts as few worker processes as it can.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import pytest

from casewatch import command_line
from parabench.analysis.parity import assess
from parabench.case.result import QualityValue, Result, read_results
from parabench.config import RunConfig
from parabench.methods.tf_data_parallel import reserve_ports, tf_config
from parabench.registry import methods, workloads
from parabench.sweep.table import summarize

STEPS = 4  # K global steps of the weight-parity tests
ATOL = 1e-5


def _config(method: str, workers: int, workload: str = "cnn", **kw: Any) -> RunConfig:
    return RunConfig(workload=workload, method=method, workers=workers, threads_per_worker=1,
                     profile="tiny", epochs=1, timeout_s=300, **kw)


def _train(method: str, workers: int, device: str = "cpu") -> tuple[list[list[np.ndarray]], float]:
    """Every worker's weights after STEPS steps of epoch 0, and the folded loss."""
    config = _config(method, workers, device=device)
    session = methods.get(method).session(workloads.get(config.workload), config)
    try:
        session.start()
        initial = session.pool.call("weights")[0]
        stats = session.pool.call("train_epoch", epoch=0, limit=STEPS)
        weights = session.pool.call("weights")
    finally:
        session.close()
    assert _max_diff(initial, weights[0]) > 1e-3  # the steps moved the weights
    samples = sum(s.samples for s in stats)
    assert samples == STEPS * 64  # every worker's share of K global batches, each sample once
    return weights, sum(s.loss * s.samples for s in stats) / samples


def _max_diff(a: list[np.ndarray], b: list[np.ndarray]) -> float:
    assert [x.shape for x in a] == [y.shape for y in b]
    return max(float(np.abs(x - y).max()) for x, y in zip(a, b, strict=True))


@pytest.fixture(scope="module")
def serial() -> tuple[list[np.ndarray], float]:
    weights, loss = _train("tf_serial", 1)
    return weights[0], loss


@pytest.mark.cpu
@pytest.mark.tf
@pytest.mark.slow
def test_tf_multiworker_weights_match_tf_serial_on_cnn(serial: tuple) -> None:
    (w0, w1), loss = _train("tf_multiworker", 2)
    print(f"\ntf_multiworker vs tf_serial after {STEPS} steps: max |dw| = "
          f"{_max_diff(w0, serial[0]):.3g}, loss {loss:.6f} vs {serial[1]:.6f}")
    assert _max_diff(w0, serial[0]) < ATOL
    assert _max_diff(w0, w1) == 0.0  # replicas stay identical: the all-reduce ran
    assert loss == pytest.approx(serial[1], rel=1e-5)


@pytest.mark.cpu
@pytest.mark.tf
@pytest.mark.slow
def test_mirrored_strategy_over_logical_cpus_matches_tf_serial(serial: tuple) -> None:
    # tf_mirrored itself needs >= 2 GPUs; its session on "cpu" splits one CPU into logical
    # devices before any op, which exercises the same MirroredStrategy code path
    (weights,), loss = _train("tf_mirrored", 2)
    print(f"\ntf_mirrored (2 logical CPUs) vs tf_serial: max |dw| = "
          f"{_max_diff(weights, serial[0]):.3g}")
    assert _max_diff(weights, serial[0]) < ATOL
    assert loss == pytest.approx(serial[1], rel=1e-5)


@pytest.mark.multigpu
@pytest.mark.tf
@pytest.mark.slow
@pytest.mark.parametrize("method", ["tf_multiworker", "tf_mirrored"])
def test_tf_data_parallel_over_two_gpus_matches_tf_serial_on_one(method: str) -> None:
    (reference,), serial_loss = _train("tf_serial", 1, device="cuda")
    weights, loss = _train(method, 2, device="cuda")
    # cuDNN picks its own convolution algorithms per shape: looser than on CPU, still far
    # below what a wrong gradient scale gives (6e-3 after 4 steps on CPU)
    assert _max_diff(weights[0], reference) < 1e-4
    assert loss == pytest.approx(serial_loss, rel=1e-4)


@pytest.mark.cpu
@pytest.mark.tf
@pytest.mark.slow
def test_killing_a_worker_mid_case_fails_it_naming_the_worker_and_leaves_nothing(
    tmp_path: Path,
) -> None:
    from parabench.case.isolate import run_isolated

    config = _config("tf_multiworker", 2, workload="mlp")
    config = RunConfig.from_dict({**config.to_dict(), "epochs": 200})
    workers: list[psutil.Process] = []
    # pools this process started earlier left their (shared) multiprocessing resource tracker
    before = {p.pid for p in psutil.Process().children(recursive=True)}

    def kill_one_worker(line: str) -> None:
        if workers or not line.startswith("epoch "):
            return  # wait until training runs: start-up is over, collectives are in flight
        workers.extend(p for p in psutil.Process().children(recursive=True)
                       if "spawn_main" in " ".join(command_line(p)))
        workers[1].send_signal(signal.SIGKILL)

    result = run_isolated(config, workdir=tmp_path, on_tick=kill_one_worker)
    assert len(workers) == 2, "training never started, or not in two worker processes"
    assert result.status == "failed"
    assert re.search(r"rank \d died \(exit -9, SIGKILL\)", result.reason), result.reason
    assert 1 <= len(result.epoch_s) < 200  # the epochs before the kill are kept
    for proc in workers:  # the survivor was killed too, not left in its all-reduce
        assert not proc.is_running() or proc.status() == psutil.STATUS_ZOMBIE
    assert [p for p in psutil.Process().children(recursive=True) if p.pid not in before] == []


@pytest.mark.cpu
@pytest.mark.tf
@pytest.mark.slow
def test_cli_compares_tf_multiworker_with_tf_serial(tmp_path: Path) -> None:
    out = tmp_path / "r.jsonl"
    proc = subprocess.run(
        [sys.executable, "-m", "parabench", "run", "--workload", "mlp", "--method",
         "tf_multiworker,tf_serial", "--workers", "2", "--threads", "1", "--profile", "tiny",
         "--epochs", "2", "--out", str(out)],
        capture_output=True, text=True, timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = {r.method: r for r in read_results(out)}
    assert results["tf_serial"].parity.kind == "baseline"
    multi = results["tf_multiworker"]
    assert multi.workers == 2 and multi.status == "ok"
    assert multi.parity.status == "ok" and multi.parity.baseline == "tf_serial/cpu"
    assert multi.startup_s and multi.startup_s > 0 and multi.extra["tf_intra_op_threads"] == 1
    rows = {row.method: row for row in summarize(read_results(out))}
    assert rows["tf_multiworker"].baseline == "tf_serial/cpu t=2 bs=64"  # vs tf_serial, 2 x 1


# -- no TensorFlow needed -------------------------------------------------------------------


class EnvProbe:
    """A rank program of a pool without a torch process group (imported by name by ranks)."""

    def __init__(self, ctx: Any) -> None:
        self.ctx = ctx

    def seen(self) -> dict[str, Any]:
        return {"rank": self.ctx.rank, "tf_config": os.environ.get("TF_CONFIG"),
                "omp": os.environ.get("OMP_NUM_THREADS"), "torch": "torch" in sys.modules}


@pytest.mark.cpu
def test_a_pool_without_a_torch_group_hosts_other_engines_workers() -> None:
    from parabench.core.pool import NO_GROUP, WorkerError, WorkerPool

    env = [{"TF_CONFIG": "zero"}, {"TF_CONFIG": "one"}]
    with WorkerPool(2, EnvProbe, backend=NO_GROUP, threads=1, rank_env=env) as pool:
        seen = pool.call("seen")
        assert [s["tf_config"] for s in seen] == ["zero", "one"]  # each rank its own
        assert all(s["omp"] == "1" and not s["torch"] for s in seen)  # no torch imported
        victim = pool.pids[1]
        os.kill(victim, signal.SIGKILL)
        with pytest.raises(WorkerError, match=r"rank 1 died \(exit -9, SIGKILL\)"):
            pool.call("seen")
    assert not psutil.pid_exists(pool.pids[0]) or psutil.Process(pool.pids[0]).status() == \
        psutil.STATUS_ZOMBIE


def test_tf_config_names_every_worker_on_localhost() -> None:
    cfg = json.loads(tf_config([5001, 5002], 1))
    assert cfg == {"cluster": {"worker": ["127.0.0.1:5001", "127.0.0.1:5002"]},
                   "task": {"type": "worker", "index": 1}}


def test_reserved_ports_are_distinct_and_taken_until_released() -> None:
    held = reserve_ports(2)
    ports = [s.getsockname() for s in held]
    assert ports[0] != ports[1] and all(host == "127.0.0.1" for host, _ in ports)
    with socket.socket() as other, pytest.raises(OSError):
        other.bind(ports[0])  # nobody else gets the port while it is held
    for sock in held:
        sock.close()


def test_tf_methods_skip_workloads_without_a_keras_model() -> None:
    config = _config("tf_multiworker", 2, workload="vgg11")
    reason = methods.get("tf_multiworker").check(workloads.get("vgg11"), config)
    assert reason is not None and "no Keras model for workload vgg11" in reason
    assert "cnn, mlp" in reason
    mirrored = methods.get("tf_mirrored").check(workloads.get("cnn"), _config("tf_mirrored", 2))
    assert mirrored is not None and "GPU" in mirrored


def _result(method: str, quality: float) -> Result:
    return Result(
        workload="cnn", method=method, device="cpu", workers=1 if "serial" in method else 2,
        threads_per_worker=1, batch_size=64, epochs=1, profile="tiny", seed=0, repeat=0,
        status="ok", epoch_s=[1.0],
        quality=QualityValue(name="accuracy", value=quality, higher_is_better=True),
        config={"options": {}},
    )


def test_tf_multiworker_is_judged_against_tf_serial_not_serial() -> None:
    baselines = [_result("serial", 0.30), _result("tf_serial", 0.90)]
    parity = assess(_result("tf_multiworker", 0.89), baselines)
    assert parity is not None and parity.status == "ok"
    assert parity.baseline == "tf_serial/cpu" and parity.baseline_quality == 0.90
    ddp = assess(_result("ddp", 0.89), baselines)
    assert ddp is not None and ddp.baseline == "serial/cpu"
    alone = assess(_result("tf_multiworker", 0.89), [_result("serial", 0.89)])
    assert alone is not None and "add --method tf_serial" in alone.reason


@pytest.fixture(autouse=True)
def _no_stray_tf_config(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TF_CONFIG", raising=False)
    assert "TF_CONFIG" not in os.environ
