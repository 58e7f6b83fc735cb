"""Run one case in its own process group, with a timeout, and turn any ending into a Result.

Usage::

    result = run_isolated(config, workdir=Path(tmp), on_tick=lambda line: ...)

The worker (``python -m parabench.case.execute``) gets the fair thread budget through the usual
environment variables and ``OMP_WAIT_POLICY=PASSIVE`` unless the user set it (why:
:mod:`parabench.case.machine`), a fresh session (``start_new_session``) so that the whole group
can be killed, and its memory is sampled from here. A crash, a hang past ``config.timeout_s`` or a
kill by the out-of-memory killer each becomes a result with that status and a reason; every
process the case started is gone when this returns. A worker killed by SIGKILL is called
``oom`` only on evidence (the kernel's OOM-kill counters rose during the case); otherwise it
is ``failed``, killed from outside the case.

The result records the memory peaks (RSS and PSS sums, :mod:`parabench.core.measure`) and
``machine``: the thread settings, the load and the other processes' CPU around the case, and
whether the machine was busy (:mod:`parabench.case.machine`).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import signal
import subprocess
import time
from collections.abc import Callable, Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import psutil

from parabench.case.execute import SPAWNED_ENV, skipped
from parabench.case.machine import MachineWatch, machine_record, thread_settings, wait_policy
from parabench.case.result import Result
from parabench.case.stopping import salvage
from parabench.config import RunConfig
from parabench.core import prestart, rankfork
from parabench.core.clock import Stopwatch
from parabench.core.records import Machine
from parabench.core.sampler import TreeSampler
from parabench.core.tempdirs import SWEEP_DIR_ENV, sweep_dir
from parabench.envinfo import THREAD_VARS, fingerprint, git_commit

_EPOCH_LINE = re.compile(r"^epoch (\d+)/\d+ ([0-9.]+)s loss ([-0-9.eE+naninf]+)$")


def worker_env(config: RunConfig) -> dict[str, str]:
    """The worker's environment: thread budget, OpenMP wait policy, the runner's pid."""
    env = dict(os.environ)
    env.update({var: str(config.threads) for var in THREAD_VARS})
    env["OMP_WAIT_POLICY"] = wait_policy(os.environ)[0]
    env["PYTHONUNBUFFERED"] = "1"
    env["PARABENCH_RUNNER_PID"] = str(os.getpid())
    return env


def kill_case(pgid: int, seen: dict[int, float]) -> None:
    """SIGKILL the case's process group, then any process it started that left the group."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    for pid, created in seen.items():
        try:
            proc = psutil.Process(pid)
            if proc.create_time() == created:  # not a recycled pid
                proc.kill()
        except psutil.Error:
            pass


def _tail(path: Path, lines: int = 1) -> str:
    try:
        text = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return " | ".join(text[-lines:])


def _salvaged(config: RunConfig, status: str, reason: str, out_log: Path) -> Result:
    """A result for a worker that died before writing one: keep the epochs it reported."""
    epoch_s, loss = [], []
    lines = out_log.read_text(errors="replace").splitlines() if out_log.exists() else []
    for line in lines:
        if m := _EPOCH_LINE.match(line.strip()):
            epoch_s.append(float(m.group(2)))
            loss.append(float(m.group(3)))
    base = skipped(config, reason)
    return dataclasses.replace(base, status=status, epoch_s=epoch_s, loss=loss,
                               **salvage(config, lines, epoch_s))  # time-to-target mode


#: files holding the kernel's OOM-kill count: cgroup v2, cgroup v1, then machine-wide
_OOM_SOURCES = (
    ("/sys/fs/cgroup{cg}/memory.events", "oom_kill"),
    ("/sys/fs/cgroup/memory{cg}/memory.oom_control", "oom_kill"),
    ("/proc/vmstat", "oom_kill"),
)


def _own_cgroups() -> list[str]:
    """This process's cgroup paths (v2 unified and v1 memory), "" for the root."""
    paths = []
    try:
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            if controllers in ("", "memory"):
                paths.append("" if path == "/" else path)
    except (OSError, ValueError):
        pass
    return [*paths, ""]


def oom_kill_counts() -> dict[str, int]:
    """Every readable OOM-kill counter, by file; an empty dict when none is readable."""
    counts: dict[str, int] = {}
    for pattern, key in _OOM_SOURCES:
        for cg in _own_cgroups() if "{cg}" in pattern else [""]:
            path = pattern.format(cg=cg)
            try:
                for line in Path(path).read_text().splitlines():
                    name, _, value = line.partition(" ")
                    if name == key:
                        counts[path] = int(value)
            except (OSError, ValueError):
                continue
    return counts


def _outside_cores(sampler: TreeSampler, spans: list[list[float]]) -> float | None:
    """The tree's CPU seconds per wall second inside ``spans``, as the runner sampled them
    (None: a span it cannot read)."""
    walls = [end - start for start, end in spans]
    cores = [sampler.cores_over(span) for span in spans]
    if None in cores or sum(walls) <= 0:
        return None
    return round(sum(c * w for c, w in zip(cores, walls, strict=True)) / sum(walls), 3)


def _oom_evidence(before: dict[str, int], after: dict[str, int]) -> str | None:
    """Which counter rose during the case (None: no evidence of an OOM kill)."""
    for path, count in after.items():
        if path in before and count > before[path]:
            return f"{path} oom_kill {before[path]} -> {count}"
    return None


def _ending(
    rc: int, timed_out: bool, config: RunConfig, peak_mb: float, err: str,
    oom_evidence: str | None = None,
) -> tuple[str, str]:
    """(status, reason) for a worker that ended without writing its result."""
    detail = f": {err}" if err else ""
    if timed_out:
        return "timeout", f"exceeded the {config.timeout_s:g}s case timeout; the case was killed"
    if rc == -signal.SIGKILL and oom_evidence is not None:
        return "oom", (
            f"killed by the out-of-memory killer ({oom_evidence}; peak RSS {peak_mb:.0f} MB); "
            "try a smaller --batch-size or profile"
        )
    if rc == -signal.SIGKILL:
        return "failed", (
            "killed by SIGKILL (signal 9) from outside the case; the kernel's OOM-kill "
            f"counters did not rise (peak RSS {peak_mb:.0f} MB){detail}"
        )
    if rc < 0:
        return "failed", f"worker killed by {signal.Signals(-rc).name}{detail}"
    if rc != 0:
        return "failed", f"worker exited with code {rc}{detail}"
    return "failed", f"worker exited without writing a result{detail}"


def trains_torch(workload: str, method: str) -> bool:
    """Whether a case of ``workload`` under ``method`` trains with torch, so that a fresh case
    process imports torch too: only such a case is forked from a pre-started interpreter
    (:mod:`parabench.core.prestart`), whose torch pages it maps in. A forest, Spark or
    TensorFlow case starts plainly and does not read the server's libraries as its own."""
    from parabench.registry import methods, workloads

    try:
        return (workloads.get(workload).family == "torch"
                and methods.get(method).baseline_method == "serial")
    except KeyError:
        return False


def forks(workload: str, method: str) -> bool:
    """Whether a sweep's case of ``workload`` under ``method`` forks from a pre-started
    interpreter (the dry run's cost model prices its start-up by the same rule)."""
    return prestart.enabled() and trains_torch(workload, method)


def forks_ranks(workload: str, method: str, device: str) -> bool:
    """Whether a sweep's case makes a copy of itself to fork a pool's ranks from, instead of
    spawning them (:mod:`parabench.core.rankfork`): a pre-started case on the CPU, of any
    method but the baseline (serial starts no pool; which sessions do, only the session knows:
    a method that starts none leaves the copy unused: 0.06 s to make). The dry run's cost model
    prices start-up by the same rule."""
    from parabench.registry import methods

    if device != "cpu" or not forks(workload, method):
        return False
    return methods.get(method).baseline_method != method


def launch(configs: list[RunConfig]) -> None:
    """Start importing, without waiting, the interpreters these cases will fork from
    (:func:`parabench.core.prestart.launch`; nothing outside ``prestarted()``)."""
    prestart.launch(*(worker_env(c) for c in configs if forks(c.workload, c.method)))


def prepare(configs: list[RunConfig]) -> None:
    """Pre-start the interpreters these cases will fork from (:mod:`parabench.core.prestart`;
    nothing outside ``prestarted()``)."""
    prestart.prepare(*(worker_env(c) for c in configs if forks(c.workload, c.method)))


def run_isolated(
    config: RunConfig, *, workdir: Path, on_tick: Callable[[str], None] | None = None
) -> Result:
    stem = f"case-{os.getpid()}-{time.monotonic_ns()}"
    result_path, out_log, err_log = (workdir / f"{stem}{s}" for s in (".json", ".out", ".err"))
    cmd = [json.dumps(config.to_dict()), str(result_path)]
    env = worker_env(config)
    # what the sweep's cases share (tempdirs.sweep_dir): the runner's folder, or one the user
    # named for several sweeps (a script of runs builds each dataset once)
    env[SWEEP_DIR_ENV] = str(sweep_dir() or workdir)
    timed_out = False
    fork = forks(config.workload, config.method)
    if fork:
        prestart.prepare(env)  # a pre-started interpreter's imports happen outside the case
    listing = workdir / f"{stem}.ranks"  # the zygote and ranks the case forks (rankfork)
    env.pop(rankfork.ENV, None)  # a sweep run inside a case: not the outer case's listing
    if forks_ranks(config.workload, config.method, config.device):
        env[rankfork.ENV] = str(listing)
    oom_before = oom_kill_counts()
    watch = MachineWatch()
    elapsed = Stopwatch()
    env[SPAWNED_ENV] = repr(elapsed.t0)  # the case's launch part is timed from here
    proc = prestart.start_process("parabench.case.execute", cmd, env=env, stdout=out_log,
                                  stderr=err_log, fork=fork)
    with TreeSampler(proc.pid, forked=proc.server_pid is not None,
                     listing=listing) as sampler:
        try:
            while True:
                try:
                    rc = proc.wait(timeout=0.2)
                    break
                except subprocess.TimeoutExpired:
                    if elapsed.seconds() > config.timeout_s:
                        timed_out = True
                        kill_case(proc.pid, sampler.seen)
                        rc = proc.wait()
                        break
                    if on_tick is not None:
                        on_tick(_tail(out_log))
        finally:  # also on Ctrl-C: nothing of the case may outlive the runner
            kill_case(proc.pid, sampler.seen)
    wall = elapsed.seconds()
    measured = watch.finish(case_cpu_s=sampler.cpu_s)

    if result_path.exists():
        result = Result.from_dict(json.loads(result_path.read_text()))
    else:
        evidence = _oom_evidence(oom_before, oom_kill_counts())
        status, reason = _ending(
            rc, timed_out, config, sampler.peak_rss_mb, _tail(err_log), evidence
        )
        result = _salvaged(config, status, reason, out_log)
    for path in (result_path, out_log, err_log, listing):
        path.unlink(missing_ok=True)
    if (ev := result.evidence) is not None and ev.windows_span:  # cores seen from outside
        result = dataclasses.replace(result, evidence=dataclasses.replace(
            ev, outside_cores=_outside_cores(sampler, ev.window_spans or [ev.windows_span])))
    settings = thread_settings(env, wait_policy(os.environ)[1], result.facts.rank_threads,
                               result.facts.rank_cores)
    if proc.import_s is not None:  # forked from a pre-started interpreter: its imports
        result = dataclasses.replace(result, facts=dataclasses.replace(
            result.facts, prestart_import_s=proc.import_s))
    if result.wall_parts:  # what the case did not time: its result, writing, exit
        parts = {**result.wall_parts, "exit": round(wall - sum(result.wall_parts.values()), 4)}
        result = dataclasses.replace(result, wall_parts=parts)
    return stamped(result, memory=sampler.memory_fields(
        float(result.facts.self_max_rss_mb or 0.0)), measured=measured, settings=settings,
        workers=result.workers, wall_s=wall)


def stamped(result: Result, *, memory: Mapping[str, Any], measured: Mapping[str, Any] | None,
            settings: Mapping[str, Any], workers: int, wall_s: float, **fields: Any) -> Result:
    """A finished case's result as every front end records it (the runner here, torchrun's
    rank 0 in :mod:`parabench.cli.torchrun`): its memory peaks, its machine (``measured`` by
    a :class:`~parabench.case.machine.MachineWatch` around the case, with the thread
    ``settings`` and the ``workers`` on this machine; None: not watched), its wall
    time, environment, commit and time stamp, and any other ``fields`` the front end knows.
    Grading and appending follow: :func:`parabench.sweep.run.record`.
    """
    machine = None if measured is None else Machine.from_dict(machine_record(
        measured, settings=settings, workers=workers, threads_per_worker=result.threads_per_worker))
    if machine is not None and result.machine is not None:  # the case's measured peak
        machine = dataclasses.replace(machine, peak=result.machine.peak)
    return dataclasses.replace(
        result,
        peak_rss_mb=memory["peak_rss_mb"],
        peak_pss_mb=memory["peak_pss_mb"],
        extra={**result.extra, **memory["extra"]},
        machine=machine,
        wall_s=wall_s,
        env=fingerprint(),
        git_commit=git_commit(),
        timestamp=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        **fields,
    )
