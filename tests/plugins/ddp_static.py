"""``ddp_static``: a new data-parallel method in one file - DDP with ``static_graph=True``.

Usage (a test plugin, loaded like every plugin)::

    PYTHONPATH=tests/plugins PARABENCH_PLUGINS=ddp_static \\
        parabench run --workload mlp --method serial,ddp_static --workers 2 --threads 1

The proof of the data-parallel recipe: a rank program that says which parallelizer it applies
(:func:`parabench.torch.parallelize.apply_ddp` with DDP's ``static_graph``), a session that
names the program, and a method with a name. Everything else - the case builder, global-batch
sharding, the loop, the clock, the ``check`` - is the family's
(:mod:`parabench.torch.data_parallel`). A static graph only lets DDP skip re-discovering the
used parameters each step: the arithmetic is ddp's, so parity with serial is exact.
"""

from __future__ import annotations

from typing import Any, ClassVar

from parabench.method import Session
from parabench.methods.ddp import DDPProgram
from parabench.registry import methods
from parabench.torch.data_parallel import DataParallelMethod
from parabench.torch.session import DistributedTorchSession


class StaticDDPProgram(DDPProgram):
    ddp_options: ClassVar[dict[str, Any]] = {"static_graph": True}


class StaticDDPSession(DistributedTorchSession):
    program: ClassVar[str | type] = StaticDDPProgram


@methods.register
class StaticDDP(DataParallelMethod):
    name: ClassVar[str] = "ddp_static"
    description: ClassVar[str] = "DDP with static_graph=True (test plugin: one-file method)"
    session_class: ClassVar[type[Session]] = StaticDDPSession
