"""Pipeline stages whose layers are tensor-parallel: the rank program of ``pipeline_tp``.

Usage (a pool of pp x dp x tp ranks; the method's session does this)::

    from parabench.core.pool import WorkerPool

    args = {"workload": "gpt", "config": config.to_dict(), "stages": 2,
            "degrees": {"pp": 2, "dp": 1, "tp": 2}}
    with WorkerPool(4, "parabench.torch.pipeline_tp:TensorPipelineProgram", args) as pool:
        pool.call("train_epoch", epoch=0)

:class:`~parabench.torch.pipeline.PipelineProgram` (the stages, schedules, micro-batch loss
weights, timing and trace of ``pipeline`` / ``hybrid``) with four changes. The ranks form a
``DeviceMesh`` ("pp", "dp", "tp") (:class:`~parabench.torch.degrees.ParallelDegrees`: rank
``r`` is tensor rank ``r % tp`` of replica ``(r // tp) % dp`` of stage ``r // (tp x dp)``);
a pipeline's P2P group is its "pp" slice and a stage's gradient all-reduce over replicas its
"dp" slice. Each stage's share of the workload's tensor-parallel plan is applied on the "tp"
slice (:func:`~parabench.torch.tensor_parallel.apply_tp` ``within`` the stage), so the
activations crossing stages stay whole and every tensor rank of a stage sends and receives
its own copy. One tensor rank of the last stage reports the loss and samples. Weights are made
whole (DTensor ``full_tensor``) for the digest and the held-out evaluation, which scores a
copy of the model taken before the split. Sequence parallelism is not supported here.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from parabench.config import RunConfig
from parabench.core.rank import RankContext
from parabench.torch.degrees import ParallelDegrees
from parabench.torch.pipeline import PipelineProgram
from parabench.torch.staged import PipelineSession
from parabench.torch.stages import Layout
from parabench.workload import Workload

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True, kw_only=True)
class MeshLayout(Layout):
    """Stages x replicas x tensor ranks, tensor ranks innermost (the mesh's order)."""

    tp: int

    @classmethod
    def of_degrees(cls, config: RunConfig, degrees: ParallelDegrees) -> MeshLayout:
        return cls(stages=degrees.pp, replicas=degrees.dp, tp=degrees.tp,
                   microbatches=config.option("microbatches"),
                   schedule=config.option("schedule"))

    def position(self, rank: int) -> tuple[int, int]:
        return rank // (self.tp * self.replicas), (rank // self.tp) % self.replicas


class TensorPipelineProgram(PipelineProgram):
    def __init__(self, ctx: RankContext, *, workload: str, config: dict[str, Any],
                 stages: int, degrees: dict[str, int]) -> None:
        self.degrees = ParallelDegrees(**degrees)  # validated by the method, not again here
        self.tp_rank = self.degrees.position(ctx.rank)[2]
        super().__init__(ctx, workload=workload, config=config, stages=stages)
        self.reports = self.last and self.tp_rank == 0
        self.notes["degrees"] = self.degrees.label()

    def layout_of(self, config: RunConfig, stages: int) -> Layout:
        return MeshLayout.of_degrees(config, self.degrees)

    def groups(self) -> tuple[Any, Any]:
        from torch.distributed.device_mesh import init_device_mesh

        d = self.degrees
        mesh = init_device_mesh(self.device.type, (d.pp, d.dp, d.tp),
                                mesh_dim_names=("pp", "dp", "tp"))
        self.tp_mesh = mesh["tp"]
        return mesh["pp"].get_group(), mesh["dp"].get_group() if d.dp > 1 else None

    def stage_module(self, module: torch.nn.Module) -> torch.nn.Module:
        from parabench.torch.tensor_parallel import apply_tp

        self.pristine = copy.deepcopy(self.model)  # what evaluate loads the whole weights into
        plan = self.workload.tp_plan(self.model)
        assert plan is not None, "the method checks the workload's plan before any rank starts"
        apply_tp(self.model, plan, self.tp_mesh, within=module)
        return module.to(self.device)

    def whole_state(self) -> dict[str, Any]:
        """Every sharded tensor gathered whole (a collective within each stage's tp group)."""
        return {k: v.full_tensor() if hasattr(v, "full_tensor") else v
                for k, v in self.model.state_dict().items()}

    def evaluate(self) -> float | None:
        from parabench.torch.loop import predict

        state = self.state_dict()  # a collective: every rank
        if self.ctx.rank != 0:
            return None
        model = copy.deepcopy(self.pristine)
        model.load_state_dict(state)
        with self.case.evaluating():  # apart from training's GPU peak
            outputs = predict(model.to(self.device), self.x_test)
        return self.workload.score(outputs, self.y_test)


class TensorPipelineSession(PipelineSession):
    program: ClassVar[str | type] = TensorPipelineProgram

    def __init__(self, workload: Workload, config: RunConfig, degrees: ParallelDegrees) -> None:
        super().__init__(workload, config, degrees.pp)
        self.degrees = degrees

    def program_args(self) -> dict[str, Any]:
        return {**super().program_args(), "degrees": self.degrees.to_dict()}
