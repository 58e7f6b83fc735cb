"""Pre-started interpreters (parabench.core.prestart): a forked case behaves as ``python -m``
would, in its own session, with its own environment; one server per import environment; none
outlives the sweep or the runner."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from parabench.core import prestart
from parabench.envinfo import THREAD_VARS

pytestmark = pytest.mark.cpu

PROBE = textwrap.dedent("""
    import json, os, sys
    import torch
    print(json.dumps({"argv": sys.argv[1:], "cwd": os.getcwd(), "name": __name__,
                      "probe": os.environ.get("PROBE"), "sid": os.getsid(0), "pid": os.getpid(),
                      "threads": torch.get_num_threads(), "path0": sys.path[0],
                      "parent": os.environ.get("PARABENCH_RUNNER_PID")}))
    print("to stderr", file=sys.stderr)
    if sys.argv[1:2] == ["sleep"]:
        import time
        time.sleep(60)
    sys.exit(int(os.environ.get("PROBE_EXIT", "0")))
""")


@pytest.fixture
def probe_env(tmp_path: Path) -> dict[str, str]:
    """An environment whose PYTHONPATH holds the ``pb_probe`` module."""
    mod = tmp_path / "mods"
    mod.mkdir()
    (mod / "pb_probe.py").write_text(PROBE)
    path = os.pathsep.join(p for p in (str(mod), os.environ.get("PYTHONPATH")) if p)
    return {**os.environ, "PYTHONPATH": path, **dict.fromkeys(THREAD_VARS, "1"),
            prestart.ENV: "1"}


@pytest.fixture(autouse=True)
def opted_in(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pre-starting is the default: a user's ``PARABENCH_PRESTART=0`` must not turn it off here."""
    monkeypatch.delenv(prestart.ENV, raising=False)


def _start(env: dict[str, str], tmp_path: Path, *args: str, **extra: str) -> prestart.Process:
    return prestart.start_process("pb_probe", list(args), env={**env, **extra},
                                  stdout=tmp_path / "out", stderr=tmp_path / "err",
                                  cwd=str(tmp_path))


def test_a_forked_case_runs_the_module_as_python_m_would(probe_env: dict[str, str],
                                                          tmp_path: Path) -> None:
    with prestart.prestarted():
        proc = _start(probe_env, tmp_path, "a", "b c", PROBE="x", PROBE_EXIT="3")
        assert proc.wait(timeout=60) == 3
        assert proc.import_s is not None and proc.import_s > 0  # torch was imported first
        seen = json.loads((tmp_path / "out").read_text())
        server = prestart._servers[prestart.import_key(probe_env)]  # type: ignore[index]
    assert seen["argv"] == ["a", "b c"] and seen["name"] == "__main__"
    assert seen["cwd"] == str(tmp_path) and seen["path0"] == str(tmp_path)
    assert seen["probe"] == "x"  # the case's own environment, not the server's
    assert seen["sid"] == seen["pid"] == proc.pid  # its own session: its group can be killed
    assert seen["parent"] == str(server.proc.pid)  # its watchdog follows the server
    assert (tmp_path / "err").read_text().strip() == "to stderr"
    assert server.proc.poll() is not None  # the sweep's end ended the server


@pytest.mark.slow
def test_one_server_per_import_environment(probe_env: dict[str, str], tmp_path: Path) -> None:
    with prestart.prestarted():
        for threads in ("1", "2", "1"):  # the budget as the runner sets it (worker_env)
            proc = _start(probe_env, tmp_path, PROBE=threads,
                          **dict.fromkeys(THREAD_VARS, threads))
            assert proc.wait(timeout=60) == 0
            seen = json.loads((tmp_path / "out").read_text())
            assert seen["threads"] == int(threads)  # torch loaded with the case's budget
        assert len(prestart._servers or {}) == 2  # a setting read at import: its own server


def test_a_server_ends_with_its_input_without_the_interpreter_s_teardown(
        probe_env: dict[str, str], tmp_path: Path) -> None:
    """Closing the sweep ends its servers at once: a server that imported torch skips the
    interpreter's teardown (about 1 s each, which the runner waited for). An exit handler
    registered at the server's start (sitecustomize) must not run; the server exits 0."""
    site = tmp_path / "site"
    site.mkdir()
    marker = tmp_path / "torn-down"
    (site / "sitecustomize.py").write_text(
        f"import atexit, pathlib\natexit.register(pathlib.Path({str(marker)!r}).touch)\n")
    env = {**probe_env, "PYTHONPATH": os.pathsep.join((str(site), probe_env["PYTHONPATH"]))}
    with prestart.prestarted():
        proc = _start(env, tmp_path)
        assert proc.wait(timeout=60) == 0 and proc.server_pid is not None
        server = next(iter((prestart._servers or {}).values()))
    assert server.proc.returncode == 0
    assert not marker.exists()  # the handler of a normal exit did not run


def test_a_server_launched_early_and_never_used_is_ended_at_once(
        probe_env: dict[str, str]) -> None:
    """A server launched on a guess that no case of the sweep needs is killed while it still
    imports (none imports while a case is timed), and so is one still importing when the run
    stops before its cases (a usage error after planning): neither is waited for."""
    unneeded = {**probe_env, **dict.fromkeys(THREAD_VARS, "2")}
    with prestart.prestarted():
        prestart.launch(unneeded, probe_env)
        guess, used = (prestart._servers or {}).values()
        prestart.prepare(probe_env)  # the sweep's cases need only this one
        assert guess.proc.returncode == -signal.SIGKILL and used.import_s is not None
        assert list((prestart._servers or {}).values()) == [used]
    with prestart.prestarted():
        prestart.launch(probe_env)
        stopped = next(iter((prestart._servers or {}).values()))
    assert stopped.proc.returncode == -signal.SIGKILL  # ended at the block's end, not awaited


@pytest.mark.slow
def test_a_killed_case_reads_as_killed_and_outside_a_sweep_cases_start_plainly(
        probe_env: dict[str, str], tmp_path: Path) -> None:
    with prestart.prestarted():
        proc = _start(probe_env, tmp_path, "sleep")
        with pytest.raises(subprocess.TimeoutExpired):
            proc.wait(timeout=0.5)
        os.killpg(proc.pid, signal.SIGKILL)
        assert proc.wait(timeout=30) == -signal.SIGKILL
    plain = _start(probe_env, tmp_path)
    assert plain.import_s is None and plain.popen is not None and plain.wait(timeout=60) == 0


def test_opting_out_or_asking_for_a_plain_start_starts_plainly(
        probe_env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with prestart.prestarted():  # a case that does not train with torch (isolate.forks)
        proc = prestart.start_process("pb_probe", [], env=probe_env, stdout=tmp_path / "out",
                                      stderr=tmp_path / "err", cwd=str(tmp_path), fork=False)
        assert proc.import_s is None and proc.wait(timeout=60) == 0
        assert prestart._servers == {}  # and no server was started for it
    monkeypatch.setenv(prestart.ENV, "0")
    with prestart.prestarted():
        proc = _start(probe_env, tmp_path)
        assert proc.import_s is None and proc.wait(timeout=60) == 0


LIBRARY_PAGES = textwrap.dedent("""
    import sys
    for name in sys.argv[1].split(","):
        __import__(name)
    status = dict(line.split(":", 1) for line in open("/proc/self/status"))
    print(int(status["RssFile"].split()[0]) // 1024)
""")


def test_a_forked_case_holds_the_library_pages_a_fresh_one_would(
        probe_env: dict[str, str], tmp_path: Path) -> None:
    """The kernel gives a forked child none of the server's file-backed page-table entries:
    without ``populate`` the case's RSS would leave out ~200 MB of torch's libraries."""
    (Path(probe_env["PYTHONPATH"].split(os.pathsep)[0]) / "pb_pages.py").write_text(
        LIBRARY_PAGES)
    modules = ",".join(prestart.PRELOAD)  # what a torch case imports, as the server did

    def file_mb(fork: bool) -> int:
        with prestart.prestarted():
            proc = prestart.start_process("pb_pages", [modules], env=probe_env,
                                          stdout=tmp_path / "out", stderr=tmp_path / "err",
                                          cwd=str(tmp_path), fork=fork)
            assert proc.wait(timeout=120) == 0, (tmp_path / "err").read_text()
            assert (proc.import_s is not None) == fork
        return int((tmp_path / "out").read_text())

    fresh, forked = file_mb(False), file_mb(True)
    assert fresh > 100  # torch's libraries, mapped by the imports
    assert abs(forked - fresh) <= 0.1 * fresh, (forked, fresh)


RUNNER = textwrap.dedent("""
    import os, sys, time
    from pathlib import Path
    from parabench.core import prestart
    tmp = Path(sys.argv[1])
    env = dict(os.environ)
    with prestart.prestarted():
        proc = prestart.start_process("pb_probe", ["sleep"], env=env, stdout=tmp / "out",
                                      stderr=tmp / "err", cwd=str(tmp))
        print(proc.pid, flush=True)
        time.sleep(60)
""")


def test_nothing_outlives_a_runner_killed_outright(probe_env: dict[str, str],
                                                   tmp_path: Path) -> None:
    """SIGKILL of the runner: the server dies with it (PR_SET_PDEATHSIG), and the case with
    the server (its watchdog, parabench.case.execute.die_with_runner, here by hand)."""
    runner = subprocess.Popen([sys.executable, "-c", RUNNER, str(tmp_path)], env=probe_env,
                              stdout=subprocess.PIPE, text=True)
    assert runner.stdout is not None
    case_pid = int(runner.stdout.readline())
    server = psutil.Process(case_pid).parent()
    assert server is not None and server.ppid() == runner.pid
    runner.kill()
    runner.wait()
    deadline = time.monotonic() + 20
    while server.is_running() and server.status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline, "the server outlived its runner"
        time.sleep(0.1)
    os.killpg(case_pid, signal.SIGKILL)  # the probe has no watchdog of its own


def test_a_forked_case_shows_its_own_command_line(probe_env: dict[str, str],
                                                  tmp_path: Path) -> None:
    """ps and psutil show ``python -m MODULE ARGS``, not the server's command."""
    with prestart.prestarted():
        proc = _start(probe_env, tmp_path, "sleep", "x")
        try:
            deadline = time.monotonic() + 30
            while "pb_probe" not in " ".join(cmd := psutil.Process(proc.pid).cmdline()):
                assert time.monotonic() < deadline, cmd
                time.sleep(0.05)
            assert " ".join(cmd).split()[-4:] == ["-m", "pb_probe", "sleep", "x"], cmd
        finally:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)


@pytest.mark.parametrize("advise", [True, False])
def test_populate_maps_the_server_s_library_pages_into_a_forked_child(advise: bool) -> None:
    """Both ways of mapping them in: madvise(MADV_POPULATE_READ), and a read of each page
    where the kernel has no such advice (before Linux 5.14)."""
    import importlib.util

    import torch  # noqa: F401 - the libraries whose pages the child must hold

    path = Path(prestart.__file__).with_name("prestart_server.py")
    spec = importlib.util.spec_from_file_location("pb_prestart_server", path)
    assert spec is not None and spec.loader is not None
    server = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(server)
    runs = server.resident_file_pages()
    assert sum(length for _, length in runs) > 100 * 2**20  # torch's libraries, resident
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: RssFile before and after, then out at once
        def file_kb() -> int:
            status = dict(line.split(":", 1) for line in open("/proc/self/status"))
            return int(status["RssFile"].split()[0])
        before = file_kb()
        server.populate(runs, advise=advise)
        os.write(write, f"{before} {file_kb()}".encode())
        os._exit(0)
    os.close(write)
    before, after = map(int, os.read(read, 100).split())
    os.waitpid(pid, 0)
    assert after - before > 90 * 1024, (before, after)  # KiB: the libraries, mapped in
