"""The trace exact parity reads (first steps' losses + a weight digest), checked without the CLI.

Serial at 1 and 2 threads records traces that agree; a gradient off by 1e-3 does not; the
digest names and figures come from the unwrapped model, so a DDP wrapper changes nothing;
the ranks' pieces merge into the global batch's losses. Run-level checks (the CLI flags the
planted bugs) are in ``tests/methods/test_planted_bugs_torch.py``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from parabench.analysis.trajectory import LOSS_RTOL, TRACE_STEPS, WEIGHT_RTOL, compare_traces
from parabench.case.execute import execute
from parabench.config import RunConfig

torch = pytest.importorskip("torch")

from parabench.torch.loop import TorchLoop, weight_digest  # noqa: E402
from parabench.torch.session import merge_trace  # noqa: E402

pytestmark = [pytest.mark.cpu, pytest.mark.torch]


def _trace(threads: int = 1) -> dict[str, Any]:
    config = RunConfig(workload="mlp", method="serial", threads_per_worker=threads,
                       profile="tiny", epochs=1)
    result = execute(config)
    assert result.status == "ok", result.reason
    assert result.trace is not None, "serial recorded no trace"
    return result.trace.to_dict()  # the documented shape (parabench.analysis.trajectory)


@pytest.fixture(scope="module")
def serial_trace() -> dict[str, Any]:
    return _trace()


def test_serial_trace_has_the_documented_shape(serial_trace: dict[str, Any]) -> None:
    assert serial_trace["steps"] == TRACE_STEPS == len(serial_trace["losses"])
    assert all(0 < loss < 10 for loss in serial_trace["losses"])
    figures = serial_trace["digest"]["0.weight"]
    assert set(figures) == {"sum", "norm", "proj", "numel"} and len(figures["proj"]) >= 8
    assert figures["norm"] > 0 and figures["numel"] > 0


def test_the_digest_says_it_covered_the_whole_model(serial_trace: dict[str, Any]) -> None:
    """mlp: three Linear layers, a weight and a bias each, counted from the module."""
    assert serial_trace["model"]["tensors"] == 6 == len(serial_trace["digest"])
    assert serial_trace["covered"] == serial_trace["model"]
    assert serial_trace["final_covered"] == serial_trace["model"]  # the evaluated weights
    assert serial_trace["model"]["elements"] == sum(
        f["numel"] for f in serial_trace["digest"].values())


def test_a_digest_that_leaves_the_biases_out_is_refused(serial_trace: dict[str, Any],
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 28: a digest that covers less on both sides agrees with itself; its coverage,
    checked against the model's parameters and buffers, does not."""
    from parabench.torch import loop

    original = loop.weight_digest
    monkeypatch.setattr(loop, "weight_digest", lambda state: original(
        {k: v for k, v in state.items() if not k.endswith("bias")}))
    short = _trace()
    assert short["covered"]["tensors"] == 3 and short["model"]["tensors"] == 6
    for mine, ref in ((short, short), (short, serial_trace), (serial_trace, short)):
        verdict = compare_traces(mine, ref)
        assert not verdict["ok"] and verdict["differs"] == "digest coverage", verdict
        assert "covers 3 tensors" in verdict["reason"], verdict


def test_digests_of_different_coverage_are_not_compared(serial_trace: dict[str, Any]) -> None:
    """Two complete digests of different models (or a result recorded before digests said
    what they covered, which is compared as before)."""
    seven = {"tensors": 7, "elements": 6600}
    bigger = {**serial_trace, "covered": seven, "final_covered": seven, "model": seven}
    verdict = compare_traces(bigger, serial_trace)
    assert not verdict["ok"] and "different coverage" in verdict["reason"], verdict
    old = {k: serial_trace[k] for k in ("steps", "losses", "digest")}
    assert compare_traces(old, serial_trace)["ok"]


def test_serial_at_two_threads_matches_serial(serial_trace: dict[str, Any]) -> None:
    verdict = compare_traces(_trace(threads=2), serial_trace)
    assert verdict["ok"], verdict
    assert verdict["loss_rel_max"] < LOSS_RTOL / 10
    assert verdict["weight_rel_l2"] < WEIGHT_RTOL / 10


def test_a_gradient_off_by_one_in_a_thousand_fails(serial_trace: dict[str, Any],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    original = TorchLoop._forward

    def forward(loop: TorchLoop, xb: torch.Tensor, yb: torch.Tensor) -> torch.Tensor:
        loss = original(loop, xb, yb)
        return loss * 1.001 - (loss * 0.001).detach()  # serial's loss value, gradient x 1.001

    monkeypatch.setattr(TorchLoop, "_forward", forward)
    verdict = compare_traces(_trace(), serial_trace)
    assert not verdict["ok"], verdict
    assert verdict["loss_rel_max"] > LOSS_RTOL  # mlp: 2.4e-4 (weights 8.9e-4)


@pytest.fixture
def world_of_one() -> Iterator[None]:
    import torch.distributed as dist

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


def test_digest_ignores_the_wrapper(world_of_one: None) -> None:
    """DDP's state_dict says ``module.<name>``; the digest says serial's ``<name>``."""
    from parabench.core.rank import RankContext
    from parabench.methods.ddp import DDPProgram
    from parabench.methods.serial import Serial
    from parabench.registry import workloads

    config = RunConfig(workload="mlp", method="ddp", workers=1, profile="tiny", epochs=1)
    ctx = RankContext(rank=0, world_size=1, local_rank=0, device="cpu", backend="gloo",
                      threads=1)
    program = DDPProgram(ctx, workload="mlp", config=config.to_dict())
    assert all(k.startswith("module.") for k in program.model.state_dict())
    serial = Serial().session(workloads.get("mlp"), RunConfig(
        workload="mlp", method="serial", profile="tiny", epochs=1))
    serial.start()
    expected = weight_digest(serial.case.model.state_dict())  # the same seeded init
    assert program.digest() == expected
    plain = {k.removeprefix("module."): v for k, v in program.model.state_dict().items()}
    assert weight_digest(plain) == expected


def test_digest_moves_with_the_weights() -> None:
    w = {"layer.weight": torch.linspace(-1, 1, 300).reshape(20, 15)}
    moved = {"layer.weight": w["layer.weight"] * (1 + 1e-3)}
    a, b = weight_digest(w)["layer.weight"], weight_digest(moved)["layer.weight"]
    assert a["proj"] != b["proj"]
    ref = compare_traces({"steps": 1, "losses": [1.0], "digest": {"layer.weight": a}},
                         {"steps": 1, "losses": [1.0], "digest": {"layer.weight": b}})
    assert ref["weight_rel_l2"] == pytest.approx(1e-3, rel=0.05)


@pytest.mark.parametrize("where", ["spread", "one element"])
def test_digest_estimates_a_non_uniform_difference(where: str) -> None:
    """The sketch estimates |a - b| / |b| for any difference, not only a uniform scale."""
    gen = torch.Generator().manual_seed(0)
    w = torch.randn(50_000, generator=gen, dtype=torch.float64)
    d = torch.randn(50_000, generator=gen, dtype=torch.float64)
    if where == "one element":
        d = torch.zeros_like(w)
        d[123] = 1.0
    d *= 1e-3 * w.norm() / d.norm()
    a, b = weight_digest({"w": w + d})["w"], weight_digest({"w": w})["w"]
    assert a == weight_digest({"w": w + d})["w"]  # the same draws every time
    verdict = compare_traces({"steps": 1, "losses": [1.0], "digest": {"w": a}},
                             {"steps": 1, "losses": [1.0], "digest": {"w": b}})
    assert 0.4e-3 < verdict["weight_rel_l2"] < 2.5e-3  # 16 buckets: about +-35 %


def test_pieces_merge_to_the_global_batch_mean() -> None:
    """Two DDP shards (sizes 3 and 2 in the last step) and a stage holding no loss."""
    shard0 = {"loss_sums": [2.0 * 4, 1.0 * 3], "samples": [4, 3], "digest": {"a": {"x": 1}}}
    shard1 = {"loss_sums": [4.0 * 4, 3.0 * 2], "samples": [4, 2], "digest": None}
    stage = {"loss_sums": [], "samples": [], "digest": {"b": {"x": 2}, "a": {"x": 9}}}
    trace = merge_trace([shard0, shard1, stage])
    assert trace is not None
    assert trace["steps"] == 2
    assert trace["losses"] == pytest.approx([3.0, (3.0 + 6.0) / 5])
    assert trace["digest"] == {"a": {"x": 1}, "b": {"x": 2}}  # the first rank's copy wins
    assert merge_trace([None, stage]) is None  # no losses: nothing to compare


def test_batch_splits_that_change_the_math_are_declared_statistical() -> None:
    from parabench.registry import workloads
    from parabench.torch.data_parallel import split_batch_note

    mlp, seq2seq = workloads.get("mlp"), workloads.get("seq2seq")
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4))
    note = split_batch_note(mlp, model, 2, "each rank's shard")
    assert note["parity_kind"] == "statistical" and "BatchNorm" in note["parity_reason"]
    assert split_batch_note(mlp, model, 1, "one part") == {}
    assert split_batch_note(mlp, torch.nn.Linear(3, 4), 2, "each rank's shard") == {}
    note = split_batch_note(seq2seq, torch.nn.Linear(3, 4), 2, "each rank's shard")
    assert note["parity_kind"] == "statistical" and "tokens" in note["parity_reason"]
