"""Tensor parallelism (Megatron-style), applied from outside the model: ``tp`` and ``fsdp_tp``.

Usage::

    parabench run --workload gpt --method tp --workers 2 --threads 1 --profile tiny
    parabench run --workload gpt --method tp --workers 2 --sequence-parallel on --profile tiny
    parabench run --workload gpt --method fsdp_tp --workers 4 --tp 2 --oversubscribe \\
        --profile tiny                      # 2 data replicas (FSDP2) x 2 tensor ranks

    plan = workload.tp_plan(model)          # the workload's declaration, None: no plan
    apply_tp(model, plan, mesh["tp"], sequence_parallel=False)   # torch's parallel styles

A workload opts in by returning a :class:`~parabench.workload.TensorParallelPlan` from
``TorchWorkload.tp_plan(model)`` (gpt: :func:`parabench.workloads.models.gpt.tp_plan`); the
methods skip every other workload with the reason. :func:`apply_tp` maps the plan onto
``torch.distributed.tensor.parallel``: ``colwise`` layers become ``ColwiseParallel`` (input
whole, output features sharded: a rank holds ``heads / tp`` attention heads), ``rowwise`` ones
``RowwiseParallel`` (input features sharded, the partial outputs all-reduced), every other
parameter stays whole on every rank (the inputs it sees are the same on all of them, so its
gradient is too). With ``--sequence-parallel on`` the norms run on a slice of the sequence
(``SequenceParallel``), the row-parallel sums are reduce-scattered onto those slices, and the
plan's ``gather`` modules all-gather the sequence before they run.

Degrees: :class:`~parabench.torch.degrees.ParallelDegrees`, built and validated once by the
method (``dp x tp == workers``, ``tp`` divides heads, width, MLP width and, with sequence
parallelism, the sequence length); a case that does not fit is skipped with what is wrong, and
a run in which nothing fits exits 2. The ranks form a ``DeviceMesh`` ("dp", "tp"), tensor
ranks innermost. ``tp``: dp = 1, every rank sees the whole global batch. ``fsdp_tp``: each
data replica (``tp`` consecutive ranks) takes ``order[replica::dp]`` of serial's seeded order,
exactly as ``ddp`` shards per rank (:mod:`parabench.torch.data_parallel`), and FSDP2's
``fully_shard`` on the "dp" sub-mesh shards the already tensor-parallel parameters over the
replicas and averages their gradients. Both compute serial's mathematics at the same global
batch, so parity is exact (trajectory and weights); one rank per replica reports the samples,
loss and trace, the digest gathers every sharded parameter whole (DTensor ``full_tensor``).

Timing: components as ``fsdp`` (``data``, ``forward`` with its all-reduces or gathers,
``backward``, ``optimizer``); torch's styles have no communication hook, so communication is
not a component of its own. On CPU gloo's collectives are slow and its reduce-scatter is an
all-reduce underneath: CPU timings of ``tp`` / ``fsdp_tp`` say little about GPUs.
"""

from __future__ import annotations

import functools
from abc import abstractmethod
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from parabench.config import ConfigError, OptionSpec, RunConfig
from parabench.core.rank import RankContext
from parabench.method import Session
from parabench.torch.data_parallel import DataParallelMethod, DataParallelProgram
from parabench.torch.degrees import ParallelDegrees
from parabench.torch.session import DistributedTorchSession
from parabench.workload import TensorParallelPlan, TorchWorkload, Workload

if TYPE_CHECKING:
    import torch

#: the tensor-parallel degree; each method declares its default (``tp``: every worker)
TP = OptionSpec(int, "tensor-parallel degree (ranks sharing each layer)", minimum=1)
SEQUENCE_PARALLEL = OptionSpec(bool, "sequence parallelism: norms on sequence slices",
                               default=False)


@functools.cache
def model_plan(workload: TorchWorkload, profile: str) -> TensorParallelPlan | None:
    """The workload's plan for its model at ``profile`` (built on the meta device, cached)."""
    import torch

    data = workload.make_data(profile, 0)
    with torch.device("meta"):  # the structure only: no weights allocated or initialised
        return workload.tp_plan(workload.build_model(data, 0))


def plan_sizes(plan: TensorParallelPlan, sequence_parallel: bool) -> dict[str, int]:
    """The sizes the tensor-parallel degree must divide (with the sequence's under SP)."""
    sizes = dict(plan.divides)
    if sequence_parallel:
        if not plan.norms or plan.seq_len is None:
            raise ConfigError("the model declares no sequence-parallel layout; "
                              "use --sequence-parallel off")
        sizes["sequence length"] = plan.seq_len
    return sizes


def plan_reason(method: str, workload: TorchWorkload, config: RunConfig,
                degrees: ParallelDegrees) -> str | None:
    """Why ``workload``'s layers cannot be split ``degrees.tp`` ways here (None: they can)."""
    if (plan := model_plan(workload, config.profile)) is None:
        return (f"{workload.name} has no tensor-parallel plan (TorchWorkload.tp_plan): "
                f"nothing says which of its layers split across ranks")
    try:
        degrees.check_sizes(plan_sizes(plan, bool(config.option("sequence_parallel"))))
    except ConfigError as exc:
        return f"{method} on {workload.name}: {exc}"
    return None


def styles(plan: TensorParallelPlan, sequence_parallel: bool,
           rowwise: type | None = None) -> dict[str, Any]:
    """Module name -> torch parallel style for ``plan`` (``rowwise``: the row-parallel
    style's class, ``RowwiseParallel`` unless a variant replaces it)."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        PrepareModuleInput,
        PrepareModuleOutput,
        RowwiseParallel,
        SequenceParallel,
    )

    row = rowwise or RowwiseParallel
    out: dict[str, Any] = {name: ColwiseParallel() for name in plan.colwise}
    if not sequence_parallel:
        return out | {name: row() for name in plan.rowwise}
    seq = Shard(plan.seq_dim)
    out |= {name: row(output_layouts=seq) for name in plan.rowwise}  # reduce-scatter
    out |= {name: SequenceParallel(sequence_dim=plan.seq_dim) for name in plan.norms}
    out |= {name: PrepareModuleInput(input_layouts=(seq,), desired_input_layouts=(Replicate(),),
                                     use_local_output=True) for name in plan.gather}
    out |= {name: PrepareModuleOutput(output_layouts=(Replicate(),),
                                      desired_output_layouts=(seq,), use_local_output=True)
            for name in plan.scatter}
    return out


def apply_tp(model: torch.nn.Module, plan: TensorParallelPlan, mesh: Any, *,
             sequence_parallel: bool = False, rowwise: type | None = None,
             within: torch.nn.Module | None = None) -> torch.nn.Module:
    """``parallelize_module`` with :func:`styles` on a 1-D DeviceMesh (in place); ``within``:
    only the plan's modules inside that part of ``model`` (a pipeline stage's)."""
    from torch.distributed.tensor.parallel import parallelize_module

    chosen = styles(plan, sequence_parallel, rowwise)
    if within is not None:
        inside, named = {id(m) for m in within.modules()}, dict(model.named_modules())
        chosen = {name: style for name, style in chosen.items() if id(named[name]) in inside}
    return parallelize_module(model, mesh, chosen)


class TensorParallelProgram(DataParallelProgram):
    """Rank program: tensor-parallel ranks of one data replica share its shard of the batch."""

    collective_forward: ClassVar[bool] = True  # row-parallel layers all-reduce in forward
    #: the row-parallel style's class (None: torch's ``RowwiseParallel``)
    rowwise: ClassVar[type | None] = None

    def __init__(self, ctx: RankContext, *, workload: str, config: dict[str, Any],
                 degrees: dict[str, int]) -> None:
        self.degrees = ParallelDegrees(**degrees)  # validated by the method, not again here
        _, self.dp_rank, self.tp_rank = self.degrees.position(ctx.rank)
        super().__init__(ctx, workload=workload, config=config)
        self.notes.update(degrees=self.degrees.label(),
                          sequence_parallel=bool(self.config.option("sequence_parallel")))

    def data_position(self) -> tuple[int, int]:
        return self.dp_rank, self.degrees.dp

    def counts_samples(self) -> bool:
        return self.tp_rank == 0

    def mesh(self) -> Any:
        from torch.distributed.device_mesh import init_device_mesh

        return init_device_mesh(self.device.type, self.degrees.shape,
                                mesh_dim_names=self.degrees.names)

    def wrap(self, model: torch.nn.Module) -> torch.nn.Module:
        self.device_mesh = self.mesh()
        return self.parallelize(model, self.device_mesh)

    def parallelize(self, model: torch.nn.Module, mesh: Any) -> torch.nn.Module:
        """The tensor-parallel split on the "tp" dimension (a variant adds FSDP over "dp")."""
        plan = self.workload.tp_plan(model)
        assert plan is not None, "the method checks the workload's plan before any rank starts"
        return apply_tp(model, plan, mesh["tp"], rowwise=self.rowwise,
                        sequence_parallel=bool(self.config.option("sequence_parallel")))


class TensorParallelSession(DistributedTorchSession):
    program: ClassVar[str | type] = TensorParallelProgram

    def __init__(self, workload: Workload, config: RunConfig, degrees: ParallelDegrees) -> None:
        super().__init__(workload, config)
        self.degrees = degrees

    def program_args(self) -> dict[str, Any]:
        return {**super().program_args(), "degrees": self.degrees.to_dict()}


class TensorParallelMethod(DataParallelMethod):
    """Shared checks of the tensor-parallel methods: the degrees (once) and the model's plan."""

    options: ClassVar[Mapping[str, OptionSpec]] = {
        **DataParallelMethod.options, "tp": TP.with_default(None),
        "sequence_parallel": SEQUENCE_PARALLEL}
    session_class: ClassVar[type[Session]] = TensorParallelSession

    @abstractmethod
    def degrees(self, config: RunConfig) -> ParallelDegrees:
        """This case's degrees (:meth:`ParallelDegrees.of`); ConfigError when they do not fit."""

    def replicas(self, config: RunConfig) -> int:
        try:
            return self.degrees(config).dp
        except ConfigError:
            return config.workers  # the case is skipped (check says why); any count will do

    def check(self, workload: Workload, config: RunConfig) -> str | None:
        try:
            degrees = self.degrees(config)
        except ConfigError as exc:
            return f"{self.name}: {exc}"
        if (reason := super().check(workload, config)) is not None:
            return reason
        assert isinstance(workload, TorchWorkload)
        return plan_reason(self.name, workload, config, degrees)

    def session(self, workload: Workload, config: RunConfig) -> Session:
        session_class: Any = self.session_class
        return session_class(workload, config, self.degrees(config))
