"""``pipeline``: ``torch.distributed.pipelining`` stages in separate processes, micro-batched.

Usage::

    parabench run --workload cnn --method pipeline --workers 2 --microbatches 4 \\
        --schedule gpipe,1f1b
    parabench run --workload cnn --method pipeline --workers 2 --device cuda    # one GPU each

One rank process per stage (``workers`` = stages; the ``stages`` option, if given, must say
the same), kept in a persistent :class:`~parabench.core.pool.WorkerPool`: spawn and
rendezvous are ``startup_s``. The workload's ``sequential()`` view is cut into FLOP-balanced
contiguous stages, each a manual ``PipelineStage``, driven by ``ScheduleGPipe`` (``gpipe``,
default) or ``Schedule1F1B`` (``1f1b``) over ``microbatches`` (default 4) equal micro-batches
of every global batch. gloo on CPU, NCCL on CUDA. Details, gradient scaling and the timing of
each component: :mod:`parabench.torch.pipeline`.

Parity is exact: micro-batch losses are weighted by their share of the batch and gradients
accumulated unscaled, so each optimizer step equals ``serial``'s on the whole global batch.

Bubble: a stage's ``idle`` is the time it computed nothing (epoch - data - forward -
backward - optimizer - communication on that rank); the **mean over stages** of idle / epoch
is the measured bubble fraction, recorded
per epoch in ``bubble_fraction`` (and per rank in ``idle_fraction_per_rank``) next to the
ideal pipeline's ``bubble_theory`` = (p - 1) / (m + p - 1), and ``bubble_theory_flops``, the
same fill-drain model with the stages' FLOP shares instead of equal stages (imbalance
included). The measured figure also holds P2P waits and the schedule's own overhead.
Components fold as in every distributed method: the slowest rank's, which sum to the epoch.

Workloads without a sequential view, or with fewer cut points than stages, are skipped with
the reason. Not supported (skipped with the reason): ``--batch-size auto``, DataLoader knobs
(micro-batches are index-selected from the tensors), fp16 (use bf16).
"""

from __future__ import annotations

from typing import ClassVar

from parabench.config import RunConfig
from parabench.registry import methods
from parabench.torch.staged import StagedMethod


@methods.register
class Pipeline(StagedMethod):
    name: ClassVar[str] = "pipeline"
    startup_guess_s: ClassVar[float | None] = 7.0
    description: ClassVar[str] = (
        "torch.distributed.pipelining: one stage per process, micro-batches, gpipe / 1f1b"
    )

    def stages_for(self, config: RunConfig) -> int | str:
        stages = config.option("stages")
        if stages is not None and stages != config.workers:
            return (f"pipeline runs one stage per worker: stages={stages} but "
                    f"{config.workers} workers")
        return config.workers
