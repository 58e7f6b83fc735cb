"""``fsdp_tp``: 2-D parallelism, FSDP2 over data replicas x tensor parallelism inside each.

Usage::

    parabench run --workload gpt --method fsdp_tp --workers 4 --tp 2 --oversubscribe \\
        --profile tiny       # DeviceMesh ("dp", "tp") = (2, 2); 4 ranks on 2 cores: correctness

``workers`` = dp x ``tp`` (option, default 2). The ranks form a 2-D ``DeviceMesh`` ("dp",
"tp"), tensor ranks innermost: the workload's plan splits each layer over the "tp" dimension
(:mod:`parabench.torch.tensor_parallel`), then ``fully_shard`` on the "dp" sub-mesh shards
those parameters over the replicas (every parameter-owning top-level child a unit, as
``fsdp``). Replica ``j`` trains on ``order[j::dp]`` of serial's seeded order, ``B / dp`` per
step, and FSDP averages the replicas' gradients: serial's step on the global batch ``B``,
``parity = "exact"``. Known limit: FSDP2 with reentrant activation checkpointing fails
(not used here).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from parabench.config import OptionSpec, RunConfig
from parabench.method import Session
from parabench.methods.fsdp import NHWC_REFUSED
from parabench.registry import methods
from parabench.torch.degrees import ParallelDegrees
from parabench.torch.parallelize import apply_fsdp
from parabench.torch.tensor_parallel import (
    TP,
    TensorParallelMethod,
    TensorParallelProgram,
    TensorParallelSession,
)

if TYPE_CHECKING:
    import torch


class FSDPTPProgram(TensorParallelProgram):
    def parallelize(self, model: torch.nn.Module, mesh: Any) -> torch.nn.Module:
        return apply_fsdp(super().parallelize(model, mesh), mesh["dp"])


class FSDPTPSession(TensorParallelSession):
    program: ClassVar[str | type] = FSDPTPProgram


@methods.register
class FSDPTensorParallel(TensorParallelMethod):
    name: ClassVar[str] = "fsdp_tp"
    startup_guess_s: ClassVar[float | None] = 10.0
    description: ClassVar[str] = "2-D: FSDP2 over data replicas x tensor parallel within each"
    options: ClassVar[Mapping[str, OptionSpec]] = {**TensorParallelMethod.options,
                                                   "tp": TP.with_default(2)}
    session_class: ClassVar[type[Session]] = FSDPTPSession
    no_channels_last: ClassVar[str | None] = NHWC_REFUSED

    def degrees(self, config: RunConfig) -> ParallelDegrees:
        return ParallelDegrees.of(config.workers, tp=config.option("tp"))
