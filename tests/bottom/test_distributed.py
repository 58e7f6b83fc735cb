"""The worker pool: commands and replies, failures that must surface, and nothing left running.

The rank programs below live in this module; the spawned ranks import it by name (pytest puts
``tests/`` on ``sys.path`` and the children inherit it).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from parabench.core.pool import WorkerError, WorkerPool, WorkerTimeout
from parabench.core.rank import RankContext

pytestmark = [pytest.mark.cpu, pytest.mark.torch]


class Probe:
    """A rank program with one method per behaviour under test."""

    def __init__(self, ctx: RankContext, scale: int = 1) -> None:
        self.ctx, self.scale = ctx, scale

    def work(self, x: int) -> int:
        return x * self.scale + self.ctx.rank

    def info(self) -> dict:
        import torch

        return {"pid": os.getpid(), "ppid": os.getppid(), "threads": torch.get_num_threads(),
                "omp": os.environ.get("OMP_NUM_THREADS"), "rank": self.ctx.rank}

    def all_reduce(self, value: float) -> float:
        import torch
        import torch.distributed as dist

        t = torch.tensor([value * (self.ctx.rank + 1)])
        dist.all_reduce(t)
        return float(t.item())

    def timed_sleep(self, seconds: float) -> float:
        _, took = self.ctx.timed(lambda: time.sleep(seconds * self.ctx.rank))
        return took

    def fail_on(self, rank: int) -> str:
        if self.ctx.rank == rank:
            raise ValueError(f"planned failure on rank {rank}")
        return "fine"

    def fail_then_collective(self, rank: int) -> None:
        """``rank`` raises; the others enter a barrier it will never join."""
        if self.ctx.rank == rank:
            raise ValueError("failed before the collective")
        self.ctx.barrier()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)

    def sleep_then_barrier(self, seconds: float) -> None:
        if self.ctx.rank == 1:
            time.sleep(seconds)
        self.ctx.barrier()


class BrokenInit:
    def __init__(self, ctx: RankContext) -> None:
        raise RuntimeError(f"cannot build on rank {ctx.rank}")


def _gone(pids: list[int], within_s: float = 10.0) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        alive = [p for p in pids if psutil.pid_exists(p)
                 and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
        if not alive:
            return True
        time.sleep(0.1)
    return False


@pytest.fixture(scope="module")
def pool() -> Iterator[WorkerPool]:
    with WorkerPool(2, program=Probe, args={"scale": 10}, threads=1, timeout_s=120) as p:
        yield p


def test_call_returns_one_reply_per_rank_in_rank_order(pool: WorkerPool) -> None:
    assert pool.call("work", x=1) == [10, 11]
    assert pool.call("work", x=3) == [30, 31]
    assert pool.startup_s is not None and pool.startup_s > 0


def test_ranks_are_children_with_the_thread_budget_set_before_start(pool: WorkerPool) -> None:
    infos = pool.call("info")
    assert [i["rank"] for i in infos] == [0, 1]
    assert sorted(i["pid"] for i in infos) == sorted(pool.pids)
    assert all(i["ppid"] == os.getpid() for i in infos)
    assert all(i["threads"] == 1 and i["omp"] == "1" for i in infos)
    assert [r["threads"] for r in pool.rank_info] == [1, 1]


def test_ranks_form_a_process_group(pool: WorkerPool) -> None:
    assert pool.call("all_reduce", value=2.0) == [6.0, 6.0]  # 2*1 + 2*2 on both ranks


def test_timed_region_spans_the_slowest_rank(pool: WorkerPool) -> None:
    took = pool.call("timed_sleep", seconds=0.3)
    # rank 0 does nothing but waits at the second barrier: only rank 1 measures the sleep
    assert took[1] >= 0.3 and took[0] < took[1]


def test_rank_exception_carries_its_traceback_and_pool_survives(pool: WorkerPool) -> None:
    with pytest.raises(WorkerError) as info:
        pool.call("fail_on", rank=1)
    assert "rank 1 raised" in str(info.value)
    assert "ValueError: planned failure on rank 1" in info.value.tracebacks[1]
    assert "fail_on" in info.value.tracebacks[1]  # the real traceback, with the frame
    assert pool.running and pool.call("work", x=0) == [0, 1]


def test_rank_exception_before_a_collective_tears_the_pool_down() -> None:
    p = WorkerPool(2, program=Probe, threads=1, timeout_s=120, grace_s=1.0).start()
    pids = p.pids
    t0 = time.monotonic()
    with pytest.raises(WorkerError, match="rank 0 raised.*did not answer"):
        p.call("fail_then_collective", rank=0)
    assert time.monotonic() - t0 < 30
    assert not p.running and _gone(pids)
    p.close()  # still safe


def test_killed_rank_is_reported_promptly_and_nothing_is_left() -> None:
    p = WorkerPool(2, program=Probe, threads=1, timeout_s=300).start()
    pids = p.pids
    # rank 1 sleeps while rank 0 waits in a barrier: the kill lands mid-collective
    threading.Timer(1.0, os.kill, args=(pids[1], signal.SIGKILL)).start()
    t0 = time.monotonic()
    with pytest.raises(WorkerError, match=r"rank 1 died \(exit -9, SIGKILL\)"):
        p.call("sleep_then_barrier", seconds=120)
    assert time.monotonic() - t0 < 20  # not the 300 s timeout, not the 120 s sleep
    assert _gone(pids)
    with pytest.raises(WorkerError, match="closed"):
        p.call("work", x=1)


def test_call_past_the_timeout_raises_and_shuts_down() -> None:
    p = WorkerPool(1, program=Probe, threads=1, timeout_s=120).start()
    pids = p.pids
    p.timeout_s = 1.0
    with pytest.raises(WorkerTimeout, match="exceeded the pool timeout"):
        p.call("sleep", seconds=60)
    assert _gone(pids)


def test_failing_constructor_fails_start_and_leaves_nothing() -> None:
    p = WorkerPool(1, program=BrokenInit, threads=1, timeout_s=120, grace_s=1.0)
    with pytest.raises(WorkerError, match="RuntimeError: cannot build on rank"):
        p.start()
    assert _gone(p.pids)


def test_close_is_idempotent_and_graceful() -> None:
    p = WorkerPool(2, program=Probe, threads=1, timeout_s=120).start()
    pids = p.pids
    p.close()
    procs = p._procs
    assert [proc.exitcode for proc in procs] == [0, 0]  # they left on the command, not killed
    p.close()
    assert _gone(pids, within_s=1.0)


def test_ranks_die_with_the_parent(tmp_path: Path) -> None:
    script = tmp_path / "parent.py"
    script.write_text(textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from parabench.core.pool import WorkerPool
        from test_distributed import Probe
        if __name__ == "__main__":
            pool = WorkerPool(2, program=Probe, threads=1, timeout_s=120).start()
            print(*pool.pids, flush=True)
            time.sleep(600)
    """))
    parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout is not None
        pids = [int(p) for p in parent.stdout.readline().split()]
        assert len(pids) == 2 and all(psutil.pid_exists(p) for p in pids)
        parent.kill()  # SIGKILL: no atexit, no close(); only the ranks' own guards act
        parent.wait()
        assert _gone(pids, within_s=10.0)
    finally:
        parent.kill()
