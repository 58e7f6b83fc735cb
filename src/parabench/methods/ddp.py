"""``ddp``: DistributedDataParallel, one process per worker (gloo on CPU, NCCL on one GPU each).

Usage::

    parabench run --workload mlp --method ddp --workers 2 --threads 1
    parabench run --workload cnn --method ddp --device cuda --workers 2    # needs 2 GPUs

The global batch ``B`` (``--batch-size`` or the workload default) is split ``B / workers`` per
rank over serial's seeded sample order, sharded ``order[rank::workers]``, so the weights match
``serial`` with batch ``B`` to float tolerance (``parity = "exact"``); see
:mod:`parabench.torch.data_parallel`. Ranks live in a persistent
:class:`~parabench.case.pool.WorkerPool`: spawn and rendezvous are ``startup_s``.

Components: ``data``, ``forward``, ``backward``, ``optimizer`` come from the shared
:class:`~parabench.torch.loop.TorchLoop` (``backward`` includes DDP's wait for the last
all-reduce), plus ``communication``, measured by a DDP communication hook that wraps the
default all-reduce hook (same arithmetic: divide by world size, all-reduce, so parity is
untouched). ``communication`` is the wall time, per epoch, during which **at least one**
gradient-bucket all-reduce was in flight: from the hook launching the bucket's all-reduce to
its future completing, as the union of those intervals over the buckets of a step (so
concurrent buckets are not double counted). DDP launches a bucket as soon as its gradients are
ready, so most of this time **overlaps backward computation**: it is communication time, not
exposed (blocking) communication time; the exposed part is at most this and is contained in
``backward``. On CPU the interval ends are ``perf_counter`` reads (the completion end is read
in the future's callback, on gloo's thread); on CUDA they are CUDA events recorded on the
stream before the all-reduce and in the completion callback, read after the epoch's final
synchronise.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, ClassVar

from parabench.method import Session
from parabench.registry import methods
from parabench.torch.data_parallel import DataParallelMethod, DataParallelProgram
from parabench.torch.session import DistributedTorchSession

if TYPE_CHECKING:
    import torch


class CommTimer:
    """State of the timing hook: the in-flight intervals of one epoch's all-reduces."""

    def __init__(self, cuda: bool) -> None:
        self.cuda = cuda
        self.spans: list[tuple[Any, Any]] = []
        self._ref: Any = None

    def reset(self) -> None:
        self.spans = []
        if self.cuda:
            import torch

            self._ref = torch.cuda.Event(enable_timing=True)
            self._ref.record()

    def now(self) -> Any:
        if not self.cuda:
            return time.perf_counter()
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

    start = state.now()
    fut = default_hooks.allreduce_hook(None, bucket)

    def done(f: torch.futures.Future[torch.Tensor]) -> torch.Tensor:
        state.spans.append((start, state.now()))
        return f.value()

    return fut.then(done)


class DDPProgram(DataParallelProgram):
    def wrap(self, model: torch.nn.Module) -> torch.nn.Module:
        from torch.nn.parallel import DistributedDataParallel

        cuda = self.device.type == "cuda"
        ddp = DistributedDataParallel(model, device_ids=[self.device.index] if cuda else None)
        self.comm = CommTimer(cuda)
        ddp.register_comm_hook(self.comm, timed_allreduce_hook)
        return ddp

    def eval_model(self) -> torch.nn.Module:
        return self.model.module

    def before_epoch(self) -> None:
        self.comm.reset()

    def epoch_components(self) -> dict[str, float]:
        return {"communication": self.comm.seconds()}


class DDPSession(DistributedTorchSession):
    program: ClassVar[str] = "parabench.methods.ddp:DDPProgram"


@methods.register
class DDP(DataParallelMethod):
    name: ClassVar[str] = "ddp"
    description: ClassVar[str] = (
        "DistributedDataParallel: one process per worker, gloo (cpu) / nccl (one GPU each)"
    )
    session_class: ClassVar[type[Session]] = DDPSession
