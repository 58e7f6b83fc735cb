"""schedule_step drives torch's pipelining schedules on either API: the micro-batches split
here (``arg_mbs``, recent torch) or the whole batch split by torch (2.11 and before).

The two branches run a real one-stage ``ScheduleGPipe`` in this process (a gloo world of one)
and must give the same losses and gradients as one whole-batch backward; the older API is
reached through a subclass whose ``step`` has 2.11's signature. On torch 2.11 the newer
branch's call failed inside the stage's forward (``unexpected keyword argument 'arg_mbs'``),
seen on the first GPU runner.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pipelining = pytest.importorskip("torch.distributed.pipelining")

from parabench.torch.stages import micro_split, schedule_step  # noqa: E402

pytestmark = pytest.mark.torch


class LegacyGPipe(pipelining.ScheduleGPipe):
    """A GPipe schedule with torch 2.11's ``step`` signature (no arg_mbs / target_mbs)."""

    def step(self, *args: Any, target: Any = None, losses: list | None = None,  # noqa: D102
             **kwargs: Any) -> Any:
        return super().step(*args, target=target, losses=losses, **kwargs)


@pytest.fixture
def world_of_one(tmp_path: Path) -> Iterator[None]:
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0,
                            world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


def _grads_after(schedule_cls: type, x: Any, y: Any, microbatches: int) -> tuple[list, list]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.ReLU(), torch.nn.Linear(5, 3))
    count, size = micro_split(len(x), microbatches)
    stage = pipelining.PipelineStage(model, 0, 1, torch.device("cpu"))
    loss = torch.nn.CrossEntropyLoss()
    schedule = schedule_cls(stage, count, loss_fn=lambda out, t: loss(out, t) * size / len(x),
                            scale_grads=False)
    losses: list = []
    schedule_step(schedule, x, y, size, losses)
    return [float(v.detach()) for v in losses], [p.grad.clone() for p in model.parameters()]


def _whole_batch_grads(x: Any, y: Any) -> list:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.ReLU(), torch.nn.Linear(5, 3))
    torch.nn.CrossEntropyLoss()(model(x), y).backward()
    return [p.grad.clone() for p in model.parameters()]


@pytest.mark.parametrize("schedule_cls", [pipelining.ScheduleGPipe, LegacyGPipe],
                         ids=["split-here", "split-by-torch"])
def test_both_step_apis_give_the_whole_batch_gradient(world_of_one: None,
                                                      schedule_cls: type) -> None:
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(12, 6, generator=g), torch.randint(0, 3, (12,), generator=g)
    losses, grads = _grads_after(schedule_cls, x, y, microbatches=4)
    assert len(losses) == 4  # four micro-batches of 3, each its own loss
    for got, want in zip(grads, _whole_batch_grads(x, y), strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


def test_the_older_api_gets_no_keyword_its_forward_would_receive() -> None:
    seen: dict[str, Any] = {}

    class Recorder:
        def step(self, *args: Any, target: Any = None, losses: list | None = None,
                 **kwargs: Any) -> None:
            seen.update(args=args, target=target, losses=losses, kwargs=kwargs)

    x, y = torch.zeros(8, 2), torch.zeros(8)
    schedule_step(Recorder(), x, y, 2, [])
    assert seen["kwargs"] == {}  # 2.11 hands unknown keywords to the stage's forward
    assert seen["args"][0] is x and seen["target"] is y
    schedule_step(Recorder(), None, None, 2, [])  # a middle stage: no data, no target
    assert seen["args"] == () and seen["target"] is None
