"""Activation checkpointing and ``torch.compile``, applied to a built model from outside.

Usage (the torch case builder applies them for every torch method; see
:func:`parabench.torch.build.build_case`)::

    from parabench.torch.knobs import apply_checkpointing, apply_compile, apply_knobs, segments

    model = workload.build_model(data, seed)   # the workload's own module
    notes = apply_knobs([model], config)       # in place, as the case's options say:
                                               #   checkpoint segments, then compile
    apply_knobs([model], config, units=shard_units(model))  # FSDP2: each unit's forward
    warm_up_compiled(loop)                     # compiled: one undone step, in start-up
    segments(list(stage))                      # a stage's checkpoint segments
    apply_checkpointing(stage)                 # one knob by hand (the segment count)
    apply_compile(stage)                       # compiles at its first call

Both knobs change the model in place and leave its structure alone (the same children, the
same ``state_dict`` names), so DDP, FSDP2's units, the pipeline's stage slices, the weight
digests and the FLOP count see the workload's own model. They are applied before any wrapper
(FSDP2 with activation checkpointing wants it on the unsharded module), and to each stage's
slice for the staged methods (after the cut, which deep-copies layers to cost them).

**Checkpoint granularity: segments of the top-level children.** A child that has children of
its own (a transformer block, the gpt's ``Embed`` and ``Head``) is a segment by itself; each
run of consecutive leaf layers (``Linear``, ``ReLU``, ``Conv2d``, ...) is cut into
``ceil(sqrt(run))`` near-equal segments (Chen et al. 2016's sqrt(n) rule, what
``checkpoint_sequential`` does). Only each segment's input is kept; its inside is recomputed
in backward. Checkpointing every leaf layer alone saves nothing: each checkpoint keeps its
input, which is the tensor the layer saved anyway (a ``ReLU`` checkpoint even keeps the
pre-activation the layer would have freed). For ``nn.Sequential`` models (every workload with
a sequential view) the model's ``forward`` runs the segments; any other model has each
top-level child checkpointed alone. Non-reentrant ``torch.utils.checkpoint`` (FSDP2 fails
with the reentrant one): RNG state is replayed, so dropout draws the same masks. The
recompute leaves module buffers as the first forward left them (BatchNorm's running
statistics would otherwise be updated twice), so checkpointing changes no number: the
trajectory matches the run without it.

**Compile**: ``module.compile(dynamic=False)`` in place, whole model (or each stage); under
FSDP2, whose hooks TorchDynamo will not trace (a compiled model would silently run eagerly),
each unit's own ``forward``, inside its hooks (the root's own ops between units stay eager): one
static graph per input shape (the full batch, the last short batch, evaluation), so the
windows, all full batches, run the graph compiled in start-up, and a shape change never turns
it into a dynamic-shape graph. Inductor compiles in-process (``compile_threads = 1``): no
compile workers join the case's process tree and its memory figure. :func:`warm_up_compiled`
runs one forward and backward of a full batch through the (wrapped) model inside start-up and
undoes it (gradients, buffers, RNG), so compilation is start-up, never a measured window. A
compiler failure raises, and the case fails with its message.
"""

from __future__ import annotations

import math
import types
from typing import TYPE_CHECKING, Any

from parabench.config import RunConfig

if TYPE_CHECKING:
    import torch
    from torch import nn

    from parabench.torch.loop import TorchLoop


def segments(children: list[nn.Module]) -> list[list[nn.Module]]:
    """The checkpoint segments of a sequence of layers (see the module doc)."""
    out: list[list[nn.Module]] = []
    run: list[nn.Module] = []

    def flush() -> None:
        if run:
            pieces = math.ceil(math.sqrt(len(run)))
            bounds = [round(i * len(run) / pieces) for i in range(pieces + 1)]
            out.extend(run[a:b] for a, b in zip(bounds, bounds[1:], strict=False) if b > a)
            run.clear()

    for child in children:
        if any(True for _ in child.children()):  # a block: its own segment
            flush()
            out.append([child])
        else:
            run.append(child)
    flush()
    return out


def _run_segment(layers: tuple[Any, ...], owners: tuple[nn.Module, ...], *args: Any,
                 **kwargs: Any) -> Any:
    """The segment's layers in order; a recompute (in backward) leaves the ``owners``'
    buffers as the first forward left them."""
    import torch

    buffers = [b for owner in owners for b in owner.buffers()]
    recompute = (buffers and not torch.compiler.is_compiling()
                 and torch._C._current_graph_task_id() != -1)
    saved = [b.clone() for b in buffers] if recompute else []
    try:
        out = layers[0](*args, **kwargs)
        for layer in layers[1:]:
            out = layer(out)
        return out
    finally:
        if saved:
            with torch.no_grad():
                for b, s in zip(buffers, saved, strict=True):
                    b.copy_(s)


def _checkpointed(parts: list[tuple[Any, ...]], owners: list[tuple[nn.Module, ...]]) -> Any:
    """A forward running ``parts`` (callables per segment; ``owners``: their modules) each
    under a non-reentrant checkpoint."""
    from torch.utils.checkpoint import checkpoint

    def forward(self: nn.Module, *args: Any, **kwargs: Any) -> Any:
        for k, (layers, mods) in enumerate(zip(parts, owners, strict=True)):
            args = (checkpoint(_run_segment, layers, mods, *args, use_reentrant=False,
                               **(kwargs if k == 0 else {})),)
        return args[0]

    return forward


def apply_checkpointing(module: nn.Module) -> int:
    """Checkpoint ``module``'s segments in place (see the module doc); how many there are."""
    from torch import nn

    if isinstance(module, nn.Sequential):
        parts = [tuple(s) for s in segments(list(module))]
        module.forward = types.MethodType(_checkpointed(parts, parts), module)
        return len(parts)
    children = list(module.children())
    for child in children:  # the child's own forward, checkpointed (its hooks stay outside)
        child.forward = types.MethodType(_checkpointed([(child.forward,)], [(child,)]), child)
    return len(children)


def apply_compile(module: nn.Module) -> None:
    """``module.compile(dynamic=False)`` in place, inductor compiling in this process."""
    import torch._inductor.config as inductor

    inductor.compile_threads = 1
    module.compile(dynamic=False)


def apply_compile_forward(module: nn.Module) -> None:
    """Compile ``module``'s own ``forward`` (inside whatever hooks wrap its call): for FSDP2's
    units, whose hooks TorchDynamo refuses to trace (a compiled call would run eagerly)."""
    import torch
    import torch._inductor.config as inductor

    inductor.compile_threads = 1
    module.forward = torch.compile(module.forward, dynamic=False)


def apply_knobs(parts: list[nn.Module], config: RunConfig,
                units: list[nn.Module] | None = None) -> dict[str, Any]:
    """The case's knobs on each part (the model, or each stage): notes for the result.
    ``units``: compile these modules' forwards instead of the parts (FSDP2's units)."""
    notes: dict[str, Any] = {}
    if config.option("activation_checkpointing"):
        notes["checkpoint_segments"] = [apply_checkpointing(p) for p in parts]
    if config.option("compile"):
        for part in parts if units is None else []:
            apply_compile(part)
        for unit in units or []:
            apply_compile_forward(unit)
        notes["compile_scope"] = (f"{len(parts)} part(s), whole" if units is None else
                                  f"the forwards of {len(units)} unit(s); the rest eager")
    return notes


def graphs_compiled() -> int:
    """Graphs TorchDynamo has compiled in this process so far (its own counter)."""
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


def warm_up_compiled(loop: TorchLoop) -> None:
    """One forward + backward of the loop's first full batch, then every trace of it undone
    (gradients dropped, buffers and RNG restored): compiles the graphs the steps will run.

    Every rank runs it at the same point, so a wrapper's collectives (DDP's all-reduce,
    FSDP's gathers) match up.
    """
    import torch

    n = min(loop.batch_size, len(loop.x))
    xb, yb = loop.x[:n].to(loop.device), loop.y[:n].to(loop.device)

    def step() -> None:
        with torch.autocast(loop.device.type, dtype=loop.dtype or torch.float32,
                            enabled=loop.dtype is not None):
            out = loop.model(xb)
            loss = loop.loss_fn(out, yb.to(out.device))
        loss.backward()

    undone(loop.model, loop.device, step)


def apply_stage_knobs(parts: list[nn.Module], stage: int, config: RunConfig,
                      device: torch.device, x: torch.Tensor, y: torch.Tensor,
                      loss_fn: Any | None, autocast: Any) -> dict[str, Any]:
    """:func:`apply_knobs` on pipeline stage ``parts[stage]`` (on its device), and compiled,
    :func:`warm_up_stage` on micro-batch ``x``, ``y``: notes for the result."""
    from parabench.core.clock import Stopwatch

    notes = apply_knobs([parts[stage]], config)
    if config.option("compile"):
        watch = Stopwatch()
        warm_up_stage(parts, stage, device, x, y, loss_fn or None, autocast)
        notes["compile_warmup_s"] = round(watch.seconds(), 3)
    return notes


def warm_up_stage(parts: list[nn.Module], stage: int, device: torch.device, x: torch.Tensor,
                  y: torch.Tensor, loss_fn: Any | None, autocast: Any) -> None:
    """:func:`warm_up_compiled` for pipeline stage ``parts[stage]`` on micro-batch ``x``:
    its input comes from the stages before it (eval mode, no gradient: only its shape and
    dtype matter) and needs a gradient unless it is the data; the last stage (``loss_fn``
    given) backpropagates the loss against ``y``, any other a gradient of ones."""
    import torch

    h = x
    with torch.no_grad():
        for part in parts[:stage]:
            part.eval()  # no dropout draw, no BatchNorm statistics update
            h = part(h)
            part.train()
    h = h.to(device).requires_grad_(stage > 0 and h.is_floating_point())

    def step() -> None:
        with autocast():
            out = parts[stage](h)
            value = loss_fn(out, y.to(out.device)) if loss_fn is not None else None
        if value is not None:
            value.backward()
        else:
            out.backward(torch.ones_like(out))

    undone(parts[stage], device, step)


def undone(model: nn.Module, device: torch.device, step: Any) -> None:
    """Run ``step`` (a forward and backward through ``model``), then drop the gradients and
    restore the buffers and the RNG it used: the training that follows is unchanged."""
    import torch

    rng = torch.get_rng_state()
    cuda_rng = torch.cuda.get_rng_state_all() if device.type == "cuda" else None
    buffers = [(b, b.detach().clone()) for b in model.buffers()]
    model.train()
    try:
        step()
    finally:
        for p in model.parameters():
            p.grad = None
        with torch.no_grad():
            for b, saved in buffers:
                b.copy_(saved)
        torch.set_rng_state(rng)
        if cuda_rng is not None:
            torch.cuda.set_rng_state_all(cuda_rng)
