"""A pre-started case's pool ranks forked from its zygote (parabench.core.rankfork): they are
the case's children, run with the pool's thread budget, form the process group, report a
killed rank as a spawned one does, and are listed for the runner's sampler."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from parabench.core import rankfork
from parabench.envinfo import THREAD_VARS

pytestmark = pytest.mark.cpu

CASE = textwrap.dedent("""
    import json, os, signal, sys, types
    import psutil
    import torch                      # a pre-started case has torch imported already

    class Sum:                        # defined before the copy: a rank is a copy of the zygote
        def __init__(self, ctx):
            self.ctx = ctx
        def allsum(self, x):
            import torch.distributed as dist
            t = torch.tensor([float(x + self.ctx.rank)])
            dist.all_reduce(t)
            mm = float((torch.ones(300, 300) @ torch.ones(300, 300)).sum())
            return {"sum": t.item(), "pid": os.getpid(), "ppid": os.getppid(),
                    "threads": torch.get_num_threads(), "mm": mm,
                    "sigterm": signal.getsignal(signal.SIGTERM) == signal.SIG_DFL}


    if __name__ == "__main__":  # a spawned rank imports this file too
        from parabench.core import rankfork
        signal.signal(signal.SIGTERM, lambda *_: None)  # the case's own (execute.die_with_runner)
        rankfork.start_if_asked(types.SimpleNamespace(device="cpu"))
        torch.set_num_threads(2)
        torch.ones(500, 500) @ torch.ones(500, 500)   # the case runs OpenMP before its pool starts
        from parabench.core.pool import WorkerError, WorkerPool

        if os.environ.get("KILL_ZYGOTE"):  # killed from outside while it waited
            zygote = rankfork._zygote
            os.kill(zygote.pid, signal.SIGKILL)
            while psutil.Process(zygote.pid).status() != psutil.STATUS_ZOMBIE:
                pass
            if os.environ["KILL_ZYGOTE"] == "unseen":  # taken for alive: the fork itself fails
                type(zygote).alive = lambda self: True

        out = {}
        with WorkerPool(2, program=Sum, threads=1, timeout_s=120, grace_s=1.0) as pool:
            out["forked"] = pool.forked
            out["replies"] = pool.call("allsum", x=1)
            out["children"] = [p.pid for p in psutil.Process().children()]
            out["listed"] = {k: sorted(v) for k, v in rankfork.read_record(
                __import__("pathlib").Path(os.environ[rankfork.ENV])).items()}
            out["zygote_alive"] = any(
                psutil.pid_exists(z) and psutil.Process(z).status() != psutil.STATUS_ZOMBIE
                for z in out["listed"]["zygote"])
            os.kill(pool.pids[1], signal.SIGKILL)
            try:
                pool.call("allsum", x=1)
            except WorkerError as err:
                out["killed"] = str(err)
            out["left"] = [p.pid for p in psutil.Process().children()]
        out["second_forked"] = rankfork.take(backend="gloo", device="cpu", threads=1) is not None
        print(json.dumps(out))
""")


def _run(tmp_path: Path, **env: str) -> dict:
    script = tmp_path / "case.py"
    script.write_text(CASE)
    listing = tmp_path / "ranks"
    full = {**os.environ, rankfork.ENV: str(listing), **dict.fromkeys(THREAD_VARS, "1"), **env}
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          env=full, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_forked_ranks_are_the_case_s_children_form_the_group_and_report_a_kill(
        tmp_path: Path) -> None:
    out = _run(tmp_path)
    assert out["forked"] is True
    replies = out["replies"]
    assert [r["sum"] for r in replies] == [3.0, 3.0]  # (1+0) + (1+1) on both ranks
    assert all(r["threads"] == 1 for r in replies)  # the pool's budget, not the case's 2
    assert all(r["mm"] == 300.0 * 300 * 300 for r in replies)  # OpenMP works in a forked rank
    assert all(r["sigterm"] for r in replies)  # not the case's handler: a spawned rank's
    ranks = sorted(r["pid"] for r in replies)
    assert sorted(out["children"]) == ranks  # the case's children; the zygote has exited
    assert {r["ppid"] for r in replies} == {out["children"] and replies[0]["ppid"]}
    assert out["listed"]["rank"] == ranks and len(out["listed"]["zygote"]) == 1
    assert out["zygote_alive"] is False
    assert "rank 1 died (exit -9, SIGKILL)" in out["killed"]
    assert out["left"] == []  # the other rank was taken down, not left in its collective
    assert out["second_forked"] is False  # one copy, one pool: a second one would spawn


def test_without_the_listing_or_with_other_thread_settings_the_ranks_spawn(
        tmp_path: Path) -> None:
    out = _run(tmp_path, **{rankfork.ENV: ""})
    assert out["forked"] is False and out["listed"]["rank"] == []
    out = _run(tmp_path, **dict.fromkeys(THREAD_VARS, "2"))  # the copy imported with 2
    assert out["forked"] is False and out["listed"]["rank"] == []


@pytest.mark.parametrize("death", ["seen", "unseen"])
def test_a_zygote_killed_before_the_pool_starts_leaves_spawned_ranks(
        tmp_path: Path, death: str) -> None:
    """A zygote that died while it waited (seen dead when the pool takes it, or only when the
    first rank's fork fails) is not the case's end: the ranks spawn and the pool works."""
    out = _run(tmp_path, KILL_ZYGOTE=death)
    assert out["forked"] is False and out["listed"]["rank"] == []
    assert [r["sum"] for r in out["replies"]] == [3.0, 3.0]
    assert all(r["threads"] == 1 for r in out["replies"])
    assert "rank 1 died (exit -9, SIGKILL)" in out["killed"]


def test_the_listing_reads_back_what_was_recorded(tmp_path: Path) -> None:
    listing = tmp_path / "ranks"
    rankfork.record(listing, "zygote", 11)
    rankfork.record(listing, "rank", 12)
    rankfork.record(listing, "rank", 13)
    listing.write_text(listing.read_text() + "rank 1")  # a line being written: not yet whole
    assert rankfork.read_record(listing) == {"zygote": {11}, "rank": {12, 13, 1}}
    assert rankfork.read_record(tmp_path / "none") == {"zygote": set(), "rank": set()}
