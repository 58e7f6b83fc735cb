"""Time to target between parts of an epoch: evaluating there changes nothing of the training,
and ``samples_to_target`` is the samples trained up to the evaluation that reached it.

The mathematics: an epoch trained in eight parts with a held-out evaluation after each gives
the same weights, bit for bit, as the epoch trained whole, for serial (cnn; and vgg11, whose
BatchNorm statistics an evaluation in train mode would move), for ddp and fsdp on gloo with 2
ranks, for ddp with a share-weighted uneven last batch (3 ranks), for the pipeline (2 stages,
a short last batch on its own schedule), and for fedavg (one part per round). A control shows
the comparison can fail: an evaluation that forwards in train mode.
(No shipped workload has dropout, so none draws from the random stream while training.)

The samples: checked against the arithmetic of the parts (whole steps x the global batch at
each evaluation point; a fedavg round is every client's pass over its shard), and through
the real CLI.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from parabench.case.execute import execute
from parabench.config import RunConfig
from parabench.core.pool import WorkerPool
from parabench.method import EpochStats
from parabench.registry import methods, workloads

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.cpu, pytest.mark.torch]

PARTS = 8
EPOCHS = 2


def _config(workload: str, method: str, workers: int, **changes: Any) -> RunConfig:
    return RunConfig(workload=workload, method=method, workers=workers, threads_per_worker=1,
                     profile="tiny", epochs=EPOCHS, **changes)


def _serial(workload: str, parts: int, between: Callable[[Any], Any] | None = None,
            epochs: int = EPOCHS) -> tuple[dict[str, Any], list[float], dict[str, Any] | None]:
    """Serial's weights, epoch losses and trace after ``epochs`` epochs trained in ``parts``."""
    config = _config(workload, "serial", 1).replace(epochs=epochs)
    with methods.get("serial").session(workloads.get(workload), config) as session:
        session.start()
        n = session.epoch_parts(parts)
        assert n == min(parts, -(-session.samples_per_epoch // session.batch_size))
        losses = []
        for epoch in range(epochs):
            if n == 1:
                losses.append(session.train_epoch(epoch).loss)
                continue
            done = []
            for part in range(n):
                done.append(session.train_part(epoch, part, n))
                if between is not None:
                    between(session)
            losses.append(EpochStats.join(done).loss)
        state = {k: v.detach().clone() for k, v in session.loop.model.state_dict().items()}
        return state, losses, session.trace


def assert_identical(a: dict[str, Any], b: dict[str, Any]) -> None:
    assert a.keys() == b.keys()
    for name, value in a.items():
        assert torch.equal(value, b[name]), f"{name} differs"


@pytest.mark.slow
def test_serial_evaluated_between_parts_trains_exactly_the_whole_epochs() -> None:
    whole, whole_losses, whole_trace = _serial("cnn", 1)
    parted, parted_losses, parted_trace = _serial("cnn", PARTS, lambda s: s.evaluate())
    assert_identical(parted, whole)
    assert parted_losses == pytest.approx(whole_losses, rel=1e-6)  # summed in another order
    # the trace spans the parts of the first epoch: the same steps' losses, the same digest
    assert whole_trace is not None and parted_trace is not None
    assert parted_trace["losses"] == whole_trace["losses"]
    assert parted_trace["digest"] == whole_trace["digest"]
    assert parted_trace["steps"] == whole_trace["steps"] == 15  # cnn tiny: all 15 steps


@pytest.mark.slow
def test_batchnorm_statistics_are_left_alone_and_the_comparison_would_see_them() -> None:
    """vgg11 (BatchNorm) for one epoch: evaluated between parts, identical; the control, an
    evaluation forwarding in train mode, moves the running statistics and is caught."""
    whole, whole_losses, whole_trace = _serial("vgg11", 1, epochs=1)
    parted, parted_losses, parted_trace = _serial("vgg11", PARTS, lambda s: s.evaluate(),
                                                  epochs=1)
    assert_identical(parted, whole)
    assert whole_trace is not None and parted_trace is not None
    assert parted_trace["digest"] == whole_trace["digest"]  # 20 steps over 4 parts of 6
    assert parted_trace["losses"] == whole_trace["losses"]
    assert parted_trace["steps"] == whole_trace["steps"] == len(whole_trace["losses"]) == 20

    def train_mode_forward(session: Any) -> None:
        with torch.no_grad():
            session.loop.model(session.x_test[:16])

    touched, _, _ = _serial("vgg11", PARTS, train_mode_forward, epochs=1)
    moved = [k for k, v in whole.items() if not torch.equal(v, touched[k])]
    assert moved and all("running" in k or "num_batches" in k for k in moved[:3])


def _pool_weights(program: str, workload: str, workers: int, parts: int | None,
                  extra: dict[str, Any] | None = None, **changes: Any
                  ) -> tuple[dict[str, Any], list[list[EpochStats]]]:
    """Rank 0's weights after EPOCHS epochs of ``program``: whole epochs (``parts`` None) or
    in its parts with a held-out evaluation after each (``extra``: more program arguments)."""
    config = _config(workload, program.rsplit(":")[0].rsplit(".")[-1], workers, **changes)
    args = {"workload": workload, "config": config.to_dict(), **(extra or {})}
    calls = []
    with WorkerPool(workers, program, args, threads=1, timeout_s=300) as pool:
        for epoch in range(EPOCHS):
            if parts is None:
                calls.append(pool.call("train_epoch", epoch=epoch))
                continue
            n = pool.call("epoch_parts", wanted=parts)[0]
            assert n > 1
            for part in range(n):
                calls.append(pool.call("train_part", epoch=epoch, part=part, parts=n))
                assert pool.call("evaluate")[0] is not None
        state = pool.call("state_dict")
        return {k: v for piece in state if piece for k, v in piece.items()}, calls


DDP = "parabench.methods.ddp:DDPProgram"


@pytest.mark.slow
@pytest.mark.parametrize(("program", "workload"),
                         [(DDP, "cnn"), ("parabench.methods.fsdp:FSDPProgram", "mlp")],
                         ids=["ddp-cnn", "fsdp-mlp"])
def test_data_parallel_on_gloo_evaluated_between_parts_trains_exactly_the_whole_epochs(
    program: str, workload: str,
) -> None:
    whole, _ = _pool_weights(program, workload, 2, None)
    parted, calls = _pool_weights(program, workload, 2, PARTS)
    assert_identical(parted, whole)
    assert len(calls) == EPOCHS * PARTS


@pytest.mark.slow
def test_ddp_parts_keep_the_share_weighted_last_step() -> None:
    """3 ranks, global batch 48 over mlp's 2048 samples: the last step splits 11/11/10 and is
    weighted back to serial; it must be weighted by its index in the epoch, not the part's."""
    whole, _ = _pool_weights(DDP, "mlp", 3, None, batch_size=48)
    parted, _ = _pool_weights(DDP, "mlp", 3, PARTS, batch_size=48)
    assert_identical(parted, whole)


@pytest.mark.slow
def test_the_pipeline_evaluated_between_parts_trains_exactly_the_whole_epochs() -> None:
    """2 stages; batch 48 over mlp's 2048 samples: the last global step of 32 runs on its own
    schedule, in the last part."""
    program, stages = "parabench.torch.pipeline:PipelineProgram", {"stages": 2}
    whole, _ = _pool_weights(program, "mlp", 2, None, stages, batch_size=48)
    parted, calls = _pool_weights(program, "mlp", 2, PARTS, stages, batch_size=48)
    assert len(whole) == 6  # both stages' tensors
    assert_identical(parted, whole)
    assert len(calls) == EPOCHS * PARTS


@pytest.mark.slow
def test_fedavg_evaluated_after_every_round_trains_exactly_the_whole_epochs() -> None:
    program = "parabench.torch.fedavg:FedAvgProgram"
    whole, _ = _pool_weights(program, "mlp", 2, None)
    parted, calls = _pool_weights(program, "mlp", 2, PARTS)  # 2 clients: 2 rounds an epoch
    assert_identical(parted, whole)
    assert len(calls) == EPOCHS * 2


def _first_reaching(ttt: Any, target: float) -> int:
    return next(i for i, q in enumerate(ttt.eval_quality) if q is not None and q >= target)


@pytest.mark.slow
@pytest.mark.parametrize(("method", "workers", "per_eval", "evals"),
                         [("serial", 1, 4 * 64, PARTS),      # 32 steps of 64: 4 steps a part
                          ("ddp", 2, 4 * 64, PARTS),         # the same global steps
                          ("pipeline", 2, 4 * 64, PARTS),
                          ("fedavg", 2, 2048, 2)])           # a round: both clients' shards
def test_samples_to_target_is_the_samples_trained_up_to_the_evaluation(
    method: str, workers: int, per_eval: int, evals: int,
) -> None:
    target = 0.5  # mlp tiny: reached in the first epoch or two (chance is 0.1)
    config = _config("mlp", method, workers, target_quality=target, steps=0).replace(epochs=4)
    result = execute(config)
    ttt = result.time_to_target
    assert result.status == "ok", result.reason
    assert ttt is not None and ttt.reached and ttt.evals_per_epoch == evals
    assert ttt.eval_samples == [per_eval * (k + 1) for k in range(len(ttt.eval_samples))]
    first = _first_reaching(ttt, target)
    assert first == len(ttt.eval_samples) - 1  # it stopped there
    assert ttt.samples_to_target == per_eval * (first + 1)
    assert ttt.epochs_to_target == pytest.approx((first + 1) / evals)
    assert ttt.epoch == first // evals + 1 and ttt.eval_every_samples == per_eval
    assert ttt.train_s == pytest.approx(sum(result.epoch_s))  # the last epoch may be partial
    assert result.epoch_quality[-1] == ttt.eval_quality[-1] == result.quality.value
    assert f"{evals} evaluations per epoch" == ttt.resolution
    assert ttt.target_source == "--target-quality"


@pytest.mark.slow
def test_the_cli_records_samples_to_target(tmp_path: Path) -> None:
    out = tmp_path / "r.jsonl"
    proc = subprocess.run(
        [sys.executable, "-m", "parabench", "run", "--workload", "mlp", "--method", "serial",
         "--profile", "tiny", "--target-quality", "0.5", "--max-epochs", "3", "--steps", "0",
         "--out", str(out)],
        capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(out.read_text().splitlines()[-1])
    ttt = result["time_to_target"]
    qualities = ttt["eval_quality"]
    first = next(i for i, q in enumerate(qualities) if q >= 0.5)
    assert ttt["reached"] and len(qualities) == first + 1
    assert ttt["samples_to_target"] == ttt["eval_samples"][first] == 256 * (first + 1)
    assert ttt["evals_per_epoch"] == 8 and ttt["target_source"] == "--target-quality"


@pytest.mark.slow
def test_parity_compares_only_the_training_both_did_when_they_stop_apart() -> None:
    """Serial stops between parts of an epoch; a ddp run that stops later (a higher target:
    the same as a method that crosses it a part later) trained more of its last epoch, whose
    loss is then not compared with serial's partial one; a pipeline that stops where serial
    does is compared on everything, final weights included. (Parity matches the baseline by
    workload, profile, seed, epochs and batch: the target is not part of it.)"""
    from parabench.analysis.parity import assess, comparable_epochs, trained_epochs

    runs = {m: execute(_config("mlp", m, w, target_quality=t, steps=0).replace(epochs=3))
            # serial crosses 0.6 at 24 steps, past the trace's 20 (so its final weights are
            # compared), within the first epoch
            for m, w, t in (("serial", 1, 0.6), ("pipeline", 2, 0.6), ("ddp", 2, 0.7))}
    serial, later = runs["serial"], runs["ddp"]
    assert all(r.status == "ok" for r in runs.values()), {m: r.reason for m, r in runs.items()}
    assert trained_epochs(serial) % 1 != 0  # stopped mid-epoch (mlp tiny: within the first)
    assert trained_epochs(later) > trained_epochs(serial)
    assert comparable_epochs(later, serial) == int(trained_epochs(serial))
    assert comparable_epochs(runs["pipeline"], serial) == len(serial.loss)
    for method in ("pipeline", "ddp"):
        parity = assess(runs[method], [serial])
        assert parity is not None and parity.status == "ok", (method, parity)
    assert assess(runs["pipeline"], [serial]).final_weight_rel_l2 is not None  # compared


class _Meter:
    """Records what the part loop asks of an energy meter."""

    def __init__(self) -> None:
        self.reads, self.added, self.cut_short = 0, [], False

    def read(self) -> int:
        self.reads += 1
        return self.reads

    def add_epoch(self, before: int, after: int, part: int = 0) -> None:
        self.added.append((before, after, part))


def test_the_part_loop_reads_energy_around_parts_and_says_when_it_cut_an_epoch() -> None:
    from parabench.case.parts import train_epoch

    config = _config("mlp", "serial", 1)
    with methods.get("serial").session(workloads.get("mlp"), config) as session:
        session.start()
        meter = _Meter()
        seen: list[tuple[int, int, int]] = []
        stats = train_epoch(session, 0, meter, lambda s, e, p, n: seen.append((e, p, n)) or False)
        assert seen == [(0, p, PARTS) for p in range(PARTS)] and not meter.cut_short
        assert [a[2] for a in meter.added] == list(range(PARTS))  # read around each part
        assert stats.samples == session.samples_per_epoch == stats.served
        cut = train_epoch(session, 1, meter, lambda s, e, p, n: p == 2)  # stop after 3 parts
        assert meter.cut_short and cut.samples == 3 * session.samples_per_epoch // PARTS
