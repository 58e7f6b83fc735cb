"""``pipeline``: ``torch.distributed.pipelining`` stages in separate processes, micro-batched.

Usage::

    parabench run --workload cnn --method pipeline --workers 2 --microbatches 4 \\
        --schedule gpipe,1f1b
    parabench run --workload cnn --method pipeline --workers 2 --device cuda    # one GPU each

One rank process per stage (``workers`` = stages; the ``stages`` option, if given, must say
the same), kept in a persistent :class:`~parabench.case.pool.WorkerPool`: spawn and
rendezvous are ``startup_s``. The workload's ``sequential()`` view is cut into FLOP-balanced
contiguous stages, each a manual ``PipelineStage``, driven by ``ScheduleGPipe`` (``gpipe``,
default) or ``Schedule1F1B`` (``1f1b``) over ``microbatches`` (default 4) equal micro-batches
of every global batch. gloo on CPU, NCCL on CUDA. Details, gradient scaling and the timing of
each component: :mod:`parabench.torch.pipeline`.

Parity is exact: micro-batch losses are weighted by their share of the batch and gradients
accumulated unscaled, so each optimizer step equals ``serial``'s on the whole global batch.

Bubble: per epoch, ``components["idle"]`` is the **mean over stages** of the time a stage
computed nothing (epoch - data - forward - backward - optimizer on that rank), so
``idle / epoch`` = sum of idle / (stages x epoch) is the measured bubble fraction, recorded
per epoch in ``bubble_fraction`` (and per rank in ``idle_fraction_per_rank``) next to the
ideal pipeline's ``bubble_theory`` = (p - 1) / (m + p - 1), and ``bubble_theory_flops``, the
same fill-drain model with the stages' FLOP shares instead of equal stages (imbalance
included). The measured figure also holds P2P waits and the schedule's own overhead.
Other components fold as in every distributed method: the slowest rank's value.

Workloads without a sequential view, or with fewer cut points than stages, are skipped with
the reason. Not supported (skipped with the reason): ``--batch-size auto``, DataLoader knobs
(micro-batches are index-selected from the tensors), fp16 (use bf16).
"""

from __future__ import annotations

import dataclasses
import statistics
from abc import abstractmethod
from typing import Any, ClassVar

from parabench import hardware
from parabench.config import RunConfig
from parabench.method import EpochStats, Method, Session
from parabench.registry import methods
from parabench.torch.session import DistributedTorchSession, fold_epochs
from parabench.workload import TorchWorkload, Workload


class PipelineSession(DistributedTorchSession):
    program: ClassVar[str] = "parabench.torch.pipeline:PipelineProgram"

    def __init__(self, workload: Workload, config: RunConfig, stages: int) -> None:
        super().__init__(workload, config)
        self.stages = stages

    def program_args(self) -> dict[str, Any]:
        return {**super().program_args(), "stages": self.stages}

    def train_epoch(self, epoch: int) -> EpochStats:
        per_rank: list[EpochStats] = self.pool.call("train_epoch", epoch=epoch)
        return fold_stage_epochs(per_rank, self.notes)

    def evaluate(self) -> float:
        value = super().evaluate()
        for notes in self.pool.call("extra_notes"):
            self.notes.update(notes)
        return value


def fold_stage_epochs(per_rank: list[EpochStats], notes: dict[str, Any]) -> EpochStats:
    """:func:`fold_epochs`, with ``idle`` the mean over ranks and the bubble in ``notes``."""
    folded = fold_epochs(per_rank)
    idle = statistics.fmean(s.components["idle"] for s in per_rank)
    notes.setdefault("bubble_fraction", []).append(round(idle / folded.seconds, 4))
    notes["idle_fraction_per_rank"] = [round(s.components["idle"] / s.seconds, 4)
                                       for s in per_rank]
    return dataclasses.replace(folded, components={**folded.components, "idle": idle})


class StagedMethod(Method):
    """Shared checks of the methods built on :mod:`parabench.torch.pipeline`."""

    devices: ClassVar[tuple[str, ...]] = ("cpu", "cuda")
    families: ClassVar[frozenset[str]] = frozenset({"torch"})
    parity: ClassVar[str] = "exact"
    # micro-batches are sliced from tensors: no DataLoader knobs (num_workers, pin_memory)
    options: ClassVar[frozenset[str]] = frozenset(
        {"precision", "stages", "microbatches", "schedule"}
    )

    @abstractmethod
    def stages_for(self, config: RunConfig) -> int | str:
        """The stage count of this case, or why the worker count does not fit."""

    def check(self, workload: Workload, config: RunConfig) -> str | None:
        from parabench.torch.data_parallel import global_batch
        from parabench.torch.stages import DEFAULT_MICROBATCHES, sequential_reason

        if (reason := super().check(workload, config)) is not None:
            return reason
        stages = self.stages_for(config)
        if isinstance(stages, str):
            return stages
        if config.device == "cuda" and config.workers > (gpus := hardware.cuda_device_count()):
            return f"{self.name} uses one GPU per rank: {config.workers} asked, {gpus} here"
        if (reason := _unsupported(config)) is not None:
            return f"{self.name}: {reason}"
        assert isinstance(workload, TorchWorkload)
        if (reason := sequential_reason(workload, stages)) is not None:
            return reason
        replicas = config.workers // stages
        micro = config.option("microbatches", DEFAULT_MICROBATCHES)
        total = int(global_batch(workload, config))
        if total % (replicas * micro):
            return (f"global batch {total} does not split into {replicas} replica(s) x "
                    f"{micro} equal micro-batches")
        if config.option("schedule") == "1f1b" and micro < stages:
            return f"1f1b needs at least as many micro-batches as stages ({micro} < {stages})"
        return None

    def session(self, workload: Workload, config: RunConfig) -> Session:
        stages = self.stages_for(config)
        assert isinstance(stages, int), stages
        return PipelineSession(workload, config, stages)


def _unsupported(config: RunConfig) -> str | None:
    if config.batch_size == "auto":
        return "--batch-size auto is not supported (stages would have to agree on a probe)"
    if config.option("num_workers", 0) or config.option("pin_memory", False):
        return "DataLoader knobs are not supported (micro-batches are sliced from tensors)"
    if config.option("precision") == "fp16":
        return "fp16 needs a gradient scaler across stages; use --precision bf16"
    return None


@methods.register
class Pipeline(StagedMethod):
    name: ClassVar[str] = "pipeline"
    description: ClassVar[str] = (
        "torch.distributed.pipelining: one stage per process, micro-batches, gpipe / 1f1b"
    )

    def stages_for(self, config: RunConfig) -> int | str:
        stages = config.option("stages")
        if stages is not None and stages != config.workers:
            return (f"pipeline runs one stage per worker: stages={stages} but "
                    f"{config.workers} workers")
        return config.workers
