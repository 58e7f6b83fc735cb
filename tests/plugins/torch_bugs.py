"""Planted bugs for the run-level parity checks: nine broken torch methods, one mistake each.

Usage (a test plugin, loaded like every plugin)::

    PYTHONPATH=tests/plugins PARABENCH_PLUGINS=torch_bugs parabench run --workload mlp \\
        --method serial,ddp,ddp_sum,ddp_noreduce,ddp_unsharded,pipeline_unscaled,fsdp_nosync \\
        --workers 2 --profile tiny --epochs 1 --threads 1

* ``ddp_sum``: DDP whose gradient hook all-reduces without dividing by the world size: the
  gradient is summed, not averaged (a doubled learning rate).
* ``ddp_noreduce``: DDP whose hook returns the local gradient: no all-reduce at all, every
  rank trains on its own shard.
* ``ddp_unsharded``: ddp whose sampler gives every rank the whole epoch order instead of its
  shard ``order[rank::world]``.
* ``pipeline_unscaled``: pipeline whose micro-batch losses keep weight 1 instead of their
  share of the global batch (gradient and loss x micro-batches).
* ``fsdp_nosync``: FSDP2 with gradient synchronisation turned off (no reduce-scatter).
* ``ddp_staleeval``: DDP that trains correctly but scores a copy of the untrained model: the
  trajectory matches serial's, the held-out quality check must fail it.
* ``ddp_nobiasdigest``: DDP whose weight digest leaves the biases out: parity must refuse to
  compare a digest that covers less than the model ("digest coverage").
* ``ddp_staleorder``: DDP whose sampler cuts every epoch's shards from epoch 0's order: the
  first steps match serial's, epoch 2's loss and the final weights do not.
* ``ddp_halfeval``: DDP that trains correctly but scores half of the held-out set: the same
  weights as serial's, another quality ("evaluation").
* ``ddp_globalcount``: DDP that trains correctly but whose ranks each report the global
  count (their samples x the world size) for every epoch and window: samples/s doubled at 2
  workers. The lifecycle's check against the loaders' own count must fail the case
  (``tests/case/test_samples_crosscheck.py``).
* ``tp_noreduce`` (gpt, tensor parallelism): tp whose row-parallel layers (attention's ``wo``,
  the MLP's ``proj``) hand on their partial sums, never all-reduced over the tensor ranks.
* ``tp_wrongshard`` (gpt): tp whose tensor rank 1 sees its replica's samples one place off
  (the batch order rolled by one), so its column shards compute other sequences' features.

Every one must show parity FAILED on the trajectory (``tests/methods/test_planted_bugs_torch.py``).
The tensor-parallel two show the one-file recipe for a variant of that family: a rank program
that changes one thing (the row-parallel style, or the shard), a session naming it, a method.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from torch.distributed.tensor.parallel import RowwiseParallel

from parabench.config import RunConfig
from parabench.method import EpochStats, Session
from parabench.methods.ddp import DDP, DDPProgram, DDPSession
from parabench.methods.fsdp import FSDP, FSDPProgram, FSDPSession
from parabench.methods.pipeline import Pipeline
from parabench.methods.tp import TensorParallel
from parabench.registry import methods
from parabench.torch.pipeline import MicrobatchLoss, PipelineProgram
from parabench.torch.staged import PipelineSession
from parabench.torch.tensor_parallel import TensorParallelProgram, TensorParallelSession
from parabench.workload import Workload


def _sum_hook(state: Any, bucket):  # noqa: ANN001, ANN201 - DDP checks real annotations
    import torch.distributed as dist

    fut = dist.all_reduce(bucket.buffer(), async_op=True).get_future()
    return fut.then(lambda f: f.value()[0])  # summed: the division by world is missing


def _local_hook(state: Any, bucket):  # noqa: ANN001, ANN201
    fut: torch.futures.Future[torch.Tensor] = torch.futures.Future()
    fut.set_result(bucket.buffer())  # never all-reduced
    return fut


class HookedDDPProgram(DDPProgram):
    hook: ClassVar[Any]

    def wrap(self, model: torch.nn.Module) -> torch.nn.Module:
        from torch.nn.parallel import DistributedDataParallel

        ddp = DistributedDataParallel(model)
        ddp.register_comm_hook(None, type(self).hook)
        return ddp


class SumProgram(HookedDDPProgram):
    hook = staticmethod(_sum_hook)


class NoReduceProgram(HookedDDPProgram):
    hook = staticmethod(_local_hook)


class UnshardedProgram(DDPProgram):
    def shard(self, epoch: int) -> torch.Tensor:
        from parabench.torch.loop import epoch_order

        return epoch_order(self.n, self.config.seed, epoch)  # every rank: the whole order


class NoSyncFSDPProgram(FSDPProgram):
    def wrap(self, model: torch.nn.Module) -> torch.nn.Module:
        sharded = super().wrap(model)
        sharded.set_requires_gradient_sync(False)
        return sharded


class UnscaledLoss(MicrobatchLoss):
    """Every micro-batch's loss with weight 1, whatever the schedule sets."""

    @property  # type: ignore[override]
    def weight(self) -> float:
        return 1.0

    @weight.setter
    def weight(self, value: float) -> None:
        pass


class UnscaledProgram(PipelineProgram):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.loss = UnscaledLoss(self.loss.loss_fn, self.spans, self._autocast)


class UnscaledSession(PipelineSession):
    program: ClassVar[str | type] = UnscaledProgram


def _ddp_bug(name: str, program: type) -> None:
    session = type(f"{program.__name__}Session", (DDPSession,), {"program": program})
    methods.register(type(f"{program.__name__}Method", (DDP,), {
        "name": name, "description": f"planted bug: {program.__doc__ or name}",
        "session_class": session, "__module__": __name__}))


class StaleEvalProgram(DDPProgram):
    """Scores a copy of the model taken before training (the weights never reach it)."""

    def wrap(self, model: torch.nn.Module) -> torch.nn.Module:
        import copy

        self.stale = copy.deepcopy(model)
        return super().wrap(model)

    def evaluate(self) -> float | None:  # the digest still reads the trained model
        from parabench.torch.loop import predict

        if self.ctx.rank != 0:
            return None
        return self.workload.score(predict(self.stale, self.x_test), self.y_test)


class NoBiasDigestProgram(DDPProgram):
    """Trains correctly; its weight digest leaves the biases out."""

    def digest(self) -> dict[str, Any] | None:
        from parabench.torch.loop import weight_digest

        state = {k: v for k, v in self.state_dict().items() if not k.endswith("bias")}
        return weight_digest(state) if self.ctx.rank == 0 else None


class StaleOrderProgram(DDPProgram):
    """Every epoch's shard is cut from epoch 0's order (serial reshuffles every epoch)."""

    def order(self, epoch: int) -> torch.Tensor:
        return super().order(0)  # whole epochs and time to target's parts alike


class HalfEvalProgram(DDPProgram):
    """Trains correctly; scores only the first half of the held-out set."""

    def evaluate(self) -> float | None:
        from parabench.torch.loop import predict

        if self.ctx.rank != 0:
            return None
        half = len(self.x_test) // 2
        outputs = predict(self.eval_model(), self.x_test[:half])
        return self.workload.score(outputs, self.y_test[:half])


_ddp_bug("ddp_nobiasdigest", NoBiasDigestProgram)
_ddp_bug("ddp_staleorder", StaleOrderProgram)
_ddp_bug("ddp_halfeval", HalfEvalProgram)
class GlobalCountProgram(DDPProgram):
    """Each rank reports its samples x the world size (a per-rank vs global mix-up)."""

    def _train(self, *args: Any, **kwargs: Any) -> EpochStats:
        import dataclasses

        stats = super()._train(*args, **kwargs)
        return dataclasses.replace(stats, samples=stats.samples * self.ctx.world_size)


_ddp_bug("ddp_sum", SumProgram)
_ddp_bug("ddp_globalcount", GlobalCountProgram)
_ddp_bug("ddp_staleeval", StaleEvalProgram)
_ddp_bug("ddp_noreduce", NoReduceProgram)
_ddp_bug("ddp_unsharded", UnshardedProgram)


@methods.register
class FSDPNoSync(FSDP):
    name: ClassVar[str] = "fsdp_nosync"
    description: ClassVar[str] = "planted bug: FSDP with gradient synchronisation off"
    session_class: ClassVar[type[Session]] = type(
        "NoSyncSession", (FSDPSession,), {"program": NoSyncFSDPProgram, "__module__": __name__})


@methods.register
class PipelineUnscaled(Pipeline):
    name: ClassVar[str] = "pipeline_unscaled"
    description: ClassVar[str] = "planted bug: micro-batch losses not scaled"

    def session(self, workload: Workload, config: RunConfig) -> Session:
        return UnscaledSession(workload, config, self.stages_for(config))  # type: ignore[arg-type]


class NoReduceRowwise(RowwiseParallel):
    """Row-parallel, but each rank's partial sum goes on as if it were the whole output."""

    @staticmethod
    def _prepare_output_fn(output_layouts: Any, use_local_output: bool, mod: Any,
                           outputs: Any, device_mesh: Any) -> Any:
        return outputs.to_local()  # the all-reduce (redistribute to Replicate) is missing


class NoReduceTPProgram(TensorParallelProgram):
    rowwise = NoReduceRowwise


class WrongShardTPProgram(TensorParallelProgram):
    """Tensor rank 1 gets its replica's samples rolled by one place."""

    def share(self, order: torch.Tensor) -> torch.Tensor:
        mine = super().share(order)
        return mine.roll(1) if self.tp_rank == 1 else mine


def _tp_bug(name: str, program: type) -> None:
    session = type(f"{program.__name__}Session", (TensorParallelSession,),
                   {"program": program, "__module__": __name__})
    methods.register(type(f"{program.__name__}Method", (TensorParallel,), {
        "name": name, "description": f"planted bug: {program.__doc__ or name}",
        "session_class": session, "__module__": __name__}))


_tp_bug("tp_noreduce", NoReduceTPProgram)
_tp_bug("tp_wrongshard", WrongShardTPProgram)
