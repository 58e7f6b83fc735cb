"""Cutting a workload's ``nn.Sequential`` view into contiguous stages balanced by FLOPs.

Usage (what ``model_parallel``, ``pipeline`` and ``hybrid`` share)::

    from parabench.torch.stages import cut, sequential_reason

    if (reason := sequential_reason(workload, stages=2)) is not None:
        ...                                   # the case is skipped with this reason
    plan = cut(workload, model, x_probe, stages=2)
    plan.modules                              # [nn.Sequential, ...]: slices sharing model's params
    plan.bounds                               # [(0, 3), (3, 9)]: layer ranges of the view
    plan.notes()                              # what the result records about the split
    layout = Layout.of(config, stages=2)      # stages x replicas, micro-batches, schedule
    owned_names(model, plan.modules[0])       # a stage's state-dict keys (replica_groups:
                                              #   its process groups, under torch.distributed)

Balance: each layer of the view is costed by its forward + backward FLOPs, counted by
``torch.utils.flop_counter`` on a 2-sample probe batch (on a deep copy in eval mode, so the
model, its batch-norm statistics and the RNG are untouched). Layers without a FLOP formula
(activations, pooling, embedding lookups) cost 0; when no layer has any FLOPs the parameter
count is the cost instead. The cut minimises the most expensive stage (exact dynamic
programme over contiguous splits, every stage at least one layer). FLOPs, not parameters:
in ``cnn`` the first fully connected layer holds 94 % of the parameters but 10 % of the work.

:class:`Layout` is how ``pipeline`` / ``hybrid`` place those stages on ranks (rank ``r`` is stage
``r % stages`` of replica ``r // stages``) and micro-batch each step (:func:`micro_split`);
:func:`bubble_for_shares` is the fill-drain bubble a cut's FLOP shares predict.
"""

from __future__ import annotations

import copy
import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from parabench.config import RunConfig
from parabench.workload import TorchWorkload

if TYPE_CHECKING:
    import torch


@functools.cache
def max_stages(workload: TorchWorkload) -> int | None:
    """Most stages the workload's sequential view can be cut into (None: it has no view).

    The model is built on the ``meta`` device from the tiny profile's data, so no weights are
    allocated or initialised: the view's structure does not depend on the profile.
    """
    import torch

    data = workload.make_data("tiny", 0)
    with torch.device("meta"):
        view = workload.sequential(workload.build_model(data, 0))
    return None if view is None else len(cut_points(view)) + 1


def sequential_reason(workload: TorchWorkload, stages: int) -> str | None:
    """Why ``workload`` cannot be cut into ``stages`` stages (None: it can)."""
    most = max_stages(workload)
    if most is None:
        return (f"{workload.name} has no nn.Sequential view to cut into stages "
                f"(its model is not one sequence of layers)")
    if stages > most:
        return (f"{workload.name}'s sequential view can be cut into at most {most} stages, "
                f"not {stages}")
    return None


def layer_costs(view: torch.nn.Sequential, x_probe: torch.Tensor) -> tuple[list[float], str]:
    """(cost per layer, what the cost is): forward + backward FLOPs, else parameter count."""
    from torch.utils.flop_counter import FlopCounterMode

    probe = copy.deepcopy(view).cpu().eval()
    h = x_probe[:2].cpu()
    costs: list[float] = []
    for layer in probe:
        # a clone, not the leaf itself: in-place layers (ReLU(inplace=True)) refuse a leaf
        inp = h.detach().requires_grad_().clone() if h.is_floating_point() else h
        counter = FlopCounterMode(display=False)
        with counter:
            out = layer(inp)
            if out.requires_grad:
                out.float().sum().backward()
        costs.append(float(counter.get_total_flops()))
        h = out.detach()
    if sum(costs) > 0:
        return costs, "forward+backward FLOPs per layer (torch.utils.flop_counter)"
    params = [float(sum(p.numel() for p in layer.parameters())) for layer in view]
    return params, "parameter count per layer (no FLOPs counted)"


def cut_points(view: torch.nn.Sequential) -> set[int]:
    """Layer indices a stage may start at: not before an in-place layer.

    A pipeline stage receives its input as a leaf that requires grad, and an in-place op
    (``ReLU(inplace=True)``) on such a leaf is an autograd error; the op costs no FLOPs,
    so moving the cut past it changes the balance by nothing.
    """
    return {i for i in range(1, len(view)) if not getattr(view[i], "inplace", False)}


def balanced_bounds(costs: list[float], stages: int,
                    allowed: set[int] | None = None) -> list[tuple[int, int]]:
    """Contiguous ``[start, end)`` layer ranges minimising the largest stage cost.

    ``allowed``: the indices a stage other than the first may start at (default: any).
    """
    n = len(costs)
    allowed = set(range(1, n)) if allowed is None else allowed
    if not 1 <= stages <= len(allowed) + 1:
        raise ValueError(f"cannot cut {n} layers into {stages} non-empty stages "
                         f"({len(allowed)} usable cut points)")
    prefix = [0.0]
    for c in costs:
        prefix.append(prefix[-1] + c)
    inf = float("inf")
    # best[s][i]: smallest max-stage cost splitting the first i layers into s stages
    best = [[inf] * (n + 1) for _ in range(stages + 1)]
    cut_at = [[0] * (n + 1) for _ in range(stages + 1)]
    best[0][0] = 0.0
    for s in range(1, stages + 1):
        for i in range(s, n + 1):
            for j in range(s - 1, i):
                if j > 0 and j not in allowed:
                    continue
                value = max(best[s - 1][j], prefix[i] - prefix[j])
                if value < best[s][i]:
                    best[s][i], cut_at[s][i] = value, j
    if best[stages][n] == inf:
        raise ValueError(f"no cut of {n} layers into {stages} stages at the usable cut points")
    bounds, end = [], n
    for s in range(stages, 0, -1):
        start = cut_at[s][end]
        bounds.append((start, end))
        end = start
    return bounds[::-1]


@dataclass(frozen=True, kw_only=True)
class StagePlan:
    """A cut of the sequential view: the stage modules and how they were chosen."""

    modules: list[Any]
    bounds: list[tuple[int, int]]
    costs: list[float]
    balance: str

    def stage_shares(self) -> list[float]:
        total = sum(self.costs) or 1.0
        return [round(sum(self.costs[a:b]) / total, 4) for a, b in self.bounds]

    def notes(self) -> dict[str, Any]:
        return {"stage_layers": [list(b) for b in self.bounds], "stage_balance": self.balance,
                "stage_cost_shares": self.stage_shares()}


def cut(workload: TorchWorkload, model: torch.nn.Module, x_probe: torch.Tensor,
        stages: int) -> StagePlan:
    """The balanced stage modules of ``model`` (slices of its view: the same parameters)."""
    view = workload.sequential(model)
    if view is None:
        raise ValueError(sequential_reason(workload, stages) or "no sequential view")
    costs, balance = layer_costs(view, x_probe)
    bounds = balanced_bounds(costs, stages, cut_points(view))
    return StagePlan(modules=[view[a:b] for a, b in bounds], bounds=bounds, costs=costs,
                     balance=balance)


@dataclass(frozen=True, kw_only=True)
class Layout:
    """Stages x replicas, and the micro-batching every replica uses."""

    stages: int
    replicas: int
    microbatches: int
    schedule: str

    @classmethod
    def of(cls, config: RunConfig, stages: int) -> Layout:
        return cls(stages=stages, replicas=max(1, config.workers // stages),
                   microbatches=config.option("microbatches"),
                   schedule=config.option("schedule"))

    def position(self, rank: int) -> tuple[int, int]:
        """(stage, replica) of a global rank."""
        return rank % self.stages, rank // self.stages

    def bubble_theory(self) -> float:
        """Idle share of an ideal pipeline (equal stages, free communication)."""
        return (self.stages - 1) / (self.microbatches + self.stages - 1)


def bubble_for_shares(shares: list[float], microbatches: int) -> float:
    """Idle share of a pipeline whose stages take ``shares`` of each micro-batch's time.

    Fill-drain makespan: the slowest stage paces ``m - 1`` micro-batches after one has
    crossed every stage, ``(m - 1) max(t) + sum(t)``; busy is ``m sum(t)`` over ``p`` stages.
    Equal shares give (p - 1) / (m + p - 1). Assumes time proportional to FLOPs and free P2P.
    """
    total, slowest = sum(shares), max(shares)
    makespan = (microbatches - 1) * slowest + total
    return 1.0 - microbatches * total / (len(shares) * makespan)


def micro_split(size: int, microbatches: int) -> tuple[int, int]:
    """(count, size) of equal micro-batches: the largest count <= ``microbatches`` dividing."""
    count = max(c for c in range(1, min(microbatches, size) + 1) if size % c == 0)
    return count, size // count


def replica_groups(layout: Layout, rank: int) -> tuple[Any, Any]:
    """(this replica's pipeline group, this stage's replica group or None).

    ``new_group`` is collective over the world: every rank creates every group, in order.
    """
    import torch.distributed as dist

    pp = dp = None
    for j in range(layout.replicas):
        group = dist.new_group([j * layout.stages + s for s in range(layout.stages)])
        if rank // layout.stages == j:
            pp = group
    if layout.replicas > 1:
        for s in range(layout.stages):
            group = dist.new_group([s + j * layout.stages for j in range(layout.replicas)])
            if rank % layout.stages == s:
                dp = group
    return pp, dp


def owned_names(model: torch.nn.Module, submod: torch.nn.Module) -> list[str]:
    """The model's state-dict keys whose tensors belong to this stage."""
    import itertools

    ids = {id(t) for t in itertools.chain(submod.parameters(), submod.buffers())}
    return [n for n, t in model.state_dict(keep_vars=True).items() if id(t) in ids]


def unowned_names(model: torch.nn.Module, stages: list[Any]) -> list[str]:
    """The model's state-dict keys no stage owns (not trained: serial's digest has them)."""
    owned = {n for stage in stages for n in owned_names(model, stage)}
    return [n for n in model.state_dict() if n not in owned]


def timed_stage(submod: Any, index: int, stages: int, device: Any, group: Any,
                 spans: Any, autocast: Any) -> Any:
    """A manual ``PipelineStage`` whose forward and backward chunks are timed.

    Autocast wraps the module itself, not the chunk calls: the stage's metadata inference
    runs the module too, and must see the dtypes the real chunks send.
    """
    from torch import nn
    from torch.distributed.pipelining import PipelineStage

    class Autocast(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = submod

        def forward(self, *args: Any) -> Any:
            with autocast():
                return self.inner(*args)

    class TimedStage(PipelineStage):
        def forward_one_chunk(self, *args: Any, **kwargs: Any) -> Any:
            with spans("forward"):
                return super().forward_one_chunk(*args, **kwargs)

        def backward_one_chunk(self, *args: Any, **kwargs: Any) -> Any:
            with spans("backward"):
                return super().backward_one_chunk(*args, **kwargs)

    return TimedStage(Autocast(), index, stages, device, group=group)


@functools.cache
def _step_parameters(cls: type) -> frozenset[str]:
    """The keyword names of ``cls.step``, read once per schedule class (not every step)."""
    import inspect

    return frozenset(inspect.signature(cls.step).parameters)


def schedule_step(schedule: Any, x: Any, y: Any, size: int, losses: list) -> None:
    """One step of a ``torch.distributed.pipelining`` schedule on micro-batches of ``size``.

    ``x`` is this step's whole input on the first stage (else None), ``y`` its whole target
    on the last (else None). Recent torch takes the micro-batches as split here
    (``arg_mbs`` / ``target_mbs``); earlier releases (2.11 and before, seen on a GPU runner)
    take the whole batch and split it themselves with ``tensor_split`` into the schedule's
    micro-batch count, the same equal pieces since :func:`micro_split` makes ``size`` divide
    the batch, and hand any keyword they do not know to the stage's ``forward``.
    """
    params = _step_parameters(type(schedule))
    extra = {"return_outputs": False} if "return_outputs" in params else {}
    if "arg_mbs" in params:
        schedule.step(arg_mbs=None if x is None else [(xb,) for xb in x.split(size)],
                      target_mbs=None if y is None else list(y.split(size)),
                      losses=losses, **extra)
    else:
        schedule.step(*(() if x is None else (x,)), target=y, losses=losses, **extra)
