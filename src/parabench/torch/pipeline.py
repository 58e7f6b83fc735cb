"""The rank program of ``pipeline`` and ``hybrid``: one pipeline stage of one replica.

Usage (a pool of stages x replicas ranks; the methods' sessions do this)::

    from parabench.core.pool import WorkerPool
    args = {"workload": "mlp", "config": config.to_dict(), "stages": 2}   # 2 x 1 replica
    with WorkerPool(2, "parabench.torch.pipeline:PipelineProgram", args) as pool:
        pool.call("train_epoch", epoch=0)     # one EpochStats per rank
        pool.call("state_dict")               # the whole model's weights, on every rank

Layout: rank ``r`` is stage ``r % stages`` of replica ``r // stages``. Each replica is a
``torch.distributed.pipelining`` pipeline (its own process group, a manual ``PipelineStage``
per rank built from the balanced slices of the workload's ``sequential()`` view, see
:mod:`parabench.torch.stages`) scheduled by ``ScheduleGPipe`` or ``Schedule1F1B``.
With more than one replica, every stage has a process group with its copies in the other
replicas, and their gradients are all-reduced after each step (``hybrid``).

Semantics, so that the update is serial's on the whole global batch ``B``:

* Replica ``j`` trains on ``order[j::replicas]`` of serial's seeded order, ``B / replicas`` per
  step (as ``ddp`` shards), cut into ``microbatches`` equal micro-batches.
* Micro-batch gradients are accumulated unscaled (``scale_grads=False``) and each
  micro-batch's mean loss is weighted by ``len(micro-batch) / samples in the global step``,
  so the sum over micro-batches and replicas (all-reduce SUM) is the global batch's mean.
  That stays exact for a short last batch, which runs on its own schedule with the largest
  micro-batch count ``<= microbatches`` that divides it (``gpipe`` if 1F1B's ``m >= stages``
  cannot hold there); stages are built per micro-batch shape because receive buffers are.

Timing per rank (:class:`parabench.core.clock.Spans`: host clock on CPU, CUDA events read
after the epoch's synchronise): ``data`` (index this step's samples and split them),
``forward`` (the stage's ``forward_one_chunk`` calls and, on the last stage, the loss), ``backward``
(``backward_one_chunk``), ``optimizer`` (step + zero_grad), ``communication`` (the gradient
all-reduce of ``hybrid``; 0 for one replica) and ``idle`` = epoch time - all of those: the
time this stage computed nothing, i.e. the pipeline bubble, stage imbalance and the schedule's
P2P waits for activations and gradients (on the host, waiting for a neighbour and the transfer
itself cannot be told apart, so both are idle; the waits alone are timed, as a span nested in
whatever encloses them, and noted per rank as ``p2p_wait_s``). Spans are exclusive: the
components partition the epoch. Only last stages count samples and loss (each sample once).

Trace (exact parity): the first epoch's first K steps (:func:`parabench.torch.loop.trace_steps`)
give each last stage's per-step loss sums; right after step K every rank digests the tensors
its stage owns (stage 0 also those no stage owns), by the model's state_dict names, so the
merge (replica 0's stages win) covers serial's whole state_dict; untimed. Time to target
trains an epoch in parts of whole global steps (``train_part``); the trace runs on across them.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from parabench.config import RunConfig
from parabench.core.clock import Clock, Spans
from parabench.core.rank import RankContext
from parabench.method import EpochStats
from parabench.torch.knobs import apply_stage_knobs
from parabench.torch.stages import (
    Layout,
    bubble_for_shares,
    micro_split,
    owned_names,
    replica_groups,
    schedule_step,
    timed_stage,
    unowned_names,
)

if TYPE_CHECKING:
    import torch


def _timed_wait(spans: Spans) -> None:
    """Time the schedules' P2P waits (the one helper every wait in them goes through)."""
    from torch.distributed.pipelining import schedules

    original = getattr(schedules, "_wait_batch_p2p", None)
    if original is None:  # another torch: no communication figure, everything else stands
        return

    def wait(work: Any) -> None:
        with spans("p2p"):
            original(work)

    schedules._wait_batch_p2p = wait


class MicrobatchLoss:
    """The workload's loss weighted by this micro-batch's share of the global step."""

    def __init__(self, loss_fn: Any, spans: Spans, autocast: Any) -> None:
        self.loss_fn, self.spans, self.autocast = loss_fn, spans, autocast
        self.weight = 1.0

    def __call__(self, out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        with self.spans("forward"), self.autocast():
            return self.loss_fn(out, target) * self.weight


class PipelineProgram:
    """One stage of one replica; answers the protocol of ``DistributedTorchSession``."""

    def __init__(self, ctx: RankContext, *, workload: str, config: dict[str, Any],
                 stages: int) -> None:
        from parabench.registry import workloads
        from parabench.torch.build import build_case
        from parabench.torch.data_parallel import check_split_batch_grading, step_scales
        from parabench.torch.parallelize import cut_stages

        self.ctx, self.config = ctx, (cfg := RunConfig.from_dict(config))
        self.workload = workloads.get(workload)
        self.layout = layout = self.layout_of(cfg, stages)
        self.stage, self.replica = layout.position(ctx.rank)
        self.first, self.last = self.stage == 0, self.stage == layout.stages - 1
        #: the rank that reports its replica's loss and samples (a tensor-parallel variant:
        #: one of the last stage's tensor ranks)
        self.reports = self.last
        self.device = device = ctx.torch_device()
        self.pp_group, self.dp_group = self.groups()
        # the whole model stays on the CPU: only this rank's stage moves to its device
        self.case = case = build_case(self.workload, cfg, device, on_host=True, knobs=False)
        t = case.data
        self.n = len(t.x)
        self.samples_per_epoch = case.samples_per_epoch
        self.x = t.x if self.first else None  # a stage keeps only what it feeds
        self.y = t.y if self.last else None
        self.x_test, self.y_test = t.x_test, t.y_test
        self.model, self.flops = case.model, case.flops_per_sample
        self.plan = cut_stages(self.workload, self.model, t.x, layout.stages)
        self.submod = self.stage_module(self.plan.modules[self.stage])
        self.optimizer = self.workload.make_optimizer(self.submod.parameters())
        self.owned = owned_names(self.model, self.submod)
        self.digested = self.owned + (unowned_names(self.model, self.plan.modules) if self.first
                                      else [])
        self.batch_size = case.batch_size  # explicit or the workload's (``auto`` is refused)
        self.local_batch = self.batch_size // layout.replicas
        # raises when a replica would get no sample in the last step (and skip an all-reduce)
        step_scales(self.n, self.batch_size, 0, layout.replicas)
        self.spans = Spans(device.type == "cuda")
        _timed_wait(self.spans)
        self.loss = MicrobatchLoss(self.workload.loss_fn(), self.spans, self._autocast)
        self.schedules: dict[tuple[int, int], Any] = {}
        self.loss_sums: list[torch.Tensor] = []
        self.notes: dict[str, Any] = {}
        parts = layout.replicas * layout.microbatches
        check_split_batch_grading(self.workload, self.model, parts, "each micro-batch")
        from parabench.torch.loop import trace_steps

        self.trace_k = trace_steps(self.n, self.batch_size)
        self.trace_piece: dict[str, Any] | None = None
        self.trace_s = 0.0
        #: the traced steps so far (samples; the last stage: loss sums) and their epoch
        self.traced: tuple[list[int], list[torch.Tensor]] = ([], [])
        self.trace_epoch: int | None = None
        size = micro_split(self.local_batch, layout.microbatches)[1]
        self.notes.update(apply_stage_knobs(self.plan.modules, self.stage, cfg, device, t.x[:size],
                                            t.y[:size], self.last and self.loss.loss_fn,
                                            self._autocast))
        case.reset_peaks()

    # -- what a variant (tensor-parallel stages: parabench.torch.pipeline_tp) changes -------

    def layout_of(self, config: RunConfig, stages: int) -> Layout:
        layout = Layout.of(config, stages)
        if layout.stages * layout.replicas != self.ctx.world_size:
            raise ValueError(f"{self.ctx.world_size} ranks are not {stages} stages x replicas")
        return layout

    def groups(self) -> tuple[Any, Any]:
        """(this replica's pipeline group, this stage's replica group or None)."""
        return replica_groups(self.layout, self.ctx.rank)

    def stage_module(self, module: torch.nn.Module) -> torch.nn.Module:
        """This rank's stage, on its device."""
        return module.to(self.device)

    def whole_state(self) -> dict[str, Any]:
        """The model's state dict with every tensor whole (a collective for sharded ones)."""
        return self.model.state_dict()

    def _autocast(self) -> Any:
        import contextlib

        import torch

        from parabench.torch.loop import PRECISIONS

        dtype = PRECISIONS[self.config.option("precision")]
        if dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=dtype)

    # -- one step -----------------------------------------------------------------------------

    def _schedule(self, count: int, size: int) -> Any:
        """The schedule (and its stage) for ``count`` micro-batches of ``size`` samples."""
        if (count, size) not in self.schedules:
            from torch.distributed.pipelining import Schedule1F1B, ScheduleGPipe

            kind = self.layout.schedule
            if kind == "1f1b" and count < self.layout.stages:  # 1F1B needs m >= stages
                kind = "gpipe"
                self.notes["tail_schedule"] = f"gpipe ({count} micro-batches < stages)"
            stage = timed_stage(self.submod, self.stage, self.layout.stages, self.device,
                                 self.pp_group, self.spans, self._autocast)
            cls = Schedule1F1B if kind == "1f1b" else ScheduleGPipe
            self.schedules[(count, size)] = cls(stage, count, loss_fn=self.loss,
                                                scale_grads=False)
        return self.schedules[(count, size)]

    def _step(self, idx: torch.Tensor, global_size: int) -> None:
        import torch

        with self.spans("data"):
            count, size = micro_split(len(idx), self.layout.microbatches)
            x = self.x[idx] if self.first else None
            y = self.y[idx] if self.last else None
            self.served += len(y) if y is not None else 0  # the loss's samples, as served
        self.loss.weight = size / global_size
        losses: list[torch.Tensor] = []
        schedule_step(self._schedule(count, size), x, y, size, losses)
        if losses:  # weighted means: their sum x the global step is this replica's loss sum
            self.loss_sums.append(torch.stack(losses).detach().sum() * global_size)
        if self.dp_group is not None:
            with self.spans("communication"):
                self._allreduce_grads()
        with self.spans("optimizer"):
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)

    def _allreduce_grads(self) -> None:
        """Sum this stage's gradients over the replicas (the weights already average)."""
        import torch
        import torch.distributed as dist

        grads = [p.grad.to_local() if hasattr(p.grad, "to_local") else p.grad  # DTensor: shard
                 for p in self.submod.parameters() if p.grad is not None]
        flat = torch.cat([g.reshape(-1) for g in grads])
        dist.all_reduce(flat, group=self.dp_group)
        offset = 0
        for g in grads:
            g.copy_(flat[offset:offset + g.numel()].view_as(g))
            offset += g.numel()

    def shard(self, epoch: int) -> torch.Tensor:
        from parabench.torch.loop import epoch_order

        order = epoch_order(self.n, self.config.training_seed, epoch)
        return order[self.replica::self.layout.replicas]

    def _epoch(self, epoch: int, span: tuple[int, int] | None = None) -> int:
        from parabench.torch.loop import epoch_order

        first, last = span or (0, self.n)  # whole: at most n steps
        order = epoch_order(self.n, self.config.training_seed, epoch)
        return self._run(order[first * self.batch_size:last * self.batch_size], epoch)

    def _run(self, order: torch.Tensor, epoch: int = -1) -> int:
        """Train on ``order`` (global, in global batches): this replica's share of each."""
        mine = order[self.replica::self.layout.replicas].to(self.device)
        self.trace_s = 0.0
        if self.trace_epoch is None:
            self.trace_epoch = epoch  # the first epoch trained is traced, over all its parts
        sizes, sums = self.traced
        for k, start in enumerate(range(0, len(mine), self.local_batch)):
            global_size = min(self.batch_size, len(order) - k * self.batch_size)
            idx = mine[start:start + self.local_batch]
            self._step(idx, global_size)
            if self.trace_piece is None and epoch == self.trace_epoch and len(sizes) < self.trace_k:
                sizes.append(len(idx))
                sums.extend(self.loss_sums[-1:] if self.reports else [])
                if len(sizes) == self.trace_k:
                    self._trace(sizes)
        return len(mine)

    def _trace(self, sizes: list[int]) -> None:
        """Right after step K: this stage's digest; its seconds kept out of the epoch's."""
        import torch

        from parabench.torch.loop import model_size, synchronize, weight_digest

        def piece() -> dict[str, Any]:
            state = self.whole_state()
            digest = weight_digest({name: state[name] for name in self.digested})
            sums = torch.stack(self.traced[1]).double().cpu().tolist() if self.reports else []
            return {"loss_sums": sums, "samples": list(sizes) if self.reports else [],
                    "digest": digest, "model": model_size(self.model)}

        # its own clock, as TorchLoop's digest: the queued steps stay in the epoch's time
        self.trace_piece, self.trace_s = Clock(sync=lambda: synchronize(self.device)).time(piece)

    # -- the protocol DistributedTorchSession calls ------------------------------------------

    def describe(self) -> dict[str, Any]:
        lay = self.layout
        notes = {**self.plan.notes(), "stages": lay.stages, "replicas": lay.replicas,
                 "microbatches": lay.microbatches, "schedule": lay.schedule,
                 "batch_per_replica": self.local_batch,
                 "microbatch_size": micro_split(self.local_batch, lay.microbatches)[1],
                 "bubble_theory": round(lay.bubble_theory(), 4),
                 "bubble_theory_flops": round(
                     bubble_for_shares(self.plan.stage_shares(), lay.microbatches), 4)}
        return {"batch_size": self.batch_size, "samples_per_epoch": self.samples_per_epoch,
                "flops_per_sample": self.flops, "notes": notes}

    def train_epoch(self, epoch: int) -> EpochStats:
        return self._train(lambda: self._epoch(epoch))

    def epoch_parts(self, wanted: int) -> int:
        """Up to ``wanted`` parts of whole global steps (an epoch of fewer steps: one each)."""
        from parabench.torch.loop import epoch_steps

        return max(1, min(wanted, epoch_steps(self.n, self.batch_size)))

    def train_part(self, epoch: int, part: int, parts: int) -> EpochStats:
        """Global steps :func:`~parabench.torch.loop.part_span` of epoch ``epoch``."""
        from parabench.torch.loop import part_span

        span = part_span(self.n, self.batch_size, part, parts)
        return self._train(lambda: self._epoch(epoch, span))

    def train_window(self, window: int, steps: int) -> EpochStats:
        """``steps`` global batches of :func:`~parabench.torch.loop.window_order`."""
        from parabench.torch.loop import window_order

        order = window_order(self.n, self.config.training_seed, window, steps * self.batch_size)
        return self._train(lambda: self._run(order))

    def _train(self, run: Callable[[], int]) -> EpochStats:
        """``run`` (returns the samples this replica trained) timed between barriers."""
        self.spans.reset()
        self.loss_sums: list[torch.Tensor] = []
        self.served = 0  # counted by _step where the targets are served (the last stage)
        samples, seconds = self.ctx.timed(run)
        seconds -= self.trace_s  # the trace's digest is not training
        components = self.components(seconds)
        if not self.reports:  # the last stage reports the loss and counts the samples
            return EpochStats(seconds=seconds, loss=0.0, samples=0, components=components,
                              served=0)
        import torch

        loss = float(torch.stack(self.loss_sums).sum().item()) / samples
        return EpochStats(seconds=seconds, loss=loss, samples=samples, components=components,
                          served=self.served)

    def components(self, seconds: float) -> dict[str, float]:
        """The epoch's exclusive components; ``idle`` the rest, P2P waits included."""
        t = self.spans.seconds()
        names = ("data", "forward", "backward", "optimizer", "communication")
        parts = {name: t.get(name, 0.0) for name in names}
        self.notes["p2p_wait_s"] = round(t.get("p2p", 0.0), 6)
        return {**parts, "idle": max(0.0, seconds - sum(parts.values()))}

    def state_dict(self) -> dict[str, Any]:
        """The whole model's weights on every rank: each stage's from replica 0 (collective)."""
        current = self.whole_state()
        mine = ({n: current[n].detach().cpu().clone() for n in self.owned}
                if self.replica == 0 else {})
        full = {k: v.detach().cpu().clone() for k, v in current.items()}
        for part in self.ctx.all_gather(mine):
            full.update(part)
        return full

    def trace(self) -> dict[str, Any] | None:
        return self.trace_piece

    def digest(self) -> dict[str, Any] | None:
        """The whole model's weight digest on rank 0 (``state_dict`` is a collective)."""
        from parabench.torch.loop import weight_digest

        state = self.state_dict()
        return weight_digest(state) if self.ctx.rank == 0 else None

    def evaluate(self) -> float | None:
        from parabench.torch.loop import predict

        state = self.state_dict()
        if self.ctx.rank != 0:
            return None
        model = copy.deepcopy(self.model).cpu()
        model.load_state_dict(state)
        with self.case.evaluating():  # apart from training's GPU peak
            outputs = predict(model.to(self.device), self.x_test)
        return self.workload.score(outputs, self.y_test)

    def seen(self, epoch: int) -> list[int]:
        return self.shard(epoch).tolist()

    def extra_notes(self) -> dict[str, Any]:
        return dict(self.notes)

    def peak_gpu_mb(self) -> float | None:
        return self.case.peak_gpu_mb()
