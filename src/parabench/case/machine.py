"""The machine around a case: thread settings, load average, other processes' CPU, ``busy``.

Usage::

    policy, source = wait_policy(os.environ)       # the OMP_WAIT_POLICY a case gets, and why
    watch = MachineWatch()                         # just before the case starts
    ...                                            # the case runs (a child of this process)
    measured = watch.finish(case_cpu_s=sampler.cpu_s)
    result.machine = machine_record(measured, settings=thread_settings(env, source),
                                    workers=2, threads_per_worker=1)
    is_busy(cores=2, cores_in_use=2, other_cores=0.9, load_before=None)   # the rule alone

``Result.machine`` holds: ``omp_wait_policy`` and its ``omp_wait_policy_source`` ("user" or
"parabench default"), ``threads`` (the case's OMP/MKL/OpenBLAS/NumExpr variables),
``torch_intra_op_threads`` (per rank, where the ranks reported it), ``rank_cores`` (the cores
each pooled rank may run on: its own block when pinned, see
:func:`parabench.core.rank.rank_cores`; None where no pool reported them), ``cores``,
``cores_in_use`` (workers x threads per worker), ``oversubscribed``, ``load_1m_before`` /
``load_1m_after``, ``case_cpu_s``, ``runner_cpu_s``, ``other_cores`` and ``other_cpu_share``
(CPU used by every other process during the case, in cores and as a share of the cores),
``busy``, ``busy_basis`` ("cpu", "load" or null) and, when it matters, a ``note``.

**Other processes' CPU** = the busy time of this machine's cores (``psutil.cpu_times`` per CPU,
user + nice + system + irq + softirq + steal, over the CPUs this process may run on) during the
case, minus the case's own CPU (its process tree: the larger of the sampled per-process times
and the reaped children's ``getrusage``) and the runner's (the sampler). Steal counts as
"other": it is time a hypervisor gave to someone else. Both case figures are lower bounds, so
``other_cores`` errs towards busy.

**OMP_WAIT_POLICY defaults to PASSIVE for every case** the runner starts, unless the user set
it (then theirs is kept). With the runtime default, OpenMP threads spin at each barrier
(libgomp: about 300k spins; Intel/LLVM: 200 ms ``KMP_BLOCKTIME``) while they wait for the
slowest thread; with PASSIVE they sleep on a futex. A spinning thread burns the core another
thread of the same case (or another process) needs, and a descheduled thread makes all the
others spin longer (on a busy machine, an order of magnitude on an mlp tiny epoch; the
measurement is in docs/measurements.md). The runner cannot know
before a case whether the machine will get busy during it, and libgomp only throttles spinning
when its *own* threads outnumber the cores, not when another rank or process competes; so
"PASSIVE only when workers x threads > cores" would not have protected the measured ddp x2
case (2 x 1 thread on 2 cores). What PASSIVE costs on a quiet machine is a futex wake-up (a few
microseconds) per parallel region, small against a training step; the lead measures both.
"""

from __future__ import annotations

import os
import resource
from collections.abc import Mapping
from typing import Any

import psutil

from parabench.config import available_cores
from parabench.core.clock import Stopwatch
from parabench.envinfo import THREAD_VARS

#: another process may use this much of one core beyond the spare cores before the machine
#: counts as busy: a quiet machine's daemons use a few hundredths of a core, another job more
BUSY_SLACK_CORES = 0.25
#: what the runner gives a case when the user did not choose (see the module docstring)
DEFAULT_WAIT_POLICY = "PASSIVE"


def wait_policy(environ: Mapping[str, str]) -> tuple[str, str]:
    """(OMP_WAIT_POLICY for the case, where it came from: "user" or "parabench default")."""
    user = environ.get("OMP_WAIT_POLICY", "").strip()
    return (user.upper(), "user") if user else (DEFAULT_WAIT_POLICY, "parabench default")


def is_busy(*, cores: int, cores_in_use: int, other_cores: float | None,
            load_before: float | None) -> bool:
    """Whether other processes took cores the case needed: the rule behind ``machine.busy``.

    The case needs ``cores_in_use`` (workers x threads per worker) of ``cores``; what is left,
    ``spare``, other processes may use without slowing it. The machine was busy when they used
    more than ``spare + BUSY_SLACK_CORES`` cores during the case (``other_cores``, measured:
    CPU seconds / wall). Only when that is unknown does the 1-minute load average before the
    case decide, by the same bound: it is a lagging average (a sweep's previous case is still
    in it) that counts waiting tasks too, so it is the weaker evidence. Unknown both: False.
    """
    spare = max(0.0, cores - cores_in_use)
    if other_cores is not None:
        return other_cores > spare + BUSY_SLACK_CORES
    if load_before is not None:
        return load_before > spare + BUSY_SLACK_CORES
    return False


def other_cores(*, busy_cpu_s: float, case_cpu_s: float, runner_cpu_s: float,
                wall_s: float) -> float:
    """Cores other processes kept busy on average: the cores' busy CPU seconds during the
    case minus the case's and the runner's, over the wall time (never below 0: tick rounding)."""
    return max(0.0, busy_cpu_s - case_cpu_s - runner_cpu_s) / wall_s


def load_1m() -> float | None:
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return None


def busy_cpu_s() -> float | None:
    """CPU seconds the cores this process may run on have spent not idle, since boot."""
    try:
        per_cpu = psutil.cpu_times(percpu=True)
        mine = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    except (OSError, psutil.Error):
        return None
    total = 0.0
    for i, t in enumerate(per_cpu):
        if mine is None or i in mine:
            total += sum(getattr(t, f, 0.0) for f in
                         ("user", "nice", "system", "irq", "softirq", "steal"))
    return total


def _rusage_cpu_s(who: int) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


class MachineWatch:
    """The machine before and after a case run as a child process of this one."""

    def __init__(self) -> None:
        self.cores = available_cores()
        self.load_before = load_1m()
        self._busy0 = busy_cpu_s()
        self._self0 = _rusage_cpu_s(resource.RUSAGE_SELF)
        self._children0 = _rusage_cpu_s(resource.RUSAGE_CHILDREN)
        self._watch = Stopwatch()

    def finish(self, case_cpu_s: float | None) -> dict[str, Any]:
        """Measured figures; ``case_cpu_s`` None (e.g. ranks on other nodes): no CPU share."""
        wall = self._watch.seconds()
        out: dict[str, Any] = {"cores": self.cores, "load_1m_before": self.load_before,
                               "load_1m_after": load_1m(), "other_cores": None,
                               "other_cpu_share": None}
        busy1 = busy_cpu_s()
        if case_cpu_s is None or self._busy0 is None or busy1 is None or wall <= 0:
            return out
        children = _rusage_cpu_s(resource.RUSAGE_CHILDREN) - self._children0
        case = max(case_cpu_s, children)
        runner = _rusage_cpu_s(resource.RUSAGE_SELF) - self._self0
        other = other_cores(busy_cpu_s=busy1 - self._busy0, case_cpu_s=case,
                            runner_cpu_s=runner, wall_s=wall)
        out.update(case_cpu_s=round(case, 3), runner_cpu_s=round(runner, 3),
                   other_cores=round(other, 3), other_cpu_share=round(other / self.cores, 3))
        return out


def thread_settings(env: Mapping[str, str], policy_source: str,
                    torch_threads: list[int] | None = None,
                    rank_cores: list[list[int] | None] | None = None) -> dict[str, Any]:
    """The thread settings a case's processes started with (``env``: their environment)."""
    return {
        "omp_wait_policy": env.get("OMP_WAIT_POLICY"),
        "omp_wait_policy_source": policy_source,
        "threads": {var: env.get(var) for var in THREAD_VARS},
        "torch_intra_op_threads": torch_threads,
        "rank_cores": rank_cores,
    }


def machine_record(measured: Mapping[str, Any], *, settings: Mapping[str, Any], workers: int,
                   threads_per_worker: int) -> dict[str, Any]:
    """``Result.machine``: settings + measured figures + the verdict, with a note if busy."""
    cores, in_use = int(measured["cores"]), workers * threads_per_worker
    other, load = measured.get("other_cores"), measured.get("load_1m_before")
    busy = is_busy(cores=cores, cores_in_use=in_use, other_cores=other, load_before=load)
    basis = "cpu" if other is not None else "load" if load is not None else None
    record = {**settings, **measured, "cores_in_use": in_use, "oversubscribed": in_use > cores,
              "busy": busy, "busy_basis": basis}
    if note := _note(record):
        record["note"] = note
    return record


def _note(m: Mapping[str, Any]) -> str:
    """Why the figures may not hold on a quiet machine ("" when nothing to say)."""
    parts = []
    if m["busy"]:
        what = (f"other processes used {m['other_cores']:.2f} cores during the case"
                if m["busy_basis"] == "cpu" else f"load {m['load_1m_before']:.2f} before the case")
        spare = max(0, m["cores"] - m["cores_in_use"])
        parts.append(f"measured on a busy machine: {what}, {spare} of {m['cores']} cores spare")
    if (m["busy"] or m["oversubscribed"]) and m.get("omp_wait_policy") != "PASSIVE":
        parts.append(f"OMP_WAIT_POLICY={m.get('omp_wait_policy') or 'unset'}: spinning OpenMP "
                     "threads slow a contended case many times over (an mlp tiny epoch: "
                     "0.756 s against 0.056 s with PASSIVE at load 5-6)")
    return "; ".join(parts)
