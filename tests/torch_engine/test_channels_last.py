"""--channels-last (the convolutional workloads' memory-format option): a grid axis, applied to
the model and the stored images so every batch is NHWC, the same trajectory as NCHW, and
refused with the reason by the methods whose torch machinery cannot take it."""

from __future__ import annotations

from typing import Any

import pytest

from parabench.cli import build_parser, option_axes
from parabench.config import RunConfig
from parabench.registry import methods, workloads

pytestmark = [pytest.mark.torch, pytest.mark.cpu]


def _cnn(method: str = "serial", workers: int = 1, **options: Any) -> RunConfig:
    return RunConfig(workload="cnn", method=method, workers=workers, threads_per_worker=1,
                     profile="tiny", epochs=1, options=options, windows=2)


def test_flag_parses_as_a_grid_axis() -> None:
    args = build_parser().parse_args(["run", "--channels-last", "on,off"])
    assert option_axes(args)["channels_last"] == ["on", "off"]


def test_model_and_batches_are_nhwc_only_when_on() -> None:
    import torch

    from parabench.torch.build import build_case

    for value, nhwc in (("on", True), ("off", False)):  # vgg11: 3-channel images
        config = RunConfig(workload="vgg11", method="serial", profile="tiny", epochs=1,
                           threads_per_worker=1, options={"channels_last": value})
        case = build_case(workloads.get("vgg11"), config, torch.device("cpu"))
        # one input channel is NCHW and NHWC at once: only wider convolutions tell
        convs = [m.weight for m in case.model.modules()
                 if isinstance(m, torch.nn.Conv2d) and m.in_channels > 1]
        assert convs and all(w.is_contiguous(memory_format=torch.channels_last) == nhwc
                             for w in convs)
        batch = case.data.x[torch.tensor([5, 0, 3])]  # how TorchLoop slices a batch
        assert batch.is_contiguous(memory_format=torch.channels_last) == nhwc
        assert (case.notes.get("memory_format") == "channels_last") == nhwc


def test_nhwc_trains_the_same_trajectory_as_nchw() -> None:
    from parabench.case.execute import execute

    on, off = (execute(_cnn(channels_last=v)) for v in ("on", "off"))
    assert on.status == off.status == "ok", (on.reason, off.reason)
    assert on.trace is not None and off.trace is not None
    first_on, first_off = on.trace.losses, off.trace.losses
    assert len(first_on) == len(first_off) > 0
    # other kernels, the same mathematics: float rounding only
    assert max(abs(a - b) for a, b in zip(first_on, first_off, strict=True)) < 1e-4
    assert on.quality and off.quality
    assert abs(on.quality.value - off.quality.value) < 0.02


@pytest.mark.parametrize("method", ["fsdp", "pipeline", "hybrid"])
def test_methods_that_cannot_take_it_say_why(method: str) -> None:
    config = _cnn(method, workers=2, channels_last="on")
    reason = methods.get(method).check(workloads.get("cnn"), config)
    assert reason is not None and "channels_last" in reason
    assert methods.get(method).check(workloads.get("cnn"), _cnn(method, workers=2)) != reason


@pytest.mark.parametrize("method", ["serial", "ddp", "model_parallel", "fedavg"])
def test_the_others_accept_it(method: str) -> None:
    config = _cnn(method, workers=2 if method in ("ddp", "fedavg") else 1, channels_last="on")
    assert methods.get(method).check(workloads.get("cnn"), config) is None
