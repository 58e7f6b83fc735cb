"""``tp``: tensor parallelism (Megatron-style column / row-parallel layers), every rank one shard.

Usage::

    parabench run --workload gpt --method tp --workers 2 --threads 1 --profile tiny
    parabench run --workload gpt --method tp --workers 2 --sequence-parallel on --profile tiny

All ``workers`` ranks form one tensor-parallel group (the ``tp`` option, if given, must say
the same; ``fsdp_tp`` splits workers into data replicas x tensor ranks): each holds a slice of
every column- and row-parallel layer the workload's plan names (gpt: ``heads / workers``
attention heads and MLP columns per rank) and every rank sees the **whole global batch**
``B``, so each optimizer step is serial's on ``B``: ``parity = "exact"``, graded on the
trajectory and the weights gathered whole. One rank reports the samples, loss and trace.
Workloads without a plan (``TorchWorkload.tp_plan``) are skipped with the reason. How the
plan is applied, sequence parallelism, timing: :mod:`parabench.torch.tensor_parallel`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from parabench.config import OptionSpec, RunConfig
from parabench.registry import methods
from parabench.torch.degrees import ParallelDegrees
from parabench.torch.tensor_parallel import TP, TensorParallelMethod


@methods.register
class TensorParallel(TensorParallelMethod):
    name: ClassVar[str] = "tp"
    startup_guess_s: ClassVar[float | None] = 8.0
    description: ClassVar[str] = (
        "tensor parallel: column / row-parallel layers over all ranks (DTensor), whole batch"
    )
    options: ClassVar[Mapping[str, OptionSpec]] = {**TensorParallelMethod.options,
                                                   "tp": TP.with_default(None)}

    def degrees(self, config: RunConfig) -> ParallelDegrees:
        tp = config.option("tp") or config.workers  # every worker tensor-parallel
        return ParallelDegrees.of(config.workers, tp=tp, dp=1)
