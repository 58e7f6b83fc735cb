"""The pre-start server (:mod:`parabench.core.prestart`): imports, then forks a case per request.

Usage (the runner starts it; it is a script, so that nothing of parabench is imported here)::

    python .../parabench/core/prestart_server.py RUNNER_PID numpy,torch,torch._dynamo

It imports the modules named, writes ``ready``, then reads one JSON request a line
(``module``, ``args``, ``env``, ``stdout``, ``stderr``, ``cwd``) and answers ``started PID``
for the child it forked, and ``exited PID CODE`` (Popen's sign convention) as each child ends.
The child starts a session, takes the request's environment (``PARABENCH_RUNNER_PID``: this
server, whose death its watchdog follows), files and folder, maps in the library pages the
server's imports touched (:func:`populate`), and runs the module as ``python -m`` would.
The server dies with the runner (``PR_SET_PDEATHSIG``) and at the end of its input.
"""

import ctypes
import json
import os
import runpy
import select
import signal
import sys
import traceback
from typing import Any

# a script run puts its own folder first; a `python -m` child has its working folder there
BASE_PATH = [p for p in sys.path[1:] if p != ""]
OUT = sys.stdout.buffer


def say(line: str) -> None:
    OUT.write(line.encode() + b"\n")
    OUT.flush()


def reap() -> None:
    """Say how each child that ended ended."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
        say(f"exited {pid} {code}")


def _close_inherited() -> None:
    for name in os.listdir("/proc/self/fd") if os.path.isdir("/proc/self/fd") else []:
        if int(name) > 2:
            try:
                os.close(int(name))
            except OSError:
                pass


def _retitle(argv: list[str]) -> None:
    """Show the command line the case would have had started plainly (in ps, psutil, top)."""
    try:
        import setproctitle
    except ImportError:
        return
    setproctitle.setproctitle(" ".join(argv))


PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
MADV_POPULATE_READ = 22  # Linux 5.14+


def resident_file_pages() -> list[tuple[int, int]]:
    """(address, length) runs of this process's readable file-backed pages that are in its
    page tables (``/proc/self/pagemap``'s present bit): the library pages the imports touched.

    A forked child does not inherit these entries (the kernel copies no page-table entries of
    a mapping without anonymous pages: they fault back in on use), so without
    :func:`populate` its RSS and PSS would leave out the libraries it shares with the server
    until it touches each page, reading some 200 MB lighter than a fresh process that
    imported the same modules (docs/measurements.md, "Pre-started case processes")."""
    runs: list[tuple[int, int]] = []
    try:
        maps = open("/proc/self/maps").read().splitlines()  # noqa: SIM115
        pagemap = os.open("/proc/self/pagemap", os.O_RDONLY)
    except OSError:
        return runs
    try:
        for line in maps:
            fields = line.split(None, 5)
            if len(fields) < 6 or not fields[5].startswith("/") or fields[5].startswith("/dev/"):
                continue
            if fields[1][0] != "r" or fields[4] == "0":
                continue
            start, end = (int(x, 16) for x in fields[0].split("-"))
            raw = os.pread(pagemap, (end - start) // PAGE * 8, start // PAGE * 8)
            runs += [(start + first * PAGE, count * PAGE) for first, count in _present(raw)]
    except (OSError, ValueError, ImportError):
        return runs
    finally:
        os.close(pagemap)
    return runs


def _present(raw: bytes) -> list[tuple[int, int]]:
    """(first page, pages) runs of pagemap entries ``raw`` whose present bit is set: the
    runs' edges in one pass (numpy, a dependency of parabench, imported already: PRELOAD)."""
    import numpy as np

    present = (np.frombuffer(raw, dtype=np.uint64) >> np.uint64(63)).astype(np.int8)
    edges = np.flatnonzero(np.diff(np.concatenate(([0], present, [0]))))
    firsts, ends = edges[::2], edges[1::2]
    return list(zip(firsts.tolist(), (ends - firsts).tolist(), strict=True))


def populate(runs: list[tuple[int, int]], advise: bool = True) -> int:
    """Map ``runs`` (:func:`resident_file_pages`, read in the server) into this forked
    process's page tables: ``madvise(MADV_POPULATE_READ)``, or a read of each page where the
    kernel has no such advice (``advise=False`` forces that). The pages are in memory already
    (the server holds them), so this costs minor faults only. Returns the bytes mapped."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    done = 0
    for address, length in runs:
        if advise and libc.madvise(address, length, MADV_POPULATE_READ) == 0:
            done += length
            continue
        if advise and ctypes.get_errno() == 22:  # EINVAL: an older kernel, read them instead
            advise = False
        if not advise:
            for page in range(address, address + length, PAGE):
                ctypes.c_char.from_address(page).value  # noqa: B018 - the read maps the page
            done += length
    return done


RESIDENT: list[tuple[int, int]] = []  # read once after the imports (main)


def child(req: dict[str, Any]) -> None:
    """Become the requested ``python -m module args`` (never returns)."""
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    os.setsid()
    os.chdir(req["cwd"])
    os.environ.clear()
    os.environ.update(req["env"])
    os.environ["PARABENCH_RUNNER_PID"] = str(os.getppid())  # its watchdog follows this server
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    for target, path in ((1, req["stdout"]), (2, req["stderr"])):
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(fd, target)
        os.close(fd)
    _close_inherited()
    populate(RESIDENT)
    sys.stdin = open(0, closefd=False)  # noqa: SIM115 - the process's own streams
    sys.stdout = open(1, "w", closefd=False, buffering=1)  # noqa: SIM115
    sys.stderr = open(2, "w", closefd=False, buffering=1)  # noqa: SIM115
    sys.path[:] = [os.getcwd(), *BASE_PATH]
    sys.argv = [req["module"], *req["args"]]
    _retitle([sys.executable, "-m", req["module"], *req["args"]])
    code = 0
    try:
        runpy.run_module(req["module"], run_name="__main__", alter_sys=True)
    except SystemExit as stop:
        if isinstance(stop.code, int) or stop.code is None:
            code = stop.code or 0
        else:
            print(stop.code, file=sys.stderr)
            code = 1
    except BaseException:  # noqa: BLE001 - printed as python would, then the exit status
        traceback.print_exc()
        code = 1
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code)


def serve() -> None:
    """Fork a child per request line until the input ends; idle between (a child's end
    wakes it through SIGCHLD's wake-up pipe)."""
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    buf = b""
    while True:
        ready = select.select([0, wake_r], [], [])[0]
        if wake_r in ready:
            os.read(wake_r, 4096)
        reap()
        if 0 not in ready:
            continue
        chunk = os.read(0, 65536)
        if not chunk:
            break
        buf += chunk
        while b"\n" in buf:
            line, _, buf = buf.partition(b"\n")
            try:
                req = json.loads(line)
            except ValueError as err:
                say(f"error bad request: {err}")
                continue
            pid = os.fork()
            if pid == 0:
                try:
                    child(req)
                finally:
                    os._exit(1)
            say(f"started {pid}")
    reap()


def main() -> None:
    runner = int(sys.argv[1])
    if sys.platform.startswith("linux"):
        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, int(signal.SIGKILL))
        if os.getppid() != runner:  # the runner died before prctl took effect
            os._exit(1)
    for name in filter(None, sys.argv[2].split(",")):
        try:
            __import__(name)
        except Exception:  # noqa: BLE001, S110 - what does not import is imported by the child
            pass
    try:  # set up while argv and environ are still where the kernel put them
        import setproctitle

        setproctitle.getproctitle()
    except ImportError:
        pass
    RESIDENT[:] = resident_file_pages()
    say("ready")
    serve()
    # nothing of the server's is left to clean up (its children run in their own sessions and
    # are reaped): skip the interpreter's teardown of torch, about 1 s the runner would wait
    os._exit(0)


if __name__ == "__main__":
    main()
