"""A pool's ranks each run on their own cores (``rank_cores``), where they fit.

Ranks in lockstep wait for the slowest; unpinned on 2 cores, mlp ddp x2's speed windows varied
by up to +-17 % (see :func:`parabench.core.rank.rank_cores` for the measured figures).
"""

from __future__ import annotations

import os
import threading

import pytest

from parabench.core.pool import NO_GROUP, WorkerPool
from parabench.core.rank import PIN_VAR, RankContext, rank_cores

pytestmark = pytest.mark.skipif(not hasattr(os, "sched_setaffinity"),
                                reason="no CPU affinity on this OS")


class Affinity:
    """Reports the cores this rank, and a thread it starts, may run on."""

    def __init__(self, ctx: RankContext) -> None:
        self.ctx = ctx

    def cores(self) -> tuple[list[int], list[int]]:
        seen: list[int] = []
        worker = threading.Thread(target=lambda: seen.extend(sorted(os.sched_getaffinity(0))))
        worker.start()
        worker.join()
        return sorted(os.sched_getaffinity(0)), seen


def test_blocks_of_the_allowed_cores_one_per_rank(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(PIN_VAR, raising=False)
    assert rank_cores(2, 1, {0, 1}) == [[0], [1]]
    assert rank_cores(2, 2, {0, 1, 2, 3}) == [[0, 1], [2, 3]]
    assert rank_cores(2, 1, {4, 7, 9}) == [[4], [7]]  # a cpuset: its own core numbers
    assert rank_cores(3, 1, {0, 1}) is None  # oversubscribed: the OS shares them out
    assert rank_cores(2, 2, {0, 1, 2}) is None
    assert rank_cores(1, 2, {0, 1}) is None  # one rank: nothing to keep apart
    monkeypatch.setenv(PIN_VAR, "off")
    assert rank_cores(2, 1, {0, 1}) is None


def _pool_cores() -> tuple[list[list[int] | None], list[tuple[list[int], list[int]]]]:
    with WorkerPool(2, Affinity, backend=NO_GROUP, threads=1, timeout_s=120) as pool:
        return [info["cores"] for info in pool.rank_info], pool.call("cores")


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 cores to pin 2 ranks")
def test_two_ranks_run_on_two_different_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(PIN_VAR, raising=False)
    reported, seen = _pool_cores()
    allowed = sorted(os.sched_getaffinity(0))
    assert reported == [[allowed[0]], [allowed[1]]]
    for cores, (rank_sees, thread_sees) in zip(reported, seen, strict=True):
        assert rank_sees == thread_sees == cores  # threads started later inherit the pin


def test_pin_off_leaves_every_rank_all_the_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PIN_VAR, "off")
    reported, seen = _pool_cores()
    allowed = sorted(os.sched_getaffinity(0))
    assert reported == [allowed, allowed]
    assert all(rank == thread == allowed for rank, thread in seen)
