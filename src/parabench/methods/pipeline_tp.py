"""``pipeline_tp``: pipeline stages whose layers are tensor-parallel (pp x tp, or 3-D pp x dp x tp).

Usage::

    parabench run --workload gpt --method pipeline_tp --workers 4 --oversubscribe \\
        --profile tiny                         # 2 stages x 2 tensor ranks (defaults)
    parabench run --workload gpt --method pipeline_tp --workers 8 --stages 2 --tp 2 \\
        --oversubscribe --profile tiny         # 3-D: 2 stages x 2 replicas x 2 tensor ranks

``workers`` = ``stages`` (default 2) x data replicas x ``tp`` (default 2), validated once
(:class:`~parabench.torch.degrees.ParallelDegrees`: a count that does not split, or a ``tp``
that does not divide heads / width / MLP width, is skipped with what is wrong). Each pipeline
stage is ``pipeline``'s (FLOP-balanced cut of the sequential view, GPipe or 1F1B over
micro-batches, micro-batch losses weighted by their share of the batch), its layers split by
the workload's tensor-parallel plan over its "tp" ranks; replicas shard the data as ``ddp``
and all-reduce each stage's gradients as ``hybrid``. Every step is serial's on the global
batch: ``parity = "exact"``. Rank program: :mod:`parabench.torch.pipeline_tp`. Oversubscribed
on CPU it checks correctness; its timings say little about GPUs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from parabench.config import ConfigError, OptionSpec, RunConfig
from parabench.method import Session
from parabench.registry import methods
from parabench.torch.degrees import ParallelDegrees
from parabench.torch.options import STAGES
from parabench.torch.staged import StagedMethod
from parabench.torch.stages import Layout
from parabench.torch.tensor_parallel import SEQUENCE_PARALLEL, TP, plan_reason
from parabench.workload import TorchWorkload, Workload


@methods.register
class PipelineTP(StagedMethod):
    name: ClassVar[str] = "pipeline_tp"
    startup_guess_s: ClassVar[float | None] = 10.0
    description: ClassVar[str] = "pipeline stages x (data replicas) x tensor-parallel layers"
    options: ClassVar[Mapping[str, OptionSpec]] = {
        **StagedMethod.options, "stages": STAGES.with_default(2), "tp": TP.with_default(2),
        "sequence_parallel": SEQUENCE_PARALLEL}

    def degrees(self, config: RunConfig) -> ParallelDegrees:
        return ParallelDegrees.of(config.workers, tp=config.option("tp"),
                                  pp=config.option("stages"))

    def stages_for(self, config: RunConfig) -> int | str:
        try:
            return self.degrees(config).pp
        except ConfigError as exc:
            return f"{self.name}: {exc}"

    def layout(self, config: RunConfig, stages: int) -> Layout:
        from parabench.torch.pipeline_tp import MeshLayout

        return MeshLayout.of_degrees(config, self.degrees(config))

    def check(self, workload: Workload, config: RunConfig) -> str | None:
        if (reason := super().check(workload, config)) is not None:
            return reason
        if config.option("sequence_parallel"):
            return f"{self.name}: sequence parallelism across pipeline stages is not supported"
        assert isinstance(workload, TorchWorkload)
        return plan_reason(self.name, workload, config, self.degrees(config))

    def session(self, workload: Workload, config: RunConfig) -> Session:
        from parabench.torch.pipeline_tp import TensorPipelineSession

        return TensorPipelineSession(workload, config, self.degrees(config))
