"""``fsdp``: fully sharded data parallel (FSDP2 ``fully_shard``), gloo on CPU, NCCL on CUDA.

Usage::

    parabench run --workload mlp --method fsdp --workers 2 --threads 1

Same batch and sharding semantics as ``ddp`` (global batch ``B``, ``B / workers`` per rank,
serial's order sharded ``order[rank::workers]``; see
:mod:`parabench.torch.data_parallel`), so ``parity = "exact"``. Each rank keeps
``1 / workers`` of every parameter, gradient and optimizer state: every top-level child module
that owns parameters is its own FSDP unit (all-gathered for its forward and backward, then
freed), and the root takes whatever parameters are left. Gradients are reduce-scattered and
averaged over ranks, as DDP's all-reduce averages them.

Components: ``data``, ``forward`` (includes the parameter all-gathers), ``backward`` (includes
the re-gathers and gradient reduce-scatters), ``optimizer`` (on the local shards). FSDP2 has
no communication hook, so communication is not reported separately here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from parabench.method import Session
from parabench.registry import methods
from parabench.torch.data_parallel import DataParallelMethod, DataParallelProgram
from parabench.torch.session import DistributedTorchSession

if TYPE_CHECKING:
    import torch


def shard_units(model: torch.nn.Module) -> list[torch.nn.Module]:
    """Top-level children that own parameters: the FSDP units below the root."""
    return [m for m in model.children() if any(True for _ in m.parameters())]


class FSDPProgram(DataParallelProgram):
    collective_forward: ClassVar[bool] = True  # every forward all-gathers the shards

    def wrap(self, model: torch.nn.Module) -> torch.nn.Module:
        from torch.distributed.fsdp import fully_shard

        for unit in shard_units(model):
            fully_shard(unit)
        return fully_shard(model)

    def state_dict(self) -> dict[str, Any]:
        """Full weights on every rank: each sharded DTensor is all-gathered (a collective)."""
        out = {}
        for key, value in self.model.state_dict().items():
            full = value.full_tensor() if hasattr(value, "full_tensor") else value
            out[key] = full.detach().cpu().clone()
        return out


class FSDPSession(DistributedTorchSession):
    program: ClassVar[str] = "parabench.methods.fsdp:FSDPProgram"


@methods.register
class FSDP(DataParallelMethod):
    name: ClassVar[str] = "fsdp"
    description: ClassVar[str] = "FSDP2 fully_shard: parameters, gradients, optimizer state sharded"
    session_class: ClassVar[type[Session]] = FSDPSession
