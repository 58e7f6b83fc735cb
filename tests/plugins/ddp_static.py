"""``ddp_static``: a new data-parallel method in one file - DDP with ``static_graph=True``.

Usage (a test plugin, loaded like every plugin)::

    PYTHONPATH=tests/plugins PARABENCH_PLUGINS=ddp_static \\
        parabench run --workload mlp --method serial,ddp_static --workers 2 --threads 1

The proof of the data-parallel recipe: a rank program that says which parallelizer it applies
(:func:`parabench.torch.parallelize.apply_ddp` with DDP's ``static_graph``), a session that
names the program, and a method with a name, its start-up guess for the dry run and its own
option (``--bucket-cap-mb``, declared with its default; the registry makes it known).
Everything else - the case builder, global-batch sharding, the loop, the clock, the
``check``, the DataLoader options - is the family's (:mod:`parabench.torch.data_parallel`).
A static graph only lets DDP skip re-discovering the used parameters each step, and buckets
only group the all-reduces: the arithmetic is ddp's, so parity with serial is exact.
"""

from __future__ import annotations

from typing import Any, ClassVar

from parabench.config import OptionSpec
from parabench.method import Session
from parabench.registry import methods
from parabench.torch.data_parallel import DataParallelMethod, DataParallelProgram
from parabench.torch.parallelize import apply_ddp
from parabench.torch.session import DistributedTorchSession


class StaticDDPProgram(DataParallelProgram):
    def wrap(self, model: Any) -> Any:
        buckets = self.config.option("bucket_cap_mb")  # the default declared below
        module, self.comm = apply_ddp(model, self.device, static_graph=True,
                                      bucket_cap_mb=buckets)
        return module


class StaticDDPSession(DistributedTorchSession):
    program: ClassVar[str | type] = StaticDDPProgram


@methods.register
class StaticDDP(DataParallelMethod):
    name: ClassVar[str] = "ddp_static"
    description: ClassVar[str] = "DDP with static_graph=True (test plugin: one-file method)"
    session_class: ClassVar[type[Session]] = StaticDDPSession
    startup_guess_s: ClassVar[float | None] = 7.0  # ddp's: the same gloo group of processes
    options: ClassVar[dict[str, OptionSpec]] = {
        **DataParallelMethod.options,  # precision, num_workers, pin_memory
        "bucket_cap_mb": OptionSpec(int, "DDP gradient bucket size in MiB", minimum=1,
                                    default=25),
    }
