from __future__ import annotations

import os
import subprocess
import sys

import psutil
import pytest

from parabench.case.result import Result
from parabench.core.measure import pss_source, tree, tree_cpu_seconds, tree_memory
from parabench.core.sampler import TreeSampler

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


SHARED_MB = 128
#: a parent maps SHARED_MB of anonymous *shared* memory, writes every page, forks two
#: children that read every page, and all three wait on stdin: the pages are in each one's RSS
SHARED = f"""
import mmap, os, sys
size = {SHARED_MB} * 2**20
buf = mmap.mmap(-1, size)  # MAP_SHARED | MAP_ANONYMOUS: the children map the same pages
for i in range(0, size, 4096):
    buf[i] = 1
for _ in range(2):
    if os.fork() == 0:
        assert sum(buf[i] for i in range(0, size, 4096)) == size // 4096
        os.write(1, b"ready\\n")  # one write: the two children's lines cannot interleave
        sys.stdin.read()
        os._exit(0)
sys.stdin.read()
os.wait(); os.wait()
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PSS is read from /proc")
def test_pss_counts_a_mapping_shared_by_the_workers_once() -> None:
    proc = subprocess.Popen([sys.executable, "-c", SHARED], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        for _ in range(2):  # both children have touched every page
            assert proc.stdout.readline().startswith("ready")
        sampler = TreeSampler(proc.pid)
        sampler.sample()  # one instant; the first sample always reads PSS
        counted = tree_memory(tree(proc.pid))
    finally:
        proc.communicate(input="", timeout=60)
    assert counted.pss_read == 3 and counted.rss_fallback == 0, counted
    assert 0 < counted.pss_file < counted.pss  # the interpreters' files; the mapping is not one
    assert sampler.pss_source == "pss" and sampler.pss_counts == {"pss": 3, "rss": 0}
    # RSS counts the mapping in all three processes, PSS once: the interpreters themselves
    # take a few MB each, far below the margins
    pss, rss = sampler.peak_pss_mb, sampler.peak_rss_mb
    assert pss is not None
    assert SHARED_MB * 0.95 < pss < SHARED_MB * 1.5, (pss, rss)
    assert rss > SHARED_MB * 2.9, (pss, rss)
    fields = sampler.memory_fields(self_peak_mb=0.0)
    assert fields["peak_pss_mb"] == round(pss, 1) and fields["peak_rss_mb"] == round(rss, 1)
    assert 0 < fields["extra"]["peak_pss_file_mb"] < SHARED_MB * 0.5


def test_pss_source_names_what_the_sum_is_made_of() -> None:
    assert pss_source(3, 0) == "pss"
    assert pss_source(0, 3) == "rss"
    assert pss_source(2, 1) == "mixed"
    assert pss_source(0, 0) == "rss"  # nothing read: there is no PSS figure


def test_peak_mb_prefers_pss_and_falls_back_to_rss() -> None:
    base = {"workload": "mlp", "method": "serial", "device": "cpu", "workers": 1,
            "threads_per_worker": 1, "batch_size": 64, "epochs": 1, "profile": "tiny",
            "seed": 0, "repeat": 0, "status": "ok"}
    assert Result(**base, peak_rss_mb=900.0, peak_pss_mb=500.0).peak_mb == 500.0
    assert Result(**base, peak_rss_mb=900.0).peak_mb == 900.0  # results from before PSS


def test_torchrun_sums_rank_pss_peaks_with_rss_where_pss_was_unreadable() -> None:
    from parabench.cli.torchrun import summed_pss

    both = {"rank_max_rss_mb": [700.0, 650.0], "rank_peak_pss_mb": [400.0, 380.5]}
    assert summed_pss(both) == (780.5, {"peak_pss_source": "pss",
                                        "peak_pss_processes": {"pss": 2, "rss": 0}})
    one = {"rank_max_rss_mb": [700.0, 650.0], "rank_peak_pss_mb": [400.0, None]}
    assert summed_pss(one) == (1050.0, {"peak_pss_source": "mixed",
                                        "peak_pss_processes": {"pss": 1, "rss": 1}})
    none = {"rank_max_rss_mb": [700.0, 650.0], "rank_peak_pss_mb": [None, None]}
    assert summed_pss(none) == (None, {"peak_pss_source": "rss"})
    assert summed_pss({"rank_max_rss_mb": [700.0]}) == (None, {"peak_pss_source": "rss"})


def test_case_memory_counts_file_pages_once_whatever_runs_beside() -> None:
    """Libraries are file-backed and PSS splits them with every process on the machine, also
    outside the case; the case figure counts them once, whole (the largest process's RssFile)."""
    from parabench.core.measure import TreeMemory

    # two ranks: 200 MB anonymous each, libtorch (400 MB file RSS) split 4 ways machine-wide
    alone = TreeMemory(rss=1200 << 20, pss=(200 + 200 + 200 + 200) << 20, pss_read=2,
                       pss_file=400 << 20, file_rss_max=400 << 20)
    crowded = TreeMemory(rss=1200 << 20, pss=(200 + 100 + 200 + 100) << 20, pss_read=2,
                         pss_file=200 << 20, file_rss_max=400 << 20)
    assert alone.case_bytes == crowded.case_bytes == (200 + 200 + 400) << 20
    assert TreeMemory(pss=5, pss_read=1).case_bytes == 5  # no split reported: plain PSS


def test_rss_is_never_below_what_the_later_pss_read_saw(monkeypatch: pytest.MonkeyPatch) -> None:
    """RSS is read first, PSS after: a process that grew in between must not show PSS > RSS
    (a training case's peak PSS once read 785.4 MB against an RSS peak of 783.1 MB)."""
    import os

    import psutil

    from parabench.core import measure

    me = psutil.Process(os.getpid())
    rss = me.memory_info().rss
    grown = (rss + 50 * 2**20, 10 * 2**20, 30 * 2**20)  # PSS, its file part, file RSS
    monkeypatch.setattr(measure, "_pss", lambda p, family=None: grown)
    m = tree_memory([me])
    assert m.case_bytes == rss + 70 * 2**20
    assert m.rss >= m.case_bytes


COW = """
import os, sys
block = bytearray(os.urandom(1 << 20)) * 64     # 64 MB of anonymous pages, written
r, w = os.pipe()
go_r, go_w = os.pipe()
pid = os.fork()
if pid == 0:                                    # the child shares them until it writes
    os.read(go_r, 1)
    block[::4096] = b"x" * len(block[::4096])   # one byte a page: each page copied
    os.write(w, b"w")
    os.read(go_r, 1)
    os._exit(0)
print(pid, flush=True)
sys.stdin.readline()
os.write(go_w, b"g")
os.read(r, 1)
print("written", flush=True)
sys.stdin.readline()
os.write(go_w, b"g")
os.waitpid(pid, 0)
"""


def test_the_shared_part_of_anonymous_pss_is_only_what_is_still_shared() -> None:
    """A process's share of anonymous pages it still shares with a forked child: a page the
    child wrote is its own copy, so it leaves the shared part (the whole Pss_Anon was taken
    once: a forked case read heavier than a fresh one)."""
    from parabench.core.measure import _rollup, _shared_part

    def shared_anon_share(pid: int) -> int | None:
        kib = _rollup(pid)
        return _shared_part(kib) if "Pss_Anon" in kib else None

    proc = subprocess.Popen([sys.executable, "-c", COW], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdin is not None and proc.stdout is not None
    try:
        proc.stdout.readline()  # forked
        shared = shared_anon_share(proc.pid)
        proc.stdin.write("\n")
        proc.stdin.flush()
        assert proc.stdout.readline().strip() == "written"
        after = shared_anon_share(proc.pid)
        proc.stdin.write("\n")
        proc.stdin.flush()
    finally:
        proc.wait(timeout=60)
    assert shared is not None and after is not None
    assert shared >= 30 * 2**20  # half of the 64 MB both map
    assert shared - after >= 28 * 2**20, (shared / 2**20, after / 2**20)  # no longer shared


def test_a_forked_family_reads_as_if_each_member_had_started_fresh() -> None:
    """TreeSampler(forked=True): the case and its forked ranks (members) count every anonymous
    page they share through the fork in full, as each would hold its own copy started fresh;
    a process the case forks itself (a DataLoader worker, forked in a fresh run too) counts
    only its private pages, so a page it shares counts once. Once the child has written the
    pages, they are its own copies and nothing is added."""
    from parabench.core.measure import tree_memory

    proc = subprocess.Popen([sys.executable, "-c", COW], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdin is not None and proc.stdout is not None
    try:
        child = int(proc.stdout.readline())
        procs = [psutil.Process(proc.pid), psutil.Process(child)]
        shared = [tree_memory(procs, family).pss for family in (None, {proc.pid, child},
                                                                {proc.pid})]
        proc.stdin.write("\n")
        proc.stdin.flush()
        assert proc.stdout.readline().strip() == "written"
        written = [tree_memory(procs, family).pss for family in (None, {proc.pid, child})]
        proc.stdin.write("\n")
        proc.stdin.flush()
    finally:
        proc.wait(timeout=60)
    plain, members, worker = (m / 2**20 for m in shared)
    assert members - plain >= 62, (plain, members)  # the child's 64 MB copy, as if fresh
    assert abs(worker - plain) <= 6, (plain, worker)  # a forked worker: each page once
    assert abs(written[1] - written[0]) / 2**20 <= 8, written  # copies: nothing shared left


def test_a_slow_memory_read_leaves_no_stretch_without_cpu_points(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The runner reads a case's cores over its speed windows from its CPU points; a PSS read
    that takes long (a few hundred ms on a busy machine) once left a window span unreadable,
    and the planted cores bug read "ok" in CI. The CPU points keep coming while it reads."""
    import time

    from parabench.core import sampler as sampler_module
    from parabench.core.measure import TreeMemory

    def slow_tree_memory(*args: object, **kwargs: object) -> TreeMemory:
        time.sleep(0.8)
        return tree_memory(*args, **kwargs)

    monkeypatch.setattr(sampler_module, "tree_memory", slow_tree_memory)
    code = "import time\nt = time.process_time()\nwhile time.process_time() - t < 3: pass\n"
    proc = subprocess.Popen([sys.executable, "-c", code])
    try:
        with TreeSampler(proc.pid, pss_budget=0.5) as sampler:
            t0 = time.perf_counter()
            time.sleep(2.0)
    finally:
        proc.kill()
        proc.wait()
    spans = [[t0 + 0.1 * i, t0 + 0.1 * i + 0.3] for i in range(1, 16)]
    readings = [sampler.cores_over(span, max_gap_s=0.2) for span in spans]
    assert None not in readings, readings
    assert sampler.peak_pss_mb is not None  # the slow reads did happen


def test_a_memory_only_sampler_keeps_the_peak_and_no_cpu_points() -> None:
    """``cpu=False`` (a torchrun rank reading its own peak): no CPU thread in the process it
    measures, so no cores over a span, and the memory peak as before."""
    import threading
    import time

    with TreeSampler(os.getpid(), cpu=False) as sampler:
        names = {t.name for t in threading.enumerate()}
        t0 = time.perf_counter()
        time.sleep(0.3)
    assert "parabench-cpu-sampler" not in names and "parabench-sampler" in names
    assert sampler.cores_over([t0, t0 + 0.2]) is None
    assert sampler.peak_rss_mb > 0
