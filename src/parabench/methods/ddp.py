"""``ddp``: DistributedDataParallel, one process per worker (gloo on CPU, NCCL on one GPU each).

Usage::

    parabench run --workload mlp --method ddp --workers 2 --threads 1
    parabench run --workload cnn --method ddp --device cuda --workers 2    # needs 2 GPUs

The global batch ``B`` (``--batch-size`` or the workload default) is split ``B / workers`` per
rank over serial's seeded sample order, sharded ``order[rank::workers]``, so the weights match
``serial`` with batch ``B`` to float tolerance (``parity = "exact"``); see
:mod:`parabench.torch.data_parallel`. Graded statistical instead, with the reason, where a
split batch changes the mathematics (a workload declaring ``batchnorm`` or a token-mean loss:
``DataParallelMethod.grading``). Ranks live in a persistent
:class:`~parabench.core.pool.WorkerPool`: spawn and rendezvous are ``startup_s``.

Components: ``data``, ``forward``, ``backward``, ``optimizer``, ``other`` from the shared
:class:`~parabench.torch.loop.TorchLoop`, plus ``communication``: the time at least one
gradient all-reduce was in flight (how it is measured: :mod:`parabench.torch.parallelize`).
It runs inside backward, so it is taken out of ``backward``: the components stay exclusive.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from parabench.method import Session
from parabench.registry import methods
from parabench.torch.data_parallel import DataParallelMethod, DataParallelProgram
from parabench.torch.parallelize import apply_ddp
from parabench.torch.session import DistributedTorchSession

if TYPE_CHECKING:
    import torch


class DDPProgram(DataParallelProgram):
    #: keyword arguments of ``DistributedDataParallel`` (a variant changes only these)
    ddp_options: ClassVar[dict[str, Any]] = {}

    def wrap(self, model: torch.nn.Module) -> torch.nn.Module:
        module, self.comm = apply_ddp(model, self.device, **self.ddp_options)
        return module


class DDPSession(DistributedTorchSession):
    program: ClassVar[str | type] = DDPProgram


@methods.register
class DDP(DataParallelMethod):
    name: ClassVar[str] = "ddp"
    startup_guess_s: ClassVar[float | None] = 7.0
    coverage_rank: ClassVar[int | None] = 0
    description: ClassVar[str] = (
        "DistributedDataParallel: one process per worker, gloo (cpu) / nccl (one GPU each)"
    )
    session_class: ClassVar[type[Session]] = DDPSession
