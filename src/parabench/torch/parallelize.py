"""Parallelizers applied from outside the model (as torchtitan's ``parallelize.py``).

Usage::

    model = workload.build_model(data, seed)      # the workload's own module
    ddp, comm = apply_ddp(model, device)          # DDP with a timed all-reduce hook (needs a
    comm.reset()                                  # process group); before an epoch, and after:
    comm.seconds()                                # communication seconds of that epoch
    sharded = apply_fsdp(workload.build_model(data, seed))   # FSDP2: a unit per owning child
    sharded = apply_fsdp(workload.build_model(data, seed), mesh["dp"])  # over a mesh dimension
    global_batchnorm(model)                       # BatchNorm with the global batch's statistics
    plan = cut_stages(workload, model, x, 2)      # FLOP-balanced stages (see torch.stages)
    staged = place_stages(plan.modules, ["cpu", "cpu"])   # ["cuda:0", "cuda:1"]: model parallel

The model is the workload's own ``nn.Module``; nothing here changes its mathematics. DDP's
hook is the default all-reduce (divide by world size, all-reduce) with its in-flight interval
recorded: ``communication`` is the wall time during which **at least one** gradient-bucket
all-reduce was in flight (the union over a step's buckets, so concurrent buckets are not
double counted), from the hook launching it to its future completing. DDP launches a bucket as
soon as its gradients are ready, so most of it **overlaps backward**: the exposed part is at
most this and lies inside ``backward``. On CPU the interval ends are host clock reads (a
:class:`parabench.core.clock.Stopwatch`; the end is read in the future's callback, on gloo's
thread); on CUDA they are CUDA events on the stream, read after the epoch's final synchronise.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from parabench.core.clock import Stopwatch
from parabench.torch.stages import cut as cut_stages

if TYPE_CHECKING:
    import torch

__all__ = ["CommTimer", "apply_ddp", "apply_fsdp", "cut_stages", "global_batchnorm",
           "place_stages",
           "shard_units", "union_length", "TargetsToOutput"]


class CommTimer:
    """State of the timing hook: the in-flight intervals of one epoch's all-reduces."""

    def __init__(self, cuda: bool) -> None:
        self.cuda = cuda
        self.spans: list[tuple[Any, Any]] = []
        self._ref: Any = None
        self._watch = Stopwatch()  # CPU: interval ends are its seconds

    def reset(self) -> None:
        self.spans = []
        if self.cuda:
            import torch

            self._ref = torch.cuda.Event(enable_timing=True)
            self._ref.record()

    def mark(self) -> Any:
        if not self.cuda:
            return self._watch.seconds()
        import torch

        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def seconds(self) -> float:
        """Length of the union of the recorded intervals (call after the device sync)."""
        if self.cuda:
            spans = [(self._ref.elapsed_time(a) / 1e3, self._ref.elapsed_time(b) / 1e3)
                     for a, b in self.spans]
        else:
            spans = list(self.spans)
        return union_length(spans)


def union_length(spans: list[tuple[float, float]]) -> float:
    total, end = 0.0, float("-inf")
    for a, b in sorted(spans):
        if b <= end:
            continue
        total += b - max(a, end)
        end = b
    return total


# No annotations on ``bucket`` / the return: DDP checks them against the real classes, and
# postponed (string) annotations would fail that check.
def timed_allreduce_hook(state: CommTimer, bucket):  # noqa: ANN001, ANN201
    """DDP's default all-reduce (divide by world, all-reduce), with its interval recorded."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    start = state.mark()
    fut = default_hooks.allreduce_hook(None, bucket)

    def done(f: torch.futures.Future[torch.Tensor]) -> torch.Tensor:
        state.spans.append((start, state.mark()))
        return f.value()

    return fut.then(done)


def apply_ddp(model: torch.nn.Module, device: torch.device,
              **options: Any) -> tuple[torch.nn.Module, CommTimer]:
    """``DistributedDataParallel(model, **options)`` and the timer of its all-reduces."""
    from torch.nn.parallel import DistributedDataParallel

    cuda = device.type == "cuda"
    ddp = DistributedDataParallel(model, device_ids=[device.index] if cuda else None, **options)
    comm = CommTimer(cuda)
    ddp.register_comm_hook(comm, timed_allreduce_hook)
    return ddp, comm


def shard_units(model: torch.nn.Module) -> list[torch.nn.Module]:
    """Top-level children that own parameters: the FSDP units below the root."""
    return [m for m in model.children() if any(True for _ in m.parameters())]


def apply_fsdp(model: torch.nn.Module, mesh: Any = None) -> torch.nn.Module:
    """FSDP2: each parameter-owning top-level child its own unit, the root takes the rest;
    sharded over ``mesh`` (a 1-D DeviceMesh: FSDP x TP's data dimension; None: the world)."""
    from torch.distributed.fsdp import fully_shard

    for unit in shard_units(model):
        fully_shard(unit, mesh=mesh)
    return fully_shard(model, mesh=mesh)


def place_stages(parts: list[Any], devices: list[str]) -> torch.nn.Module:
    """The stages as one module whose forward carries the activation across devices."""
    import torch
    from torch import nn

    class Staged(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.stages = nn.ModuleList(parts)
            self.devices = [torch.device(d) for d in devices]
            for stage, device in zip(self.stages, self.devices, strict=True):
                stage.to(device)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            for stage, device in zip(self.stages, self.devices, strict=True):
                x = stage(x.to(device, non_blocking=True))  # a no-op on the same device
            return x

    return Staged()


class TargetsToOutput:
    """The workload's loss with the targets moved to the output's (the last stage's) device."""

    def __init__(self, loss_fn: Callable[[Any, Any], Any]) -> None:
        self.loss_fn = loss_fn

    def __call__(self, out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return self.loss_fn(out, target.to(out.device, non_blocking=True))


def global_batchnorm(model: torch.nn.Module) -> int:
    """Make every BatchNorm of ``model`` normalise with the whole global batch's statistics.

    What ``SyncBatchNorm`` does, which torch refuses on CPU: in training, each BatchNorm's
    per-channel sums of x and x^2 and the count are all-reduced over the world in one tensor
    (float64, see below) through the differentiable ``torch.distributed.nn`` all-reduce, so the
    backward also carries every rank's share.
    Running statistics are updated with the global figures, as serial's are. The module keeps
    its class and state_dict names (only ``forward`` is replaced). Returns how many changed.
    """
    import types

    from torch.nn.modules.batchnorm import _BatchNorm

    changed = 0
    for module in model.modules():
        if isinstance(module, _BatchNorm):
            module.forward = types.MethodType(_global_bn_forward, module)
            changed += 1
    return changed


def _global_bn_forward(self: Any, x: torch.Tensor) -> torch.Tensor:
    import torch
    from torch.distributed.nn.functional import all_reduce

    if not self.training:
        return type(self).forward(self, x)
    dims = [0, *range(2, x.dim())]
    shape = [1, x.size(1)] + [1] * (x.dim() - 2)
    c = x.size(1)
    # one all-reduce of (sum x, sum x^2, count) per layer (its backward: one more). A gloo
    # all-reduce takes ~1.4 ms here whatever its size, and densenet121 has 121 BatchNorms per
    # step, so two-pass statistics (3 + 2 collectives) made its ddp epoch 4.7x serial's.
    # Sums in float64, as torch's CPU kernel accumulates: E[x^2] - E[x]^2 keeps float32's
    # digits unless |mean| / std passes ~1e4.
    local = torch.cat([x.sum(dims, dtype=torch.float64), (x * x).sum(dims, dtype=torch.float64),
                       x.new_tensor([x.numel() // c], dtype=torch.float64)])
    total = all_reduce(local)
    count = total[2 * c]
    mean64 = total[:c] / count
    var64 = (total[c:2 * c] / count - mean64 * mean64).clamp_min(0)
    mean, var = mean64.to(x.dtype), var64.to(x.dtype)
    y = (x - mean.view(shape)) * torch.rsqrt(var.view(shape) + self.eps)
    if self.affine:
        y = y * self.weight.view(shape) + self.bias.view(shape)
    if self.track_running_stats:
        with torch.no_grad():
            self.num_batches_tracked.add_(1)
            factor = (1.0 / float(self.num_batches_tracked) if self.momentum is None
                      else self.momentum)
            self.running_mean.mul_(1 - factor).add_(mean.detach() * factor)
            unbiased = var.detach() * count / (count - 1)
            self.running_var.mul_(1 - factor).add_(unbiased * factor)
    return y
