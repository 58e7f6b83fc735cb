"""The SLURM executor: each case of a sweep as its own job, submitted through submitit.

Usage::

    from parabench.sweep.slurm import SlurmExecutor, SlurmOptions, job_parameters
    options = SlurmOptions(partition="debug", time_min=30, sbatch=("--constraint=h100",))
    executor = SlurmExecutor(options, out="results.jsonl")   # parabench run --executor slurm
    job_parameters(config, options)        # what the case's job asks for: its #SBATCH lines

``run_grid(grid, out="results.jsonl", executor=executor)``
(:func:`parabench.sweep.run.run_grid`) then runs the sweep through it.

Every runnable case is submitted at once; SLURM queues and places them. A job runs the case as
the local runner does, in its own process group with its timeout and memory sampling
(:func:`parabench.sweep.slurm_job.run_case`), on the node it was given, and returns the result,
which carries that node's name, CPU, cores and GPUs (``env``) and the job's id
(``extra.slurm``). The driver gathers each result as its job ends; the runner grades and
appends it (:func:`parabench.sweep.run.run_grid` holds a result until the baselines planned
before it are recorded). Each job asks for the case's cores (``workers x threads`` CPUs on one
node), its GPUs on cuda (one per worker), and a time limit of the case's timeout plus 5 minutes,
unless :class:`SlurmOptions` says otherwise.

**Where things are.** submitit's files (the pickled call, the job's log, its result) and a
ledger of the jobs submitted (``jobs.jsonl``: job id and case) live in ``<out>.slurm/``, a
folder the nodes must see (beside ``--out`` on a shared file system).

**Endings.** A job that ends without a result (failed, cancelled, out of time, out of memory,
its node lost) is recorded ``failed`` / ``timeout`` / ``oom`` with the scheduler's state, exit
code and reason (``scontrol show job``, else ``sacct``) and the tail of its log. A job warned
of its time limit (SIGUSR2, 30 s before) is ended by submitit with "timed-out and not
checkpointable": recorded ``timeout``; one preempted is requeued by submitit and gathered when
it ends. Closing the
executor early (Ctrl-C or SIGTERM of the driver) cancels every job it submitted that has not
ended (``scancel``) and waits until the queue no longer holds them. A driver killed outright
leaves its jobs running: ``--resume`` finds them in the ledger and gathers their results
instead of submitting the cases again; a case whose job ended without a result runs anew.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import subprocess
import time
from collections.abc import Generator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from parabench.case.execute import skipped
from parabench.case.result import Result
from parabench.config import RunConfig
from parabench.sweep.executor import Hint
from parabench.sweep.grid import Case
from parabench.sweep.progress import Progress
from parabench.sweep.slurm_queue import ACTIVE, JobEnd, cancel, job_end, queued_states

#: how a job's end without a result is recorded
_STATUS = {"TIMEOUT": "timeout", "DEADLINE": "timeout", "OUT_OF_MEMORY": "oom"}
#: seconds a job that ended COMPLETED may take to show its result file (a shared file system)
RESULT_GRACE_S = 30.0
#: seconds squeue may fail in a row before the driver gives up (jobs stay for --resume)
SILENCE_S = 600.0
#: set to 1: a multi-node case's tasks share one node (job_parameters)
NODES_AS_TASKS_ENV = "PARABENCH_SLURM_NODES_AS_TASKS"
#: minutes a job's time limit adds to the case's own timeout (start-up, data, writing)
TIME_MARGIN_MIN = 5


@dataclass(frozen=True, kw_only=True)
class SlurmOptions:
    """What each job asks SLURM for; None: from the case (see the module's text)."""

    partition: str | None = None
    account: str | None = None
    time_min: int | None = None
    cpus_per_task: int | None = None
    gpus_per_node: int | None = None
    #: nodes a case whose ranks can be torchrun's spans (workers split evenly); 1: one node
    nodes: int = 1
    #: further ``#SBATCH`` lines, each ``--name=value`` or ``--flag``
    sbatch: tuple[str, ...] = ()
    #: where submitit's files and the ledger go (default: ``<out>.slurm``)
    folder: Path | None = None
    poll_s: float = 1.0


def sbatch_parameters(lines: Sequence[str]) -> dict[str, Any]:
    """``["--constraint=a100", "--exclusive"]`` as submitit's ``additional_parameters``.
    Raises ValueError for a line that is not ``--name[=value]``."""
    out: dict[str, Any] = {}
    for line in lines:
        m = re.fullmatch(r"--([A-Za-z][\w-]*)(?:=(.*))?", line.strip())
        if m is None:
            raise ValueError(f"--slurm-sbatch {line!r}: give an sbatch option as --name=value "
                             "or --flag")
        out[m.group(1).replace("-", "_")] = True if m.group(2) is None else m.group(2)
    return out


def pinned(config: RunConfig) -> RunConfig:
    """``config`` with the threads planned here made explicit: a job computes no fair share
    of its node's cores (they may differ from the planner's), and its result keeps the key."""
    return config.replace(threads_per_worker=config.threads)


def spans(config: RunConfig, options: SlurmOptions) -> int:
    """The nodes the job of ``config`` spans: ``options.nodes`` for a method whose ranks can be
    torchrun's (``Session.spans_nodes``) when its workers split evenly over them, else 1."""
    from parabench.registry import methods

    nodes = options.nodes
    if nodes <= 1 or config.workers % nodes or not methods.get(config.method).session_class \
            .spans_nodes:
        return 1
    return nodes


def job_parameters(config: RunConfig, options: SlurmOptions) -> dict[str, Any]:
    """submitit's parameters for the job of ``config``: one task (a torchrun agent) per node
    it spans. ``$PARABENCH_SLURM_NODES_AS_TASKS=1`` puts those tasks on one node instead, each
    standing in for a node (how the tests try a multi-node case on a one-node cluster)."""
    nodes = spans(config, options)
    ranks = config.workers // nodes  # per node
    gpus = options.gpus_per_node
    if gpus is None and config.device == "cuda":
        gpus = ranks
    on_one = nodes > 1 and os.environ.get(NODES_AS_TASKS_ENV) == "1"
    params: dict[str, Any] = {
        "job_name": "parabench-" + re.sub(r"[^\w.=-]+", "_", config.label()),
        "nodes": 1 if on_one else nodes, "ntasks_per_node": nodes if on_one else 1,
        "cpus_per_task": options.cpus_per_task or ranks * config.threads,
        "time": options.time_min or math.ceil(config.timeout_s / 60) + TIME_MARGIN_MIN,
        "signal_delay_s": 30,
    }
    for name, value in (("partition", options.partition), ("account", options.account),
                        ("gpus_per_node", gpus)):
        if value:
            params[name] = value
    if options.sbatch:
        params["additional_parameters"] = sbatch_parameters(options.sbatch)
    return params


def describe_jobs(configs: Sequence[RunConfig], options: SlurmOptions) -> list[str]:
    """What the jobs of ``configs`` would ask SLURM for, alike ones counted together:
    ``through SLURM: 6 jobs`` then ``  5 x --nodes=1 --ntasks-per-node=1 --cpus-per-task=2
    --time=15``."""
    asks: dict[str, int] = {}
    for config in configs:
        params = job_parameters(pinned(config), options)
        extra = params.pop("additional_parameters", {})
        flags = [f"--{k.replace('_', '-')}={v}" for k, v in params.items()
                 if k not in ("job_name", "signal_delay_s")]
        flags += [f"--{k.replace('_', '-')}" + ("" if v is True else f"={v}")
                  for k, v in extra.items()]
        asks[" ".join(flags)] = asks.get(" ".join(flags), 0) + 1
    lines = [f"through SLURM: {len(configs)} job(s), each asking for"]
    return lines + [f"  {n} x {ask}" for ask, n in sorted(asks.items(), key=lambda a: -a[1])]


def ended_result(config: RunConfig, job_id: str, end: JobEnd | None, log: str) -> Result:
    """The result of a case whose job ended without one."""
    state = end.state if end is not None else "UNKNOWN"
    said = (f"SLURM job {job_id} ended {state}" if end is not None
            else f"SLURM job {job_id} left the queue without a result, its state unknown")
    if end is not None and end.exit_code:
        said += f" (exit code {end.exit_code}"
        said += f", reason {end.reason})" if end.reason and end.reason != "None" else ")"
    if log:
        said += f"; its log ends: {log}"
    status = _STATUS.get(state, "failed")
    return _with_job(dataclasses.replace(skipped(config, said), status=status), job_id)


def _with_job(result: Result, job_id: str) -> Result:
    """A result made here for a job that returned none, with the job's id in
    ``extra.slurm`` (a job's own result has it from the job)."""
    return dataclasses.replace(result, extra={**result.extra, "slurm": {"job_id": job_id}})


def log_tail(job: Any, lines: int = 3) -> str:
    """The last lines of a job's error log, else its output log, as one line."""
    for path in (job.paths.stderr, job.paths.stdout):
        try:
            text = [t for t in Path(path).read_text(errors="replace").splitlines() if t.strip()]
        except OSError:
            continue
        if text:
            return " | ".join(t.strip() for t in text[-lines:])
    return ""


class Ledger:
    """The jobs submitted for an output file: ``jobs.jsonl`` in the executor's folder."""

    def __init__(self, folder: Path) -> None:
        self.path = folder / "jobs.jsonl"

    @staticmethod
    def _case(config: RunConfig) -> str:
        return json.dumps(config.to_dict(), sort_keys=True, default=str)

    def add(self, config: RunConfig, job_id: str) -> None:
        line = {"job_id": job_id, "case": json.loads(self._case(config)),
                "submitted": datetime.now(timezone.utc).isoformat(timespec="seconds")}
        with self.path.open("a") as f:
            f.write(json.dumps(line) + "\n")

    def jobs(self) -> dict[str, str]:
        """Each case's latest job id, by the case's JSON."""
        found: dict[str, str] = {}
        try:
            lines = self.path.read_text().splitlines()
        except OSError:
            return found
        for line in lines:
            try:
                entry = json.loads(line)
                found[json.dumps(entry["case"], sort_keys=True)] = str(entry["job_id"])
            except (ValueError, KeyError, TypeError):
                continue  # a line cut short by a killed driver
        return found

    def job_for(self, config: RunConfig, known: Mapping[str, str]) -> str | None:
        return known.get(self._case(config))


class SlurmExecutor:
    """Each case as a SLURM job (submitit); results as the jobs end."""

    name = "slurm"
    ordered = False

    def __init__(self, options: SlurmOptions, *, out: str | Path, resume: bool = False) -> None:
        self.options = options
        self.folder = Path(options.folder or f"{out}.slurm").resolve()
        self.resume = resume

    def gather(self, cases: Sequence[Case], *, workdir: Path, progress: Progress,
               hint: Hint | None = None) -> Generator[tuple[Case, Result], None, None]:
        """Submit every case at once (``hint`` is not applied: no result is recorded before
        the jobs are submitted), then yield each as its job ends."""
        import submitit  # the slurm extra

        from parabench.sweep.slurm_job import run_case, run_case_across

        self.folder.mkdir(parents=True, exist_ok=True)
        ledger = Ledger(self.folder)
        known = ledger.jobs() if self.resume else {}
        queue = queued_states()
        jobs: dict[str, tuple[Case, Any]] = {}
        try:
            for case in cases:
                config = pinned(case.config)
                job_id = ledger.job_for(config, known)
                if job_id is not None and self._alive(job_id, queue):
                    job = submitit.SlurmJob(folder=self.folder, job_id=job_id)
                    print(f"parabench: {config.label()}: gathering SLURM job {job_id} "
                          "submitted earlier", file=progress.stream, flush=True)
                else:
                    executor = submitit.SlurmExecutor(folder=self.folder)
                    executor.update_parameters(**job_parameters(config, self.options))
                    run = run_case_across if spans(config, self.options) > 1 else run_case
                    try:
                        job = executor.submit(run, config.to_dict())
                    except (submitit.core.utils.FailedJobError, OSError) as exc:
                        said = " | ".join(str(exc).strip().splitlines()[-2:])
                        refused = skipped(config, f"sbatch refused the job: {said}")
                        yield case, dataclasses.replace(refused, status="failed")
                        continue
                    ledger.add(config, job.job_id)
                jobs[job.job_id] = (case, job)
            yield from self._wait(jobs, progress)
        finally:  # Ctrl-C, SIGTERM, a failed write: no job of ours outlives the driver
            cancel([job_id for job_id in jobs], progress.stream)

    def check(self, configs: Sequence[RunConfig]) -> None:
        """Ask ``sbatch --test-only`` whether the cluster takes the jobs of ``configs`` (one
        per distinct request), before anything is submitted. Raises ValueError with sbatch's
        words (an unknown partition or account, a time over the limit, too many CPUs)."""
        from submitit.slurm.slurm import _make_sbatch_string  # the script submitit would write

        asked: set[str] = set()
        for config in configs:
            params = job_parameters(pinned(config), self.options)
            script = _make_sbatch_string(command="true", folder=self.folder,
                                         **{k: v for k, v in params.items() if k != "job_name"})
            if script in asked:
                continue
            asked.add(script)
            done = subprocess.run(["sbatch", "--test-only"], input=script, capture_output=True,
                                  text=True, timeout=60, check=False)
            if done.returncode != 0:
                said = " | ".join(done.stderr.strip().splitlines()[-2:]) or \
                    f"exit {done.returncode}"
                raise ValueError(f"SLURM would not take the job of {config.label()}: {said}")

    def _alive(self, job_id: str, queue: Mapping[str, str]) -> bool:
        """A job of an earlier driver worth gathering: queued, or ended with its result."""
        return job_id in queue or any(self.folder.glob(f"{job_id}_*_result.pkl"))

    def _wait(self, jobs: dict[str, tuple[Case, Any]], progress: Progress
              ) -> Generator[tuple[Case, Result], None, None]:
        ended_at: dict[str, float] = {}
        done = 0
        silent_since: float | None = None  # squeue failing: a controller restarting
        while jobs:
            try:
                queue = queued_states()
                silent_since = None
            except ConnectionError:
                silent_since = silent_since or time.monotonic()
                if time.monotonic() - silent_since > SILENCE_S:
                    raise ConnectionError(
                        f"squeue has not answered for {SILENCE_S / 60:.0f} minutes; the "
                        f"{len(jobs)} job(s) not gathered stay in {self.folder}/jobs.jsonl: "
                        "the same command with --resume gathers them") from None
                time.sleep(self.options.poll_s)
                continue
            for job_id, (case, job) in list(jobs.items()):
                result = self._finished(job_id, case, job, queue, ended_at)
                if result is not None:
                    del jobs[job_id]
                    done += 1
                    yield case, result
            states = [queue.get(job_id, "") for job_id in jobs]
            progress.jobs(queued=sum(s == "PENDING" for s in states),
                          running=sum(s in ACTIVE and s != "PENDING" for s in states),
                          done=done)
            if jobs:
                time.sleep(self.options.poll_s)

    def _finished(self, job_id: str, case: Case, job: Any, queue: Mapping[str, str],
                  ended_at: dict[str, float]) -> Result | None:
        """The case's result once its job has ended; None while it runs."""
        from submitit.core.utils import pickle_load

        path = Path(job.paths.result_pickle)
        if path.exists():
            try:
                outcome, value = pickle_load(path)
            except (EOFError, OSError, ValueError):  # still being written
                return None
            if outcome == "success":
                return Result.from_dict(value)  # extra.slurm: the job's own
            last = str(value).strip().splitlines()[-1:] or ["(no traceback)"]
            # submitit ends a job warned of its time limit (USR2) with this error
            status = "timeout" if "timed-out" in last[0] else "failed"
            result = skipped(case.config, f"SLURM job {job_id} raised: {last[0]}")
            return _with_job(dataclasses.replace(result, status=status), job_id)
        if queue.get(job_id) in ACTIVE:
            return None
        end = job_end(job_id)
        if end is not None and end.state in ACTIVE:
            return None
        if end is not None and end.state == "COMPLETED":  # its result may still be on its way
            first = ended_at.setdefault(job_id, time.monotonic())
            if time.monotonic() - first < RESULT_GRACE_S:
                return None
        return ended_result(case.config, job_id, end, log_tail(job))
