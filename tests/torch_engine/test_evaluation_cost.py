"""What a held-out evaluation costs: the final weights digested once, the forward in chunks."""

from __future__ import annotations

import pytest

from parabench.case.lifecycle import CaseLifecycle
from parabench.case.stopping import tracker_for
from parabench.config import RunConfig
from parabench.registry import methods, workloads

pytestmark = [pytest.mark.torch, pytest.mark.cpu]


def test_the_final_weights_are_digested_once_and_are_those_the_last_evaluation_scored(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import parabench.torch.loop as loop

    real, calls = loop.weight_digest, []
    monkeypatch.setattr(loop, "weight_digest", lambda state: calls.append(1) or real(state))
    workload = workloads.get("mlp")
    config = RunConfig(workload="mlp", method="serial", profile="tiny", epochs=2,
                       threads_per_worker=1, target_quality=2.0)  # never reached: every part
    lifecycle = CaseLifecycle(config=config, workload=workload, method=methods.get("serial"))
    tracker = tracker_for(workload, config)
    with lifecycle:
        lifecycle.train(config.epochs, tracker)
        before = len(calls)
        quality, _ = lifecycle.final_quality(tracker)
        session = lifecycle.session
        scored = real(session.case.model.state_dict())
        lifecycle.measure_windows()  # trains on: must not move the kept digest
        after = real(session.case.model.state_dict())
    assert len(tracker.eval_s) > 2  # every part of both epochs was evaluated ...
    assert len(calls) - before == 1  # ... and the final weights digested once, after them
    assert session.trace["final_digest"] == scored != after
    assert quality == tracker.last_quality


@pytest.mark.parametrize("chunk", [1, 7, 128, 4096])
def test_predict_gives_the_same_outputs_in_any_chunk(chunk: int) -> None:
    import torch

    from parabench.torch.loop import predict

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(5, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
    x = torch.randn(300, 5)
    whole = model.eval()(x).detach()
    assert torch.allclose(predict(model, x, chunk), whole, atol=1e-6)
    assert torch.allclose(predict(model, x), whole, atol=1e-6)
