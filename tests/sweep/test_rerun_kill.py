"""``parabench compare --rerun`` killed by SIGKILL: its processes die with it, and the next
rerun removes the worktrees it left (slow: a clone, two rerun commands, about half a minute on
2 cores).

Run: ``pytest tests/sweep/test_rerun_kill.py -m slow``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from test_rerun import ROOT, git

pytestmark = [pytest.mark.cpu, pytest.mark.slow]
#: one round of the cheapest case: what is killed is the mechanics, not a measurement
SELECTION = ["--rounds", "1", "--workload", "mlp", "--method", "serial", "--profile", "tiny",
             "--epochs", "1"]


def _case_started(rerun: subprocess.Popen[str], timeout_s: float) -> list[psutil.Process]:
    """The rerun's process tree once a round's case process is running in it."""
    parent = psutil.Process(rerun.pid)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and rerun.poll() is None:
        try:
            tree = parent.children(recursive=True)
            if any("parabench.case.execute" in " ".join(p.cmdline()) for p in tree):
                return tree
        except psutil.Error:
            pass
        time.sleep(0.02)
    raise AssertionError(f"no case process started within {timeout_s} s (rerun exit "
                         f"{rerun.poll()})")


def test_a_killed_rerun_takes_its_processes_along_and_leaves_trees_the_next_removes(
        tmp_path: Path) -> None:
    clone, tmp, out_dir = tmp_path / "clone", tmp_path / "tmp", tmp_path / "rounds"
    tmp.mkdir()
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    # this checkout's CLI drives it; its temporary trees go where the test can see them all
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "TMPDIR": str(tmp)}
    rerun = subprocess.Popen(
        [sys.executable, "-m", "parabench", "compare", "--rerun", "HEAD", "HEAD", *SELECTION,
         "--out-dir", str(out_dir)],
        cwd=clone, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True)
    tree: list[psutil.Process] = []
    try:
        tree = _case_started(rerun, timeout_s=180)
        assert len(git(clone, "worktree", "list").splitlines()) == 3  # base and new
        rerun.send_signal(signal.SIGKILL)
        rerun.wait()
        _, alive = psutil.wait_procs(tree, timeout=15)
        assert not alive, f"still running after the rerun was killed: {alive}"
    finally:
        for proc in tree:  # whatever outlived a failed check must not outlive the test
            try:
                proc.kill()
            except psutil.Error:
                pass
    left = sorted(tmp.glob(f"parabench-rerun-trees-{rerun.pid}-*"))
    assert left, "the killed rerun's trees should still be there for the next one to remove"

    # the next rerun sweeps them before its own checkouts; an unknown workload then ends it
    # in its preflight, which is all this needs
    done = subprocess.run(
        [sys.executable, "-m", "parabench", "compare", "--rerun", "HEAD", "--workload",
         "no-such-workload"], cwd=clone, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "removed 2 stale rerun checkouts of a killed run" in done.stderr, done.stderr
    assert str(left[0]) in done.stderr
    assert len(git(clone, "worktree", "list").splitlines()) == 1, git(clone, "worktree", "list")
    assert not list(tmp.glob("parabench-rerun-trees-*"))
