"""Multi-process torch machinery shared by the distributed methods (ddp, fsdp, pipeline, ...).

Usage::

    from parabench.distributed import RankContext, WorkerError, WorkerPool

* :mod:`~parabench.distributed.pool` - :class:`WorkerPool`: persistent rank processes for
  one case, commands over pipes, failures as :class:`WorkerError`.
* :mod:`~parabench.distributed.rank` - :class:`RankContext` (rank, device, barrier, ``timed``)
  and the ``init_process_group`` set-up shared with torchrun.

Nothing here imports torch at module level, so ``parabench list`` stays light.
"""

from parabench.distributed.pool import WorkerError, WorkerPool, WorkerTimeout
from parabench.distributed.rank import RankContext

__all__ = ["RankContext", "WorkerError", "WorkerPool", "WorkerTimeout"]
