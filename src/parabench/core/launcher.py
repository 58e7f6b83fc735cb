"""Where a case's ranks come from: a :class:`~parabench.core.pool.WorkerPool` spawned here
(:data:`POOL`, the default) or the processes ``torchrun`` started
(:class:`parabench.torch.launch.TorchrunLauncher`).

Usage::

    from parabench.case.execute import execute
    from parabench.case.lifecycle import CaseLifecycle
    from parabench.torch.launch import TorchrunLauncher

    result = execute(config, launcher=POOL)      # what `parabench run` does: a spawned pool
    lifecycle = CaseLifecycle(config=config, workload=workloads.get(config.workload),
                              method=methods.get(config.method),
                              launcher=TorchrunLauncher())   # what each torchrun rank runs
    active_launcher().local_ranks(config.workers)   # inside Method.check: ranks on this node
    # a session starts its ranks with session.launcher.group(Program, args, config): a pool
    # spawned then, or torchrun's group of the ranks already running

The lifecycle hands its launcher to the session (``session.launcher``, like ``session.clock``)
and makes it the :func:`active_launcher` while it asks ``Method.check``, whose signature has
no room for it. Nothing is read from the environment, so a process the case spawns does not
inherit the choice by accident.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from parabench.config import RunConfig


class Launcher(ABC):
    """Makes the group of rank processes a multi-process session runs its program on."""

    name: ClassVar[str]

    def local_ranks(self, workers: int) -> int:
        """How many of the case's ``workers`` ranks run on this machine."""
        return workers

    @abstractmethod
    def group(self, program: str | type, args: dict[str, Any], config: RunConfig) -> Any:
        """A not-yet-started group (``start``, ``call``, ``rank_info``, ``close``)."""


class PoolLauncher(Launcher):
    """``config.workers`` ranks spawned by this process: the single-machine default."""

    name: ClassVar[str] = "pool"

    def group(self, program: str | type, args: dict[str, Any], config: RunConfig) -> Any:
        from parabench.core.pool import WorkerPool

        return WorkerPool(
            config.workers, program, args, device=config.device, threads=config.threads,
            timeout_s=config.timeout_s,
        )


POOL = PoolLauncher()

_active: ContextVar[Launcher] = ContextVar("parabench_launcher", default=POOL)


def active_launcher() -> Launcher:
    """The launcher of the case being checked (:data:`POOL` outside a lifecycle)."""
    return _active.get()


@contextmanager
def launching(launcher: Launcher) -> Iterator[None]:
    """``launcher`` is the :func:`active_launcher` inside the block."""
    token = _active.set(launcher)
    try:
        yield
    finally:
        _active.reset(token)
