"""What the SLURM scheduler says: the nodes' CPUs, this user's queue, how a job ended, and
cancelling jobs; the commands (``sinfo``, ``squeue``, ``scontrol``, ``sacct``, ``scancel``) run
here, where ``parabench run --executor slurm`` runs.

Usage::

    from parabench.sweep.slurm_queue import job_end, node_cores
    node_cores("debug")         # the CPUs of the partition's smallest node (None: no answer)
    job_end("93")               # JobEnd("COMPLETED", "0:0", "None") once it ended; None: unknown

``queued_states()`` gives this user's jobs in the queue (``{"93": "RUNNING", ...}``).

There need not be an accounting database: a job's end comes from ``scontrol show job``
(kept ``MinJobAge`` seconds after it ends), else from ``sacct``. A failing ``squeue`` raises
ConnectionError (the controller is unreachable).
"""

from __future__ import annotations

import getpass
import re
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

#: states of a job still in the queue (SLURM's long names)
ACTIVE = frozenset({"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "REQUEUED",
                    "RESIZING", "REQUEUE_HOLD", "REQUEUE_FED", "SIGNALING", "STAGE_OUT",
                    "STOPPED", "RESV_DEL_HOLD"})


@dataclass(frozen=True)
class JobEnd:
    """How a job ended, as the scheduler tells it."""

    state: str
    exit_code: str | None = None
    reason: str | None = None


def _command(args: list[str]) -> str | None:
    try:
        done = subprocess.run(args, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


def node_cores(partition: str | None = None) -> int | None:
    """The CPUs of the smallest node in ``partition`` (None: the default one's nodes, as
    ``sinfo`` lists them); None when sinfo does not answer."""
    text = _command(["sinfo", "-h", "-N", "-o", "%c", *(["-p", partition] if partition else [])])
    counts = [int(t) for t in (text or "").split() if t.isdigit()]
    return min(counts) if counts else None


def queued_states() -> dict[str, str]:
    """This user's jobs in the queue: job id -> state. Raises ConnectionError when squeue
    fails."""
    text = _command(["squeue", "-h", "-u", getpass.getuser(), "-o", "%i|%T"])
    if text is None:
        raise ConnectionError("squeue failed: is SLURM's controller reachable from here?")
    return dict(line.split("|", 1) for line in text.splitlines() if "|" in line)


def job_end(job_id: str) -> JobEnd | None:
    """A job's final state from ``scontrol show job`` (kept MinJobAge seconds), else
    ``sacct``; None when neither knows it."""
    if (text := _command(["scontrol", "show", "job", "-o", job_id])) and "JobState=" in text:
        fields = dict(re.findall(r"(\w+)=(\S*)", text))
        return JobEnd(fields["JobState"], fields.get("ExitCode"), fields.get("Reason"))
    text = _command(["sacct", "-n", "-P", "-X", "-j", job_id, "-o", "State,ExitCode,Reason"])
    if text and (line := text.strip().splitlines()[0] if text.strip() else ""):
        state, code, reason = ([*line.split("|"), "", ""])[:3]
        return JobEnd(state.split()[0], code or None, reason or None)
    return None


def cancel(job_ids: Sequence[str], stream: Any = sys.stderr, wait_s: float = 60.0) -> None:
    """``scancel`` the jobs of ``job_ids`` still queued, and wait until the queue no longer
    holds them (their processes are gone then)."""
    try:
        queue = queued_states()
    except ConnectionError:
        return
    left = [j for j in job_ids if queue.get(j) in ACTIVE]
    if not left:
        return
    subprocess.run(["scancel", *left], capture_output=True, timeout=60, check=False)
    print(f"parabench: cancelled {len(left)} SLURM job(s): {', '.join(left)}", file=stream,
          flush=True)
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        try:
            queue = queued_states()
        except ConnectionError:
            return
        if not any(queue.get(j) in ACTIVE for j in left):
            return
        time.sleep(0.5)
