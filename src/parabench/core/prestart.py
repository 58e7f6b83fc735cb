"""Pre-started interpreters: a sweep's case processes forked from one that already imported torch.

Usage::

    with prestarted():          # a sweep (parabench.sweep.run); PARABENCH_PRESTART=0 opts out
        proc = start_process("parabench.case.execute", [config_json, result_path], env=env,
                             stdout=out_path, stderr=err_path)
        proc.wait()              # or wait(timeout=0.2): subprocess.TimeoutExpired, as Popen's
        proc.pid, proc.returncode, proc.import_s        # import_s: None if started plainly

A case process imports torch and ``torch._dynamo`` (which every optimizer pulls in): seconds
of CPU (docs/measurements.md, "Pre-started case processes"), paid again by every case of a
sweep. Inside :func:`prestarted`, :func:`start_process` asks a *server* for the process
instead: a ``python`` started once per import environment (the variables libraries read when
they load: thread counts, OpenMP policy, ``PYTHONPATH``, ``TORCH_*``, ...; see
:func:`import_key`), which imported the heavy modules with exactly that environment and forks
each case from itself. The child then takes the case's whole environment, working directory
and output files, starts its own session (``setsid``, so the case's group can be killed as
before) and runs the module as ``python -m`` would; nothing of parabench is imported in the
server, so plugins and settings are read by the child, as a fresh process reads them. The
server runs no torch operation, so no thread pool exists to be lost in the fork; it dies with
the runner (``PR_SET_PDEATHSIG``, and an end of its request pipe) and the case dies with the
server (``PARABENCH_RUNNER_PID`` names the server to the case's own watchdog). With the
``prestart`` extra (setproctitle) the case shows its own command line in ps.

A CLI run opens the block before it plans its sweep and starts (:func:`launch`) the servers its
CPU cases will fork from, so their imports run beside the planning's own (probing the devices
imports torch in the runner); before the first case, :func:`prepare` waits for those the cases
need and ends any other still importing, so none imports while a case is timed. A server
ends without the interpreter's teardown (about 1 s with torch loaded); one that never got
ready is killed.

On by default (``PARABENCH_PRESTART=0`` starts every case plainly), for the cases that train
with torch (:func:`parabench.case.isolate.trains_torch`; a forest, Spark or TensorFlow case
starts plainly). A forked case's memory reads as a fresh process's:

* the library pages the server's imports touched are not in a forked child's page tables
  (the kernel copies none of a file mapping's), so its RSS and PSS would leave them out until
  it touched each one (about 200 MB lighter for a torch case). The child maps them in first
  (``prestart_server.populate``, ``madvise(MADV_POPULATE_READ)``: minor faults, some 20 ms);
* the anonymous pages it still shares with the server count half in each PSS: the case's
  sampler counts them in full (``TreeSampler(forked=True)``, as a fresh process holds its
  own copy).

A pool method's ranks fork from the case's own copy (:mod:`parabench.core.rankfork`) and
read as spawned ones. What is left (docs/measurements.md, "Pre-started case processes"): a
case holds the pages of every module the server imported, where a fresh one would import only
what it uses; a pool's parent process, which builds no optimizer, would not import
``torch._dynamo``, so a pool method's PSS reads a few per cent heavier.

What changes in the figures: the imports are not in the case's ``startup_s`` (the server's
start, interpreter and imports, as the runner timed it: ``import_s``, kept in the result's
``facts.prestart_import_s``). Outside :func:`prestarted`, with ``PARABENCH_PRESTART=0``, for
a case that does not train with torch, or where the server cannot start, a case is a fresh
``python -m``.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from parabench.core.clock import Stopwatch

ENV = "PARABENCH_PRESTART"
#: what the server imports before it forks (each one that imports; torch._dynamo: the optimizers'
#: first construction imports it, about half of torch's import time)
PRELOAD = ("numpy", "torch", "torch._dynamo", "torch.distributed")
#: variables a library may read when it loads: a server serves only cases that agree on them
_IMPORT_PREFIXES = ("OMP_", "KMP_", "GOMP_", "MKL_", "OPENBLAS_", "NUMEXPR_", "TORCH", "PYTORCH",
                    "CUDA", "NCCL", "PYTHON", "LD_", "TF_", "XLA_", "MALLOC_")
_READY_S = 120.0


def import_key(env: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """The part of ``env`` that importing libraries may read: one server per distinct key."""
    return tuple(sorted((k, v) for k, v in env.items() if k.startswith(_IMPORT_PREFIXES)))


class PrestartError(RuntimeError):
    """The server could not start or answer (the caller starts the process plainly)."""


class Server:
    """One server process and the runner's end of its pipes."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self._since = Stopwatch()  # the server's start: its interpreter, then its imports
        self.proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).with_name("prestart_server.py")),
             str(os.getpid()), ",".join(PRELOAD)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            env=dict(env), close_fds=True)
        self.exited: dict[int, int] = {}
        self._buffer = b""
        self.import_s: float | None = None

    def ready(self) -> None:
        """Wait until the server has imported (PrestartError if it never says so)."""
        if self.import_s is not None:
            return
        line = self._line(_READY_S - self._since.seconds())
        if line != "ready":
            self.close()
            raise PrestartError(f"the pre-start server did not start ({line!r})")
        self.import_s = self._since.seconds()

    def _line(self, timeout: float) -> str | None:
        """The next line the server wrote, or None at its end or after ``timeout`` seconds."""
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        waited = Stopwatch()
        while b"\n" not in self._buffer:
            left = timeout - waited.seconds()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                return None
            chunk = os.read(fd, 65536)
            if not chunk:
                return None
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line.decode()

    def alive(self) -> bool:
        return self.proc.poll() is None

    def start(self, request: dict[str, Any]) -> int:
        """Fork the process ``request`` describes; its pid."""
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(json.dumps(request).encode() + b"\n")
            self.proc.stdin.flush()
        except OSError as err:
            raise PrestartError(f"the pre-start server is gone: {err}") from err
        while (line := self._line(_READY_S)) is not None:
            kind, _, rest = line.partition(" ")
            if kind == "started":
                return int(rest)
            if kind == "exited":
                self._exited(rest)
            elif kind == "error":
                raise PrestartError(rest)
        raise PrestartError("the pre-start server did not answer")

    def _exited(self, rest: str) -> None:
        pid, code = rest.split()
        self.exited[int(pid)] = int(code)

    def wait(self, pid: int, timeout: float | None) -> int | None:
        """``pid``'s return code (Popen's sign convention), None if still running at timeout."""
        waited = Stopwatch()
        while pid not in self.exited:
            left = 3600.0 if timeout is None else timeout - waited.seconds()
            if left <= 0:
                return None
            line = self._line(min(left, 1.0))
            if line is None:
                if not self.alive():  # the server died: its children were taken down too
                    self.exited.setdefault(pid, -signal.SIGKILL)
                continue
            if line.startswith("exited "):
                self._exited(line.partition(" ")[2])
        return self.exited.pop(pid)

    def close(self) -> None:
        """End the server: at the end of its input once it has served, at once while it still
        imports (nothing was forked from it: a run that stops before its cases)."""
        if self.import_s is None:
            self.proc.kill()
        if self.proc.stdin is not None:
            try:
                self.proc.stdin.close()
            except OSError:
                pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()


class Process:
    """A started case process: ``pid``, ``wait(timeout)``, ``returncode``, as Popen has."""

    def __init__(self, pid: int, server: Server | None, popen: subprocess.Popen | None) -> None:
        self.pid = pid
        self.server = server
        self.popen = popen
        self.returncode: int | None = None
        self.import_s = None if server is None else server.import_s
        self.server_pid = None if server is None else server.proc.pid  # forked from it

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is not None:
            return self.returncode
        if self.popen is not None:
            self.returncode = self.popen.wait(timeout)
            return self.returncode
        assert self.server is not None
        code = self.server.wait(self.pid, timeout)
        if code is None:
            raise subprocess.TimeoutExpired(f"pid {self.pid}", timeout or 0.0)
        self.returncode = code
        return code


_servers: dict[tuple[tuple[str, str], ...], Server] | None = None


def enabled() -> bool:
    """Whether a sweep's cases fork from pre-started servers (the default; ``PARABENCH_PRESTART=0``
    starts each plainly)."""
    return os.environ.get(ENV, "1") != "0"


@contextmanager
def prestarted() -> Iterator[None]:
    """Within this block :func:`start_process` forks from pre-started servers; all of them
    end with it (on any exit). Inside another such block it shares that one's servers (a CLI
    run starts them before its sweep opens its own block: :func:`launch`)."""
    global _servers
    if _servers is not None:
        yield
        return
    outer, _servers = _servers, ({} if enabled() else None)
    try:
        yield
    finally:
        for server in (_servers or {}).values():
            server.close()
        _servers = outer


def _launch(envs: list[Mapping[str, str]]) -> None:
    """Start a server for each import environment among ``envs`` that has none (a dead one is
    replaced): the servers import side by side."""
    assert _servers is not None
    for env in envs:
        key = import_key(env)
        server = _servers.get(key)
        if server is not None and server.alive():
            continue
        if server is not None:
            server.close()
            del _servers[key]
        try:
            _servers[key] = Server(env)  # the first case's environment; later ones agree
        except OSError:
            pass


def _server_for(env: Mapping[str, str]) -> Server | None:
    if _servers is None:
        return None
    _launch([env])
    return _ready(import_key(env))


def _ready(key: tuple[tuple[str, str], ...]) -> Server | None:
    """The server of ``key`` once its imports are done; one that failed them is dropped."""
    server = None if _servers is None else _servers.get(key)
    if server is None:
        return None
    try:
        server.ready()
    except PrestartError:
        del _servers[key]
        return None
    return server


def launch(*envs: Mapping[str, str]) -> None:
    """Start now, without waiting, the servers of these environments (inside
    :func:`prestarted`; nothing outside it): they import while the caller goes on, e.g. while
    a CLI run plans its sweep and probes its devices, which imports torch too."""
    if _servers is not None:
        _launch(list(envs))


def prepare(*envs: Mapping[str, str]) -> None:
    """Start now the servers the cases of these environments will fork from (inside
    :func:`prestarted`; side by side) and wait for them, so that their imports happen before
    the cases are watched, not inside one's time. A server :func:`launch` started for none
    of them that is not ready yet is ended, so that none imports while a case is timed."""
    if _servers is None:
        return
    _launch(list(envs))
    needed = {import_key(env) for env in envs}
    for key, server in list(_servers.items()):
        if key not in needed and server.import_s is None:
            server.close()  # killed: nothing was forked from it
            del _servers[key]
            continue
        _ready(key)


def start_process(module: str, args: list[str], *, env: Mapping[str, str], stdout: Path,
                  stderr: Path, cwd: str | None = None, fork: bool = True) -> Process:
    """``python -m module *args`` with ``env``, its output into the two files, in a new
    session: forked from a pre-started server inside :func:`prestarted` (unless ``fork`` is
    False), else started plainly."""
    server = _server_for(env) if fork else None
    if server is not None:
        request = {"module": module, "args": args, "env": dict(env), "stdout": str(stdout),
                   "stderr": str(stderr), "cwd": cwd or os.getcwd()}
        try:
            return Process(server.start(request), server, None)
        except PrestartError:
            pass  # started plainly below; the next case tries a new server
    out: IO[bytes]
    with open(stdout, "wb") as out, open(stderr, "wb") as err:
        popen = subprocess.Popen([sys.executable, "-m", module, *args], stdout=out, stderr=err,
                                 stdin=subprocess.DEVNULL, env=dict(env), cwd=cwd,
                                 start_new_session=True)
    return Process(popen.pid, None, popen)
