"""``model_parallel``: the model cut layer-wise into k stages on k devices, in one process.

Usage::

    parabench run --workload cnn --method model_parallel --stages 2 --device cuda  # cuda:0, :1
    parabench run --workload cnn --method model_parallel --stages 2                # CPU: see below

Seed 002's layer-wise model parallelism (2.2.4): the workload's ``sequential()`` view is cut
into ``stages`` contiguous slices (option ``stages``, default 2) balanced by forward + backward
FLOPs (:mod:`parabench.torch.stages`), slice ``i`` lives on ``cuda:i``, and the forward
moves each activation to the next slice's device; autograd moves the gradients back. Only
one device works at a time: this is the memory split, not a speed-up (``pipeline`` overlaps
the stages with micro-batches).

On CPU every stage sits on the one CPU device and the code path is the same (the moves are
no-ops); the result says so in ``devices`` and ``model_parallel_note``. Workloads without a
sequential view (``seq2seq``) are skipped with the reason.

Parity is exact: the same modules compute the same batch in the same order as ``serial``
(same global batch, same seeded sample order, one optimizer over the same parameters).

Training is the shared :class:`~parabench.torch.loop.TorchLoop` over the staged module, so
precision, the DataLoader knobs and ``--batch-size auto`` behave as in ``serial``. Batches
live on the first stage's device; the loss moves the targets to the last stage's device.

Components: ``data``, ``forward``, ``backward``, ``optimizer`` from TorchLoop (on CUDA, events
on the first stage's device: a stage waiting on another's work is counted where it waits).
Activation and gradient copies between devices are inside ``forward`` and ``backward``; they
are not reported separately (on CPU there are none). The epoch time is the host clock around
the loop, read after synchronising **every** stage's device, not only the first.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar

from parabench import hardware
from parabench.config import RunConfig
from parabench.method import TORCH_OPTIONS, EpochStats, Method, Session
from parabench.registry import methods
from parabench.workload import TorchWorkload, Workload

if TYPE_CHECKING:
    import torch

DEFAULT_STAGES = 2


def stage_devices(config: RunConfig) -> list[str]:
    stages = config.option("stages", DEFAULT_STAGES)
    if config.device == "cuda":
        return [f"cuda:{i}" for i in range(stages)]
    return ["cpu"] * stages


def staged_module(parts: list[Any], devices: list[str]) -> torch.nn.Module:
    """The stages as one module whose forward carries the activation across devices."""
    from torch import nn

    class Staged(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.stages = nn.ModuleList(parts)
            self.devices = [torch_device(d) for d in devices]
            for stage, device in zip(self.stages, self.devices, strict=True):
                stage.to(device)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            for stage, device in zip(self.stages, self.devices, strict=True):
                x = stage(x.to(device, non_blocking=True))  # a no-op on the same device
            return x

    return Staged()


def torch_device(name: str) -> torch.device:
    import torch

    return torch.device(name)


class TargetsToOutput:
    """The workload's loss with the targets moved to the output's (the last stage's) device."""

    def __init__(self, loss_fn: Callable[[Any, Any], Any]) -> None:
        self.loss_fn = loss_fn

    def __call__(self, out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return self.loss_fn(out, target.to(out.device, non_blocking=True))


class ModelParallelSession(Session):
    workload: TorchWorkload

    def start(self) -> None:
        import torch

        from parabench.torch.build import (
            flops_per_sample,
            load_tensors,
            make_loop,
            resolve_batch_size,
        )
        from parabench.torch.stages import cut

        torch.set_num_threads(self.threads_per_worker)
        names = stage_devices(self.config)
        self.devices = [torch.device(d) for d in dict.fromkeys(names)]
        t = load_tensors(self.workload, self.config, self.devices[0])
        self.samples_per_epoch = self.workload.samples_per_epoch(t.data)
        self.x_test, self.y_test = t.x_test, t.y_test
        torch.manual_seed(self.config.seed)
        self.model = model = self.workload.build_model(t.data, self.config.seed)
        loss_fn = self.workload.loss_fn()
        self.flops_per_sample = flops_per_sample(model, loss_fn, t.x, t.y)
        plan = cut(self.workload, model, t.x, len(names))
        staged = staged_module(plan.modules, names)
        self.batch_size = resolve_batch_size(self.workload, self.config, staged, t,
                                             self.devices[0], self.notes)
        for device in self.devices:
            if device.type == "cuda":
                torch.cuda.reset_peak_memory_stats(device)
        self.loop = make_loop(self.workload, self.config, staged, t, self.batch_size,
                              self.devices[0])
        self.loop.loss_fn = TargetsToOutput(self.loop.loss_fn)
        self.notes.update(plan.notes())
        self.notes["devices"] = names
        self.notes["stages"] = len(names)
        if self.config.device == "cpu":
            self.notes["model_parallel_note"] = (
                f"CPU: all {len(names)} stages run on the one CPU device (same code path; "
                f"activations do not move)")

    def _synchronize(self) -> None:
        import torch

        for device in self.devices:
            if device.type == "cuda":
                torch.cuda.synchronize(device)

    def train_epoch(self, epoch: int) -> EpochStats:
        t0 = time.perf_counter()
        stats = self.loop.train_epoch(epoch)
        self._synchronize()  # the loop synchronises the first stage's device only
        seconds = time.perf_counter() - t0
        return EpochStats(seconds=seconds, loss=stats.loss, samples=stats.samples,
                          components=stats.components)

    def evaluate(self) -> float:
        from parabench.torch.loop import predict

        outputs = predict(self.loop.model, self.x_test).to(self.y_test.device)
        self.peak_gpu_mb()  # the per-device peaks into notes while the result still reads them
        return self.workload.score(outputs, self.y_test)

    def state_dict(self) -> dict[str, Any]:
        """The workload model's weights (the stages share them) on the CPU."""
        return {k: v.detach().cpu().clone() for k, v in self.model.state_dict().items()}

    def peak_gpu_mb(self) -> float | None:
        """The largest per-device CUDA peak (all of them in ``notes``)."""
        import torch

        if self.config.device != "cuda":
            return None
        peaks = [torch.cuda.max_memory_allocated(d) / 2**20 for d in self.devices]
        self.notes["peak_gpu_mb_per_device"] = peaks
        return max(peaks)


@methods.register
class ModelParallel(Method):
    name: ClassVar[str] = "model_parallel"
    description: ClassVar[str] = (
        "layer-wise split across devices in one process (cuda:0..k-1; one device on CPU)"
    )
    devices: ClassVar[tuple[str, ...]] = ("cpu", "cuda")
    families: ClassVar[frozenset[str]] = frozenset({"torch"})
    options: ClassVar[frozenset[str]] = frozenset({*TORCH_OPTIONS, "stages"})
    max_workers: ClassVar[int | None] = 1
    parity: ClassVar[str] = "exact"

    def check(self, workload: Workload, config: RunConfig) -> str | None:
        if (reason := super().check(workload, config)) is not None:
            return reason
        from parabench.torch.stages import sequential_reason

        stages = config.option("stages", DEFAULT_STAGES)
        if config.device == "cuda" and stages > (gpus := hardware.cuda_device_count()):
            return f"model_parallel puts each of {stages} stages on its own GPU; {gpus} here"
        assert isinstance(workload, TorchWorkload)
        return sequential_reason(workload, stages)

    def session(self, workload: Workload, config: RunConfig) -> Session:
        assert isinstance(workload, TorchWorkload)
        return ModelParallelSession(workload, config)
