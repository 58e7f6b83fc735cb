"""``fsdp``: fully sharded data parallel (FSDP2 ``fully_shard``), gloo on CPU, NCCL on CUDA.

Usage::

    parabench run --workload mlp --method fsdp --workers 2 --threads 1

Same batch and sharding semantics as ``ddp`` (global batch ``B``, ``B / workers`` per rank,
serial's order sharded ``order[rank::workers]``; see
:mod:`parabench.torch.data_parallel`), so ``parity = "exact"``. Each rank keeps
``1 / workers`` of every parameter, gradient and optimizer state: every top-level child module
that owns parameters is its own FSDP unit (all-gathered for its forward and backward, then
freed), and the root takes whatever parameters are left
(:func:`parabench.torch.parallelize.apply_fsdp`). Gradients are reduce-scattered and
averaged over ranks, as DDP's all-reduce averages them.

Components: ``data``, ``forward`` (includes the parameter all-gathers), ``backward`` (includes
the re-gathers and gradient reduce-scatters), ``optimizer`` (on the local shards). FSDP2 has
no communication hook, so communication is not reported separately here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from parabench.method import Session
from parabench.registry import methods
from parabench.torch.data_parallel import DataParallelMethod, DataParallelProgram
from parabench.torch.parallelize import apply_fsdp, shard_units
from parabench.torch.session import DistributedTorchSession

if TYPE_CHECKING:
    import torch


class FSDPProgram(DataParallelProgram):
    collective_forward: ClassVar[bool] = True  # every forward all-gathers the shards

    def wrap(self, model: torch.nn.Module) -> torch.nn.Module:
        return apply_fsdp(model)

    def compile_units(self, model: torch.nn.Module) -> list[torch.nn.Module] | None:
        """The shard units: TorchDynamo skips FSDP2's hooks, so only a unit's own forward,
        run inside them, can be compiled (:mod:`parabench.torch.knobs`)."""
        return shard_units(model)


class FSDPSession(DistributedTorchSession):
    program: ClassVar[str | type] = FSDPProgram


#: why FSDP2 (here and in fsdp_tp) cannot train in channels_last
NHWC_REFUSED = "FSDP2 shards only contiguous parameters, and NHWC weights are not contiguous"


@methods.register
class FSDP(DataParallelMethod):
    name: ClassVar[str] = "fsdp"
    startup_guess_s: ClassVar[float | None] = 9.0
    description: ClassVar[str] = "FSDP2 fully_shard: parameters, gradients, optimizer state sharded"
    session_class: ClassVar[type[Session]] = FSDPSession
    no_channels_last: ClassVar[str | None] = NHWC_REFUSED
