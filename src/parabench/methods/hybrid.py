"""``hybrid``: pipeline stages x data-parallel replicas (seed 002's MP-DDP), one process each.

Usage::

    parabench run --workload cnn --method hybrid --workers 4 --stages 2 --microbatches 2
    # 2 stages x 2 replicas; rank r is stage r % 2 of replica r // 2

``workers`` = ``stages`` (option, default 2) x replicas. Each replica is a ``pipeline`` (the
same rank program, :mod:`parabench.torch.pipeline`, GPipe or 1F1B over
micro-batches); the data is sharded across replicas exactly as ``ddp`` shards it (global batch
``B``, ``B / replicas`` per replica, replica ``j`` takes ``order[j::replicas]`` of serial's
seeded order), and after every step each stage's gradients are all-reduced (one flat SUM,
the micro-batch losses already carry the ``1 / B`` weights) within a process group of that
stage's copies. The update is serial's on the global batch: ``parity = "exact"``.

Components: as ``pipeline`` (the slowest rank's; the mean over ranks of idle / epoch is the
bubble fraction, in ``bubble_fraction``), with ``communication`` the measured gradient
all-reduce (host clock on CPU, CUDA events on the GPU); P2P waits are part of ``idle``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from parabench.config import OptionSpec, RunConfig
from parabench.registry import methods
from parabench.torch.options import STAGES
from parabench.torch.staged import StagedMethod


@methods.register
class Hybrid(StagedMethod):
    name: ClassVar[str] = "hybrid"
    startup_guess_s: ClassVar[float | None] = 8.0
    description: ClassVar[str] = (
        "pipeline stages x data-parallel replicas (gradients all-reduced per stage)"
    )
    options: ClassVar[Mapping[str, OptionSpec]] = {**StagedMethod.options,
                                                   "stages": STAGES.with_default(2)}

    def stages_for(self, config: RunConfig) -> int | str:
        stages = config.option("stages")
        if config.workers % stages:
            return (f"hybrid runs stages x replicas ranks: {config.workers} workers is not a "
                    f"multiple of {stages} stages")
        return stages
