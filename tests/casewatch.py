"""Run the real CLI and watch the case's processes while it runs: the sockets they listen
on, a kill at the right moment, and whatever is left of them afterwards.

Usage (from tests; ``tests/`` is on the path like ``datafiles``)::

    from casewatch import kill_engine_process, watch_run

    run = watch_run(["--workload", "mlp", "--method", "ddp", "--profile", "tiny"], out=path)
    run.rc, run.stderr, run.listeners      # (pid, name, ip, port) of every LISTEN socket seen
    run.listeners_of("ddp")                # those of the ddp cases' processes (a run of several)
    run = watch_run(args, out=path, strike=kill_engine_process(lambda cmd: "java" in cmd[0]))
    run.struck                             # "pid 1234: java ..." once the target was killed
    assert not run.leftovers()             # nothing of the case's process group survives
    wait_for("the case to start", lambda: pidfile.read_text())   # its value, once truthy

The runner starts each case in its own session (process group = the case's pid), so "nothing
left" is checked by process group and by every pid seen during the run (with its create
time, so a recycled pid is not mistaken for a survivor).
"""

from __future__ import annotations

import ipaddress
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import psutil

#: called with the run's live processes on every poll; returns what it killed, or None
Strike = Callable[[list[psutil.Process]], str | None]


@dataclass(kw_only=True)
class Watched:
    rc: int
    stdout: str
    stderr: str
    listeners: set[tuple[int, str, str, int]] = field(default_factory=set)
    #: pid -> create_time of every process of the run seen (runner, case, engines)
    seen: dict[int, float] = field(default_factory=dict)
    case_groups: set[int] = field(default_factory=set)
    #: case pid (= its process group) -> the method it runs; listener pid -> its group
    case_methods: dict[int, str] = field(default_factory=dict)
    listener_groups: dict[int, int] = field(default_factory=dict)
    struck: str | None = None

    def listeners_of(self, method: str) -> set[tuple[int, str, str, int]]:
        """The listeners seen in the processes of ``method``'s cases (a run of several)."""
        return {item for item in self.listeners
                if self.case_methods.get(self.listener_groups.get(item[0], -1)) == method}

    def leftovers(self, wait_s: float = 15.0) -> list[str]:
        """Processes of the run still alive after ``wait_s``: by case group or seen pid."""
        deadline = time.monotonic() + wait_s
        while True:
            left = []
            for proc in psutil.process_iter(["pid", "create_time", "status", "cmdline"]):
                try:
                    ours = self.seen.get(proc.pid) == proc.info["create_time"]
                    grouped = os.getpgid(proc.pid) in self.case_groups
                except (ProcessLookupError, psutil.Error):
                    continue
                if (ours or grouped) and proc.info["status"] != psutil.STATUS_ZOMBIE:
                    left.append(f"{proc.pid}: {' '.join(proc.info['cmdline'] or [])[:120]}")
            if not left or time.monotonic() > deadline:
                return left
            time.sleep(0.2)


def wait_for(what: str, check: Callable[[], object], timeout: float = 240) -> object:
    """``check()``'s first truthy value, polled every 0.1 s; AssertionError naming ``what``
    after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := check():
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def is_loopback(ip: str) -> bool:
    addr = ipaddress.ip_address(ip.split("%")[0])
    mapped = getattr(addr, "ipv4_mapped", None)  # ::ffff:127.0.0.1 (Java's dual-stack sockets)
    return addr.is_loopback or (mapped is not None and mapped.is_loopback)


def watch_run(args: list[str], *, out: Path, strike: Strike | None = None,
              timeout_s: float = 900.0, poll_s: float = 0.1) -> Watched:
    """``parabench run ARGS --out OUT`` to completion, watching its process tree."""
    logs = out.parent / f".{out.name}.watch"
    logs.mkdir(exist_ok=True)
    with (logs / "stdout").open("w+") as so, (logs / "stderr").open("w+") as se:
        proc = subprocess.Popen(
            [sys.executable, "-m", "parabench", "run", *args, "--out", str(out)],
            stdout=so, stderr=se, stdin=subprocess.DEVNULL, text=True,
        )
        watched = Watched(rc=-1, stdout="", stderr="")
        deadline = time.monotonic() + timeout_s
        try:
            while proc.poll() is None:
                if time.monotonic() > deadline:
                    raise AssertionError(f"parabench run {' '.join(args)} ran past {timeout_s}s")
                tree = _tree(proc.pid)
                _record(watched, tree)
                if strike is not None and watched.struck is None:
                    watched.struck = strike(tree)
                time.sleep(poll_s)
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
        so.seek(0)
        se.seek(0)
        watched.rc, watched.stdout, watched.stderr = proc.returncode, so.read(), se.read()
    return watched


CASE_MODULE = "parabench.case.execute"


def command_line(proc: psutil.Process) -> list[str]:
    """``proc``'s command line; empty for a process that has ended (a zombie not yet reaped
    by its parent has none to read: a scan of a tree can meet one at any moment)."""
    try:
        return proc.cmdline()
    except psutil.Error:
        return []


def case_command(proc: psutil.Process) -> list[str] | None:
    """A case process's ``[python, -m, parabench.case.execute, CONFIG_JSON, RESULT]``, or None
    for any other process. A case forked from a pre-started interpreter
    (:mod:`parabench.core.prestart`) shows that command as one title, which psutil splits at
    spaces: joined and split again (the config is JSON between the module and the result
    path, which has no spaces), both read the same."""
    title = " ".join(part for part in command_line(proc) if part)
    head, sep, rest = title.partition(f" -m {CASE_MODULE} ")
    if not sep:
        return None
    config, _, result = rest.rpartition(" ")
    return [head, "-m", CASE_MODULE, config, result]


def _tree(pid: int) -> list[psutil.Process]:
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.Error:
        return []


def _record(watched: Watched, tree: list[psutil.Process]) -> None:
    for proc in tree:
        try:
            watched.seen.setdefault(proc.pid, proc.create_time())
            cmd = case_command(proc)
            if cmd is not None:
                watched.case_groups.add(proc.pid)  # the runner gives each case its own group
                watched.case_methods[proc.pid] = json.loads(cmd[-2])["method"]  # CONFIG_JSON
            for conn in proc.net_connections(kind="inet"):
                if conn.status == psutil.CONN_LISTEN:
                    watched.listeners.add((proc.pid, proc.name(), conn.laddr.ip, conn.laddr.port))
                    watched.listener_groups.setdefault(proc.pid, os.getpgid(proc.pid))
        except (psutil.Error, ProcessLookupError):
            pass


def case_epoch_started(tree: list[psutil.Process], epoch: int = 1) -> bool:
    """True once the case process has printed "epoch EPOCH/" (its engine is up and working).
    The case is found by the log the runner gave its stdout (``case-*.out``), not by its
    command line: Dask's in-process scheduler retitles the process it runs in where
    setproctitle is installed and it sees another ``__DASK_PARENT_PID``."""
    for proc in tree:
        try:
            log = Path(os.readlink(f"/proc/{proc.pid}/fd/1"))
        except OSError:
            continue
        if log.name.startswith("case-") and log.suffix == ".out":
            try:
                return f"epoch {epoch}/" in log.read_text()
            except OSError:
                return False
    return False


def kill_engine_process(match: Callable[[list[str]], bool], *, after_epoch: int = 1) -> Strike:
    """A strike that SIGKILLs the first process whose command line ``match``es, once the case
    has finished epoch ``after_epoch`` (so the kill lands in steady state, not start-up)."""

    def strike(tree: list[psutil.Process]) -> str | None:
        if not case_epoch_started(tree, after_epoch):
            return None
        for proc in tree:
            try:
                cmd = proc.cmdline()
                if match(cmd):
                    proc.kill()
                    return f"pid {proc.pid}: {' '.join(cmd)[:100]}"
            except psutil.Error:
                continue
        return None

    return strike
