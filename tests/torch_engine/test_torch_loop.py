"""The shared torch loop: DataLoader knobs, precision, components, FLOPs, auto batch size."""

from __future__ import annotations

import pytest

from parabench.case.execute import execute
from parabench.config import RunConfig
from parabench.registry import methods, workloads

pytestmark = [pytest.mark.torch, pytest.mark.cpu]


def _weights_after(options: dict, epochs: int = 2) -> list:
    config = RunConfig(workload="mlp", method="serial", profile="tiny", epochs=epochs,
                       threads_per_worker=1, options=options)
    session = methods.get("serial").session(workloads.get("mlp"), config)
    session.start()
    try:
        stats = [session.train_epoch(e) for e in range(epochs)]
        return [p.detach().clone() for p in session.loop.model.parameters()], stats
    finally:
        session.close()


def test_dataloader_path_trains_exactly_like_in_loop_slicing() -> None:
    import torch

    direct, _ = _weights_after({})
    loaded, stats = _weights_after({"num_workers": 1, "pin_memory": False})
    for a, b in zip(direct, loaded, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert stats[-1].samples == 2048


def test_components_cover_the_epoch_without_exceeding_it() -> None:
    _, stats = _weights_after({})
    for s in stats:
        assert set(s.components) == {"data", "forward", "backward", "optimizer", "other"}
        named = {k: v for k, v in s.components.items() if k != "other"}
        assert all(v > 0 for v in named.values())
        assert 0.5 * s.seconds < sum(named.values()) <= s.seconds
        # "other" (order generation, bookkeeping) completes the partition
        assert sum(s.components.values()) == pytest.approx(s.seconds)


def test_bf16_autocast_on_cpu_trains_and_differs_from_fp32() -> None:
    import torch

    fp32, _ = _weights_after({}, epochs=1)
    bf16, stats = _weights_after({"precision": "bf16"}, epochs=1)
    assert stats[0].loss == stats[0].loss  # not NaN
    assert any(not torch.equal(a, b) for a, b in zip(fp32, bf16, strict=True))


def test_fp16_on_cpu_is_skipped_with_what_to_use_instead() -> None:
    r = execute(RunConfig(workload="mlp", method="serial", profile="tiny",
                          options={"precision": "fp16"}))
    assert r.status == "skipped" and "use --precision bf16 on CPU" in r.reason


def test_torch_only_options_are_refused_for_estimators() -> None:
    r = execute(RunConfig(workload="random_forest", method="serial", profile="tiny",
                          options={"num_workers": 2}))
    assert r.status == "skipped" and "num_workers apply to torch workloads" in r.reason


@pytest.mark.slow
def test_result_records_flops_components_and_options() -> None:
    r = execute(RunConfig(workload="mlp", method="serial", profile="tiny", epochs=2,
                          options={"precision": "bf16", "num_workers": 1}))
    assert r.status == "ok", r.reason
    # mlp tiny: 32 -> 256 -> 256 -> 4; forward 2*(32*256 + 256*256 + 256*4) per sample,
    # backward 2x
    forward = 2 * (32 * 256 + 256 * 256 + 256 * 4)
    assert r.flops_per_sample == pytest.approx(3 * forward, rel=0.35)
    assert set(r.components) == {"data", "forward", "backward", "optimizer", "other"}
    assert all(len(v) == 2 for v in r.components.values())
    assert r.config["options"] == {"num_workers": 1, "precision": "bf16"}


def test_flop_counting_leaves_training_unchanged() -> None:
    import torch

    from parabench.torch.build import flops_per_sample

    wl = workloads.get("mlp")
    data = wl.make_data("tiny", 0)
    x, y, _, _ = wl.tensors(data)
    model = wl.build_model(data, 0)
    before = [p.detach().clone() for p in model.parameters()]
    assert flops_per_sample(model, wl.loss_fn(), x, y) > 0
    assert all(p.grad is None for p in model.parameters())
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))


def test_cpu_allocator_failure_is_recorded_as_oom_with_advice() -> None:
    import torch

    from parabench.case.execute import is_oom

    with pytest.raises(RuntimeError) as info:
        torch.empty(2**50)  # 4 PiB: malloc fails, torch raises a plain RuntimeError
    assert is_oom(info.value)
    assert not is_oom(RuntimeError("shape mismatch"))
