from __future__ import annotations

import subprocess
import sys

import pytest

from parabench.case.measure import TreeSampler, tree_cpu_seconds

pytestmark = pytest.mark.cpu

ALLOC = (
    "import time; b = bytearray({mb} * 2**20); b[::4096] = b'x' * len(b[::4096]); "
    "time.sleep(1.5)"
)


def test_peak_is_summed_over_the_whole_process_tree() -> None:
    # a parent that holds 100 MB and starts a child that holds 150 MB at the same time
    code = (
        "import subprocess, sys, time\n"
        f"b = bytearray(100 * 2**20); b[::4096] = b'x' * len(b[::4096])\n"
        f"p = subprocess.Popen([sys.executable, '-c', {ALLOC.format(mb=150)!r}])\n"
        "p.wait()\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code])
    with TreeSampler(proc.pid, interval_s=0.02) as sampler:
        proc.wait()
    assert sampler.peak_rss_mb > 250, sampler.peak_rss_mb
    assert len(sampler.seen) >= 2  # saw the child too


def test_cpu_seconds_of_this_process_grow_with_work() -> None:
    import os

    before = tree_cpu_seconds(os.getpid())
    sum(i * i for i in range(2_000_000))
    assert tree_cpu_seconds(os.getpid()) - before > 0.01
