"""The staged family: ``pipeline`` and ``hybrid`` share this session and these checks.

Usage (a staged method is a name and its stage count)::

    @methods.register
    class MyStaged(StagedMethod):
        name = "my_staged"

        def stages_for(self, config):      # the stage count, or why the workers do not fit
            return config.workers

    session = PipelineSession(workload, config, stages=2)   # ranks: parabench.torch.pipeline

The rank program is :class:`parabench.torch.pipeline.PipelineProgram`; the session folds its
ranks' epochs like every distributed session (the slowest rank's components, which partition
the epoch) and notes the bubble: the mean over stages of their idle fraction.
"""

from __future__ import annotations

import statistics
from abc import abstractmethod
from collections.abc import Mapping
from typing import Any, ClassVar

from parabench import hardware
from parabench.config import OptionSpec, RunConfig
from parabench.core.records import Grading
from parabench.method import EpochStats, Method, Session
from parabench.torch.options import KNOBS, STAGES, TORCH_OPTIONS
from parabench.torch.pipeline import PipelineProgram
from parabench.torch.session import DistributedTorchSession, fold_epochs
from parabench.torch.stages import Layout
from parabench.workload import TorchWorkload, Workload


class PipelineSession(DistributedTorchSession):
    program: ClassVar[str | type] = PipelineProgram

    def __init__(self, workload: Workload, config: RunConfig, stages: int) -> None:
        super().__init__(workload, config)
        self.stages = stages

    def program_args(self) -> dict[str, Any]:
        return {**super().program_args(), "stages": self.stages}

    def fold(self, per_rank: list[EpochStats], window: bool = False) -> EpochStats:
        """:func:`fold_stage_epochs`; a speed window's bubble goes to its own note, so the
        epochs' ``bubble_fraction`` stays one figure per epoch (per part of an epoch in time
        to target mode, which trains epochs in parts)."""
        if not window:
            return fold_stage_epochs(per_rank, self.notes)
        notes: dict[str, Any] = {}
        stats = fold_stage_epochs(per_rank, notes)
        self.notes.setdefault("window_bubble_fraction", []).extend(notes["bubble_fraction"])
        return stats

    def evaluate(self) -> float:
        value = super().evaluate()
        per_rank = self.pool.call("extra_notes")
        # the last epoch's P2P waits (a part of each rank's idle), one figure per rank
        self.notes["p2p_wait_s_per_rank"] = [n.pop("p2p_wait_s", None) for n in per_rank]
        for notes in per_rank:
            self.notes.update(notes)
        return value


def fold_stage_epochs(per_rank: list[EpochStats], notes: dict[str, Any]) -> EpochStats:
    """:func:`fold_epochs`, and the bubble in ``notes``: the stages' mean idle fraction.

    The folded components stay the slowest rank's (they partition the epoch's seconds); a
    mean idle put in their place would no longer add up with that rank's other components.
    """
    folded = fold_epochs(per_rank)
    idle = statistics.fmean(s.components["idle"] for s in per_rank)
    notes.setdefault("bubble_fraction", []).append(round(idle / folded.seconds, 4))
    notes["idle_fraction_per_rank"] = [round(s.components["idle"] / s.seconds, 4)
                                       for s in per_rank]
    return folded


class StagedMethod(Method):
    """Shared checks of the methods built on :mod:`parabench.torch.pipeline`."""

    devices: ClassVar[tuple[str, ...]] = ("cpu", "cuda")
    families: ClassVar[frozenset[str]] = frozenset({"torch"})
    parity: ClassVar[str] = "exact"
    #: the stages' point-to-point sends need contiguous activations (gloo and NCCL alike)
    no_channels_last: ClassVar[str | None] = (
        "the stages' sends and receives need contiguous activations")
    # micro-batches are sliced from tensors: no DataLoader knobs (num_workers, pin_memory)
    options: ClassVar[Mapping[str, OptionSpec]] = {
        "precision": TORCH_OPTIONS["precision"],
        **KNOBS,
        "stages": STAGES.with_default(None),  # pipeline: one per worker; hybrid declares 2
        "microbatches": OptionSpec(int, "pipeline micro-batches per batch", minimum=1,
                                   default=4),
        "schedule": OptionSpec(str, "pipeline schedule", choices=("gpipe", "1f1b"),
                               default="gpipe"),
    }

    @abstractmethod
    def stages_for(self, config: RunConfig) -> int | str:
        """The stage count of this case, or why the worker count does not fit."""

    def layout(self, config: RunConfig, stages: int) -> Layout:
        """Stages x data replicas and the micro-batching (pipeline_tp: tensor ranks too)."""
        return Layout.of(config, stages)

    def grading(self, workload: Workload, config: RunConfig) -> Grading:
        """Statistical where micro-batches (x replicas) change the mathematics (BatchNorm, a
        token-mean loss): :func:`~parabench.torch.data_parallel.split_batch_grading`."""
        from parabench.torch.data_parallel import split_batch_grading

        stages = self.stages_for(config)
        if isinstance(stages, str):  # the case does not run: the declared kind
            return super().grading(workload, config)
        layout = self.layout(config, stages)
        return (split_batch_grading(workload, layout.replicas * layout.microbatches,
                                    "each micro-batch")
                or super().grading(workload, config))

    def check(self, workload: Workload, config: RunConfig) -> str | None:
        from parabench.torch.data_parallel import global_batch
        from parabench.torch.stages import sequential_reason

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
        replicas = self.layout(config, stages).replicas
        micro = config.option("microbatches")
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
    if config.option("num_workers") or config.option("pin_memory"):
        return "DataLoader knobs are not supported (micro-batches are sliced from tensors)"
    if config.option("precision") == "fp16":
        return "fp16 needs a gradient scaler across stages; use --precision bf16"
    return None
