"""Data parallelism shared by ``ddp`` and ``fsdp``: global-batch semantics and the sharding.

Usage (a data-parallel method is a ``wrap`` with a parallelizer and a name; see
``methods/ddp.py`` and the one-file plugin ``tests/plugins/ddp_static.py``)::

    from parabench.torch.session import DistributedTorchSession

    class MyProgram(DataParallelProgram):
        def wrap(self, model):            # the built case's model, on this rank's device
            module, self.comm = apply_ddp(model, self.device)   # parabench.torch.parallelize
            return module

    class MySession(DistributedTorchSession):
        program = "mypkg.my:MyProgram"

    @methods.register
    class My(DataParallelMethod):
        name = "my"
        session_class = MySession

The case (tensors, seeded model, batch, FLOPs) comes from :func:`parabench.torch.build.build_case`.

Semantics, so that the run is mathematically serial's:

* ``config.batch_size`` (or the workload's default) is the **global** batch ``B``; each rank
  trains on ``B / workers`` per step (not divisible: ``check`` skips the case with the reason).
* Every epoch uses serial's seeded order (:func:`parabench.torch.loop.epoch_order`), sharded
  like ``DistributedSampler`` without padding: rank ``r`` takes ``order[r::world]``. Step
  ``k`` of all ranks together is then exactly serial's batch ``k``, each sample once.
* Gradients are averaged across ranks (DDP's all-reduce, FSDP's reduce-scatter). When the
  last global batch does not split evenly, each rank's loss gradient is scaled by its share
  of that batch, so the average is still serial's per-sample mean.
* ``--batch-size auto``: every rank finds its own batch, the smallest wins, ``B = b x world``.

Training is :class:`parabench.torch.loop.TorchLoop` over the wrapped model (serial's code path).
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from parabench import hardware
from parabench.config import OptionSpec, RunConfig
from parabench.core.launcher import active_launcher
from parabench.core.rank import RankContext
from parabench.core.records import Grading
from parabench.method import EpochStats, Method, Session
from parabench.torch.options import TORCH_OPTIONS
from parabench.torch.split_batch import (  # noqa: F401 - their home before; still imported from here
    check_split_batch_grading,
    split_batch_grading,
    split_batch_note,
)
from parabench.workload import TorchWorkload, Workload

if TYPE_CHECKING:
    import torch

    from parabench.torch.parallelize import CommTimer


def global_batch(workload: Workload, config: RunConfig) -> int | str:
    if config.batch_size is None:
        return workload.default_batch_size(config.profile) or 64
    return config.batch_size


def step_scales(n: int, global_batch: int, rank: int, world: int) -> list[float]:
    """Per-step gradient scale of this rank: (its samples x world) / the global batch's.

    All 1.0 when every global batch splits evenly; only the last step can differ. Raises
    when some rank would have no sample in the last step (it would skip a collective).
    """
    scales = []
    for start in range(0, n, global_batch):
        size = min(global_batch, n - start)
        mine = len(range(start + rank, start + size, world))
        if size < world:
            raise ValueError(
                f"the last batch of {size} sample(s) ({n} % {global_batch}) leaves ranks of "
                f"{world} without data; choose a batch size B with {n} % B == 0 or >= {world}"
            )
        scales.append(mine * world / size)
    return scales


class _ShareWeightedLoss:
    """The loss with the same value but its gradient scaled by this step's share (see above)."""

    def __init__(self, loss_fn: Any, scales: list[float]) -> None:
        self.loss_fn, self.scales, self.step = loss_fn, scales, 0
        #: False for a speed window: its global batches are all full, no step is weighted
        self.active = True

    def __call__(self, out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        loss = self.loss_fn(out, target)
        scale = self.scales[self.step % len(self.scales)] if self.active else 1.0
        self.step += 1
        if scale == 1.0:
            return loss
        return loss * scale - (loss * (scale - 1.0)).detach()  # value unchanged


class DataParallelProgram(ABC):
    """Rank program: this rank's shard of every epoch, through TorchLoop on a wrapped model."""

    #: True when a forward pass of the wrapped model is a collective (FSDP gathers shards):
    #: then every rank runs the held-out forward, otherwise rank 0 alone does
    collective_forward: ClassVar[bool] = False

    #: the communication timer of the wrapped model, when its parallelizer has one (DDP)
    comm: CommTimer | None = None

    def data_position(self) -> tuple[int, int]:
        """(this rank's data replica, the replicas): every rank its own (DDP, FSDP); the
        tensor ranks of one replica share its shard (:mod:`parabench.torch.tensor_parallel`)."""
        return self.ctx.rank, self.ctx.world_size

    def counts_samples(self) -> bool:
        """Whether this rank reports its replica's samples, loss and trace (one per replica)."""
        return True

    def __init__(self, ctx: RankContext, *, workload: str, config: dict[str, Any]) -> None:
        from parabench.registry import workloads
        from parabench.torch.build import build_case
        from parabench.torch.loop import model_size, trace_steps
        from parabench.torch.parallelize import global_batchnorm

        self.ctx = ctx
        self.config = cfg = RunConfig.from_dict(config)
        self.replica, self.replicas = self.data_position()
        self.workload: TorchWorkload = workloads.get(workload)
        self.device = ctx.torch_device()
        # rank 0 reports the FLOPs; counting costs seconds that every other rank would repeat
        self.case = case = build_case(self.workload, cfg, self.device, world=ctx.world_size,
                                      count_flops=ctx.rank == 0, knobs=False)
        from parabench.torch.knobs import apply_knobs

        case.notes.update(apply_knobs([case.model], cfg, units=self.compile_units(case.model)))
        self.notes: dict[str, Any] = dict(case.notes)
        self.samples_per_epoch = case.samples_per_epoch
        self.n = len(case.data.x)
        self.x_test, self.y_test = case.data.x_test, case.data.y_test
        self.flops = case.flops_per_sample
        self.batch_size, self.local_batch = self._batch_sizes(case.batch_size)
        case.reset_peaks()
        self.inner = case.model
        if self.replicas > 1 and (synced := global_batchnorm(case.model)):
            self.notes["batchnorm"] = f"{synced} layer(s) with global-batch statistics"
        self.model = self.wrap(case.model)
        self.loop = case.loop(self.model, self.local_batch)  # compiled: warmed up here
        self.notes.update(case.notes)
        self.loop.trace_steps = trace_steps(self.n, self.batch_size)
        self.loop.digest_fn = self.digest
        self.loop.model_size = model_size(self.inner)
        check_split_batch_grading(self.workload, self.inner, self.replicas,
                                  "each rank's shard", batchnorm_synced=True)
        scales = step_scales(self.n, self.batch_size, self.replica, self.replicas)
        if any(s != 1.0 for s in scales):
            self.loop.loss_fn = self.weighted = _ShareWeightedLoss(self.loop.loss_fn, scales)
            self.notes["last_batch_weighted"] = True

    def _batch_sizes(self, batch: int) -> tuple[int, int]:
        """(global, per-replica) batch from the case's (``auto``: per rank, agreed by all)."""
        world = self.replicas
        if self.config.batch_size != "auto":
            if batch % world:
                raise ValueError(f"global batch {batch} is not divisible by {world} replicas")
            return batch, batch // world
        # a per-rank batch beyond the rank's shard would only be a smaller last step
        local = min(batch, max(1, self.n // world))
        return local * world, local

    def compile_units(self, model: torch.nn.Module) -> list[torch.nn.Module] | None:
        """The modules whose forwards ``--compile on`` compiles (None: the whole model)."""
        return None

    @abstractmethod
    def wrap(self, model: torch.nn.Module) -> torch.nn.Module:
        """The distributed model (DDP, fully_shard, ...); ``model`` is on this rank's device."""

    def eval_model(self) -> torch.nn.Module:
        """The module ``evaluate`` runs forward on: the workload's model, not its wrapper."""
        return self.inner

    def order(self, epoch: int) -> torch.Tensor:
        """Epoch ``epoch``'s global sample order: serial's, whole epochs and parts alike."""
        from parabench.torch.loop import epoch_order

        return epoch_order(self.n, self.config.training_seed, epoch)

    def shard(self, epoch: int) -> torch.Tensor:
        return self.share(self.order(epoch))

    def share(self, order: torch.Tensor) -> torch.Tensor:
        """This rank's samples of a global order: ``[replica::replicas]`` of every global
        batch (``[rank::world]`` under plain data parallelism)."""
        return order[self.replica :: self.replicas]

    # -- the protocol DistributedTorchSession calls ------------------------------------------

    def describe(self) -> dict[str, Any]:
        return {"batch_size": self.batch_size, "samples_per_epoch": self.samples_per_epoch,
                "flops_per_sample": self.flops,
                "notes": {**self.notes, "batch_per_rank": self.local_batch}}

    def before_epoch(self) -> None:
        """Inside the timed region, before the loop: a fresh communication timer."""
        if self.comm is not None:
            self.comm.reset()

    def epoch_components(self, loop: dict[str, float]) -> dict[str, float]:
        """The loop's components with ``communication`` when the parallelizer timed it.

        DDP's all-reduce is in flight while backward runs (the hook launches each bucket as
        its gradients are ready; backward ends waiting for the last): that time is shown as
        ``communication`` and taken out of ``backward``, so the two stay exclusive.
        """
        if self.comm is None:
            return dict(loop)
        comm = self.comm.seconds()
        backward = loop.get("backward", 0.0)
        return {**loop, "backward": max(0.0, backward - comm), "communication": comm}

    def train_epoch(self, epoch: int) -> EpochStats:
        # the shard belongs in the epoch's time, as serial's order does
        return self._train(lambda: self.loop.train_epoch(epoch, indices=self.shard(epoch)))

    def epoch_parts(self, wanted: int) -> int:
        """Up to ``wanted`` parts of whole global steps (an epoch of fewer steps: one each)."""
        from parabench.torch.loop import epoch_steps

        return max(1, min(wanted, epoch_steps(self.n, self.batch_size)))

    def train_part(self, epoch: int, part: int, parts: int) -> EpochStats:
        """This rank's share of the global steps :func:`~parabench.torch.loop.part_span` of
        epoch ``epoch``: the parts in order are :meth:`train_epoch`'s steps, share-weighted
        by their index in the epoch."""
        from parabench.torch.loop import part_span

        first, last = part_span(self.n, self.batch_size, part, parts)

        def run() -> EpochStats:
            order = self.order(epoch)
            mine = self.share(order[first * self.batch_size : last * self.batch_size])
            return self.loop.train_epoch(epoch, indices=mine)

        return self._train(run, first_step=first)

    def train_window(self, window: int, steps: int) -> EpochStats:
        """This rank's share of ``steps`` global batches of the window's order (all full, so
        no step is share-weighted)."""
        from parabench.torch.loop import window_order

        order = window_order(self.n, self.config.training_seed, window, steps * self.batch_size)
        mine = self.share(order)
        return self._train(lambda: self.loop.train_epoch(-1, indices=mine), weighted=False)

    def _train(self, run: Callable[[], EpochStats], weighted: bool = True,
               first_step: int = 0) -> EpochStats:
        """``run`` (the loop over this rank's samples from the epoch's step ``first_step``)
        timed between barriers."""
        from parabench.torch.loop import partition

        def work() -> EpochStats:
            self.before_epoch()
            if hasattr(self, "weighted"):
                self.weighted.step, self.weighted.active = first_step, weighted
            return run()

        stats, seconds = self.ctx.timed(work)
        # the trace's digest (first epoch only) is not training: its seconds are left out
        seconds -= self.loop.trace_s
        components = partition(self.epoch_components(stats.components), seconds)
        stats = dataclasses.replace(stats, seconds=seconds, components=components)
        if not self.counts_samples():  # another rank of this replica counts its samples
            stats = dataclasses.replace(stats, loss=0.0, samples=0, served=0)
        return stats

    def digest(self) -> dict[str, Any] | None:
        """The weight digest after step K: every rank gathers (FSDP), rank 0 reports."""
        from parabench.torch.loop import weight_digest

        state = self.state_dict()  # a collective under FSDP: all ranks call it
        return weight_digest(state) if self.ctx.rank == 0 else None

    def trace(self) -> dict[str, Any] | None:
        """This rank's trace piece: its shard's loss sums (and, on rank 0, the digest); None
        where another rank of the replica reports them."""
        return self.loop.trace_piece if self.counts_samples() else None

    def evaluate(self) -> float | None:
        from parabench.torch.loop import predict

        if self.ctx.rank != 0 and not self.collective_forward:
            return None
        with self.case.evaluating():  # apart from training's GPU peak
            outputs = predict(self.eval_model(), self.x_test)
        return self.workload.score(outputs, self.y_test) if self.ctx.rank == 0 else None

    def state_dict(self) -> dict[str, Any]:
        """Full CPU weights, the same keys as the unwrapped model (FSDP: every sharded DTensor
        is all-gathered, a collective)."""
        out = {}
        for key, value in self.eval_model().state_dict().items():
            full = value.full_tensor() if hasattr(value, "full_tensor") else value
            out[key] = full.detach().cpu().clone()
        return out

    def seen(self, epoch: int) -> list[int]:
        """The sample indices this rank trains on in ``epoch`` (for the sharding tests)."""
        return self.shard(epoch).tolist()

    def peak_gpu_mb(self) -> float | None:
        return self.case.peak_gpu_mb()


class DataParallelMethod(Method):
    """Shared ``check`` and ``session`` of the data-parallel torch methods."""

    devices: ClassVar[tuple[str, ...]] = ("cpu", "cuda")
    families: ClassVar[frozenset[str]] = frozenset({"torch"})
    parity: ClassVar[str] = "exact"
    options: ClassVar[Mapping[str, OptionSpec]] = TORCH_OPTIONS
    session_class: ClassVar[type[Session]]

    def replicas(self, config: RunConfig) -> int:
        """Data replicas the global batch is split into: one per worker here (tensor
        parallelism's replicas span several workers)."""
        return config.workers

    def check(self, workload: Workload, config: RunConfig) -> str | None:
        if (reason := super().check(workload, config)) is not None:
            return reason
        # under torchrun only this node's ranks share its GPUs
        local = active_launcher().local_ranks(config.workers)
        if config.device == "cuda" and local > (gpus := hardware.cuda_device_count()):
            return f"{self.name} uses one GPU per worker: {local} asked, {gpus} here"
        total, replicas = global_batch(workload, config), self.replicas(config)
        if total != "auto" and int(total) % replicas:
            if replicas == config.workers:
                return (f"global batch {total} is not divisible by {replicas} workers "
                        f"(each rank trains on B / workers)")
            return (f"global batch {total} is not divisible by {replicas} data replicas "
                    f"(each replica's ranks train on B / replicas)")
        return None

    def grading(self, workload: Workload, config: RunConfig) -> Grading:
        """Statistical where each rank's shard changes the mathematics (BatchNorm, a
        token-mean loss): :func:`split_batch_grading`."""
        return (split_batch_grading(workload, self.replicas(config), "each rank's shard",
                                    batchnorm_synced=True)
                or super().grading(workload, config))

    def session(self, workload: Workload, config: RunConfig) -> Session:
        return self.session_class(workload, config)
