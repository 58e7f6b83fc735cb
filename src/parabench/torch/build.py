"""Setting up a torch case: device, tensors, seeded model, batch size (incl. ``auto``), FLOPs.

The FLOPs per sample are the workload's formula (``model_flops_per_sample``: gpt's), else
counted once per architecture and kept in :mod:`parabench.cache`.

Usage (what every torch Session's ``start`` and every rank program does)::

    device = torch_device(config)                       # cuda:0 / cpu (cuda:rank for ranks)
    case = build_case(workload, config, device)         # tensors, seeded model on device,
    case.batch_size, case.flops_per_sample              #   the batch, the FLOPs per sample
    case.reset_peaks()                                  # GPU peak counted from here
    loop = case.loop(case.placed, case.batch_size)      # the shared TorchLoop (compiled:
                                                        #   warmed up, :mod:`.knobs`)
    peak_gpu_mb(device)                                 # the peak since reset (None on CPU)
    # on ranks: build_case(..., world=ctx.world_size, count_flops=rank == 0): ``auto`` is
    # found on each rank and the smallest wins (one MIN all-reduce)

``--batch-size auto`` finds the largest power of two that fits (:mod:`.autobatch`): on CUDA by
really running a training step at each size within a time budget and catching out-of-memory
(weights, buffers and RNG restored afterwards); on CPU against a memory budget (half the
available RAM, shared between workers) computed from the bytes autograd saves per sample.
The sizes tried are in the case's notes. Not even a batch of one fitting raises
``MemoryError``, which the runner records as ``oom``.
"""

from __future__ import annotations

import contextlib
import functools
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

from parabench.cache import cached_json
from parabench.config import RunConfig
from parabench.core.clock import Clock, wall_part
from parabench.torch.autobatch import activation_bytes_per_sample as activation_bytes_per_sample
from parabench.torch.autobatch import auto_batch
from parabench.torch.autobatch import auto_batch_size as auto_batch_size
from parabench.torch.loop import TorchLoop
from parabench.workload import Dataset, TorchWorkload

LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def torch_device(config: RunConfig, rank: int = 0) -> torch.device:
    return torch.device(f"cuda:{rank}" if config.device == "cuda" else "cpu")


def uses_loader(config: RunConfig) -> bool:
    """True when batches come from a DataLoader (``num_workers`` > 0 or ``pin_memory``)."""
    return bool(config.option("num_workers")) or bool(config.option("pin_memory"))


@dataclass(frozen=True, kw_only=True)
class TorchData:
    data: Dataset
    x: torch.Tensor
    y: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor


def channels_last(config: RunConfig) -> bool:
    """Whether the case trains in ``torch.channels_last`` (the convolutional workloads'
    ``channels_last`` option; a workload that does not declare it: never)."""
    try:
        return config.option("channels_last") == "on"
    except KeyError:
        return False


def _laid_out(t: torch.Tensor, config: RunConfig) -> torch.Tensor:
    """Images in the case's memory format: stored NHWC once, so every batch sliced from them
    (advanced indexing keeps the format) is NHWC with no copy in the timed step."""
    if t.dim() == 4 and channels_last(config):
        return t.contiguous(memory_format=torch.channels_last)
    return t


def load_tensors(workload: TorchWorkload, config: RunConfig, device: torch.device) -> TorchData:
    """The case's data as tensors; training tensors stay on the host for a DataLoader."""
    data = workload.dataset(config)
    x, y, x_test, y_test = workload.tensors(data)
    train_device = torch.device("cpu") if uses_loader(config) else device
    same = y is x  # autoencoders: targets are the inputs; keep one copy
    x = _laid_out(x.to(train_device), config)
    y = x if same else y.to(train_device)
    return TorchData(data=data, x=x, y=y, x_test=_laid_out(x_test.to(device), config),
                     y_test=y_test.to(device))


def make_loop(
    workload: TorchWorkload,
    config: RunConfig,
    model: torch.nn.Module,
    t: TorchData,
    batch_size: int,
    device: torch.device,
    optimizer: torch.optim.Optimizer | None = None,
    clock: Clock | None = None,
) -> TorchLoop:
    return TorchLoop(
        model,
        optimizer or workload.make_optimizer(model.parameters()),
        workload.loss_fn(),
        t.x,
        t.y,
        batch_size=batch_size,
        device=device,
        seed=config.training_seed,
        precision=config.option("precision"),
        num_workers=config.option("num_workers"),
        pin_memory=config.option("pin_memory"),
        clock=clock,
    )


def _probe_batch(x: torch.Tensor, y: torch.Tensor, n: int, device: torch.device) -> tuple:
    return x[:n].to(device), y[:n].to(device)


def flops_per_sample(
    model: torch.nn.Module, loss_fn: LossFn, x: torch.Tensor, y: torch.Tensor, probe: int = 4
) -> float | None:
    """Forward + backward FLOPs per sample, counted by ``torch.utils.flop_counter``.

    Counted in eval mode on a small probe batch (no dropout RNG drawn, no batch-norm
    statistics updated, no optimizer step), then gradients are cleared: training that follows
    is unchanged. cuDNN is off for the probe: its RNN kernels refuse a backward pass in eval
    mode, and the counter counts the same ops either way. Ops without a FLOP formula
    (embedding lookups, fused RNN kernels) count as zero, so for ``nbow`` / ``seq2seq`` this
    is a lower bound; None when nothing was counted.
    """
    from torch.utils.flop_counter import FlopCounterMode

    device = next(model.parameters()).device
    n = min(probe, len(x))
    xb, yb = _probe_batch(x, y, n, device)
    was_training = model.training
    model.eval()
    counter = FlopCounterMode(display=False)
    with counter, torch.backends.cudnn.flags(enabled=False):
        loss_fn(model(xb), yb).backward()
    model.zero_grad(set_to_none=True)
    model.train(was_training)
    total = counter.get_total_flops()
    return total / n if total else None


def _describe(fn: Any) -> str:
    """A stable name for a loss function (``repr`` of a function carries its address)."""
    if isinstance(fn, functools.partial):
        return f"partial({_describe(fn.func)}, {fn.args!r}, {sorted(fn.keywords.items())!r})"
    if isinstance(fn, torch.nn.Module):
        return repr(fn)
    return f"{getattr(fn, '__module__', '')}.{getattr(fn, '__qualname__', type(fn).__name__)}"


def _code_files(*objs: Any) -> set[str]:
    """The source files (outside torch, whose version is in the key) of the objects' classes
    and functions: editing a model's or loss's code changes its cache entry."""
    files = set()
    for obj in objs:
        target = obj.func if isinstance(obj, functools.partial) else obj
        module = sys.modules.get(getattr(target, "__module__", None) or type(target).__module__)
        path = getattr(module, "__file__", None)
        if path and not module.__name__.split(".")[0] == "torch":
            files.add(path)
    return files


def cached_flops_per_sample(
    model: torch.nn.Module, loss_fn: LossFn, x: torch.Tensor, y: torch.Tensor, probe: int = 4
) -> float | None:
    """:func:`flops_per_sample` through :mod:`parabench.cache`: the count depends on the
    architecture, the per-sample shapes and the code, never on weights or data, and its first
    use imports TorchDynamo (seconds of every torch case's start-up: docs/measurements.md)."""
    key = {"model": repr(model), "loss": _describe(loss_fn), "probe": min(probe, len(x)),
           "x": [list(x.shape[1:]), str(x.dtype)], "y": [list(y.shape[1:]), str(y.dtype)],
           "device": next(model.parameters()).device.type, "torch": torch.__version__}
    sources = _code_files(*model.modules(), loss_fn)
    return cached_json("flops", key, lambda: flops_per_sample(model, loss_fn, x, y, probe),
                       sources=sources)


def resolve_batch_size(
    workload: TorchWorkload,
    config: RunConfig,
    model: torch.nn.Module,
    t: TorchData,
    device: torch.device,
    notes: dict[str, Any],
) -> int:
    """The global batch size: explicit, the workload's default, or found (``auto``: the
    search of :mod:`parabench.torch.autobatch`, whose tries go into ``notes``)."""
    if config.batch_size is None:
        return workload.default_batch_size(config.profile) or 64
    if config.batch_size != "auto":
        return int(config.batch_size)
    search = auto_batch(model, workload.loss_fn(), t.x, t.y, device, workers=config.workers,
                        precision=config.option("precision"))
    notes.update(search.notes())
    return search.batch


def agreed_batch(batch: int, device: torch.device) -> int:
    """The smallest of every rank's ``batch`` (a MIN all-reduce): what fits on all of them."""
    import torch.distributed as dist

    smallest = torch.tensor([batch], device=device)
    dist.all_reduce(smallest, op=dist.ReduceOp.MIN)
    return int(smallest.item())


def peak_gpu_mb(*devices: torch.device) -> float | None:
    """The largest CUDA peak allocation (MB) over ``devices`` since the last reset; CPU: None."""
    peaks = [torch.cuda.max_memory_allocated(d) / 2**20 for d in devices if d.type == "cuda"]
    return max(peaks) if peaks else None


@dataclass(kw_only=True)
class TorchCase:
    """A built torch case: data, the seeded model, the resolved batch and the FLOPs."""

    workload: TorchWorkload
    config: RunConfig
    devices: list[torch.device]
    data: TorchData
    #: the workload's model (on the device, or on the host when built with ``on_host``)
    model: torch.nn.Module
    #: what trains: ``place(model, data)`` when a placement was given, else ``model``
    placed: torch.nn.Module
    #: explicit / the workload's default, or ``auto`` (the smallest over ranks with ``world``)
    batch_size: int
    flops_per_sample: float | None
    notes: dict[str, Any] = field(default_factory=dict)
    #: the largest CUDA allocation (bytes) per device in training / in evaluation, folded in
    #: at each switch between them (:meth:`evaluating`)
    train_peaks: dict[torch.device, int] = field(default_factory=dict)
    eval_peaks: dict[torch.device, int] = field(default_factory=dict)

    @property
    def samples_per_epoch(self) -> int:
        return self.workload.samples_per_epoch(self.data.data)

    def _cuda(self) -> list[torch.device]:
        return [d for d in self.devices if d.type == "cuda"]

    def reset_peaks(self) -> None:
        """Start counting training's GPU peak here (every device of the case): the data, the
        model, the probes before it (FLOP count, ``auto`` batch search) are not training."""
        self.train_peaks.clear()
        for device in self._cuda():
            torch.cuda.reset_peak_memory_stats(device)

    def _fold(self, into: dict[torch.device, int]) -> None:
        """The peak since the last reset into ``into``, then a fresh count from here."""
        for d in self._cuda():
            into[d] = max(into.get(d, 0), torch.cuda.max_memory_allocated(d))
            torch.cuda.reset_peak_memory_stats(d)

    @contextlib.contextmanager
    def evaluating(self) -> Iterator[None]:
        """A held-out evaluation, counted apart from training's peak (its batches of 1024
        are not what training needs: a 224 px VGG's first activations alone are gigabytes)."""
        self._fold(self.train_peaks)
        try:
            yield
        finally:
            self._fold(self.eval_peaks)

    def resident_bytes(self, device: torch.device) -> int:
        """Bytes of the case's data tensors kept on ``device`` (allocated before training and
        never freed: a DataLoader would stream them from the host instead)."""
        tensors = {id(t): t for t in (self.data.x, self.data.y, self.data.x_test,
                                      self.data.y_test)}.values()
        return sum(t.numel() * t.element_size() for t in tensors if t.device == device)

    def train_peaks_mb(self) -> list[float]:
        """What training needs on each device (MB): its CUDA peak (the steps and everything
        else outside :meth:`evaluating` since :meth:`reset_peaks`) less the data kept there."""
        return [(max(self.train_peaks.get(d, 0), torch.cuda.max_memory_allocated(d))
                 - self.resident_bytes(d)) / 2**20 for d in self._cuda()]

    def peak_gpu_mb(self) -> float | None:
        """What training needs on its largest device (MB, :meth:`train_peaks_mb`); None on
        CPU."""
        return max(self.train_peaks_mb(), default=None)

    def gpu_memory_notes(self) -> dict[str, float]:
        """What the GPU held apart from training's need, for the result's notes (MB): the
        case's data kept on the device and evaluation's peak (which includes that data)."""
        if not (cuda := self._cuda()):
            return {}
        notes = {"gpu_data_mb": round(max(map(self.resident_bytes, cuda)) / 2**20, 1)}
        if self.eval_peaks:
            notes["gpu_eval_peak_mb"] = round(max(self.eval_peaks.values()) / 2**20, 1)
        return notes

    def loop(self, model: torch.nn.Module, batch_size: int,
             optimizer: torch.optim.Optimizer | None = None, clock: Clock | None = None
             ) -> TorchLoop:
        """The shared loop over ``model``; ``clock``: who times its epochs (default: a Clock
        that synchronises the first device)."""
        loop = make_loop(self.workload, self.config, model, self.data, batch_size,
                         self.devices[0], optimizer, clock)
        if self.config.option("compile"):  # compile now, in start-up: not in a timed step
            from parabench.core.clock import Stopwatch
            from parabench.torch.knobs import graphs_compiled, warm_up_compiled

            watch = Stopwatch()
            warm_up_compiled(loop)
            self.notes["compile_warmup_s"] = round(watch.seconds(), 3)
            self.notes["compiled_graphs_startup"] = graphs_compiled()
        return loop


def build_case(
    workload: TorchWorkload,
    config: RunConfig,
    device: torch.device,
    *,
    world: int | None = None,
    count_flops: bool = True,
    on_host: bool = False,
    place: Callable[[torch.nn.Module, TorchData], torch.nn.Module] | None = None,
    devices: list[torch.device] | None = None,
    threads: int | None = None,
    knobs: bool = True,
) -> TorchCase:
    """Tensors, ``torch.manual_seed(seed)`` then the model, the batch and the FLOPs.

    ``world``: ranks that agree on an ``auto`` batch; ``count_flops``: False on ranks that
    would only repeat rank 0's count; ``on_host``: the model stays on the CPU (stages are cut
    from it); ``place``: what trains, built from the model before the batch is resolved on it;
    ``devices``: every device the case uses (peaks), default ``[device]``; ``threads``: torch's
    intra-op threads in this process; ``knobs``: apply the case's activation checkpointing
    and compile to the model (:mod:`parabench.torch.knobs`) once the FLOPs and the batch are
    found on the plain model (False: the caller applies them to the stages it cuts).
    """
    if threads is not None:
        torch.set_num_threads(threads)
    notes: dict[str, Any] = {}
    with wall_part("data"):
        t = load_tensors(workload, config, device)
    notes.update(t.data.origin or {})  # built, or from the sweep's cache, and its seconds
    with wall_part("model"):  # the model, its FLOPs, its batch: the case's wall-time split
        return _built(workload, config, device, t, notes, world=world, count_flops=count_flops,
                      on_host=on_host, place=place, devices=devices, knobs=knobs)


def _built(workload: TorchWorkload, config: RunConfig, device: torch.device, t: TorchData,
           notes: dict[str, Any], *, world: int | None, count_flops: bool, on_host: bool,
           place: Callable[[torch.nn.Module, TorchData], torch.nn.Module] | None,
           devices: list[torch.device] | None, knobs: bool) -> TorchCase:
    """:func:`build_case` once its tensors are loaded: the model, its FLOPs and batch."""
    torch.manual_seed(config.training_seed)
    model = workload.build_model(t.data, config.training_seed)
    if not on_host:
        model = model.to(device)
    if channels_last(config):  # before any wrapper or stage cut sees the parameters
        model = model.to(memory_format=torch.channels_last)
        notes["memory_format"] = "channels_last"
    loss_fn = workload.loss_fn()
    flops = None
    if count_flops:  # the workload's formula where it has one, else counted
        flops = workload.model_flops_per_sample(t.data)
        if flops is None:
            flops = cached_flops_per_sample(model, loss_fn, t.x, t.y)
    placed = place(model, t) if place is not None else model
    batch = resolve_batch_size(workload, config, placed, t, device, notes)
    if world is not None and config.batch_size == "auto":
        batch = agreed_batch(batch, device)
    if knobs:
        from parabench.torch.knobs import apply_knobs

        notes.update(apply_knobs([model], config))
    return TorchCase(workload=workload, config=config, devices=devices or [device], data=t,
                     model=model, placed=placed, batch_size=batch, flops_per_sample=flops,
                     notes=notes)
