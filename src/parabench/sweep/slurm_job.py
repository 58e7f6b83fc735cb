"""What a SLURM job of a sweep runs: one case, as the local runner runs it.

Usage (submitit calls it in the job; :class:`parabench.sweep.slurm.SlurmExecutor` submits it)::

    result = run_case(config.to_dict())        # a Result's dict, for the driver to record

A case that spans nodes runs :func:`run_case_across` in each of its job's tasks instead (it
reads the job's tasks from SLURM's environment, so it runs only inside a job).

The case runs in its own process group under its timeout, its memory sampled
(:func:`parabench.case.isolate.run_isolated`), in a temporary folder of the job's. SIGTERM
(``scancel``, or the time limit's warning) unwinds like Ctrl-C, so the case's whole process
group is killed before the job ends: submitit itself ignores SIGTERM in a job. The result
records where it ran: ``env`` (host, CPU, cores, GPUs) from the node, ``extra.slurm`` the
job's id, node list, partition and the CPUs SLURM gave it.
"""

from __future__ import annotations

import dataclasses
import os
import signal
from typing import Any

from parabench.case.isolate import kill_case, run_isolated
from parabench.config import RunConfig
from parabench.core.tempdirs import runner_tempdir

#: the case as a RunConfig's JSON, for ``python -m parabench.cli.torchrun`` on every rank
CASE_ENV = "PARABENCH_CASE"

#: the job's facts a result keeps, from SLURM's environment
_JOB_VARS = {"job_id": "SLURM_JOB_ID", "nodes": "SLURM_JOB_NODELIST",
             "partition": "SLURM_JOB_PARTITION", "cpus_on_node": "SLURM_CPUS_ON_NODE"}


def _unwind(signum: int, frame: object) -> None:
    """SIGTERM in a job: unwind like Ctrl-C, so every ``finally`` runs (the case's group is
    killed); a second SIGTERM does not cut that short."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise SystemExit(128 + signum)


def run_case(config: dict[str, Any]) -> dict[str, Any]:
    """Run the case ``config`` (a RunConfig's dict) here; its Result's dict."""
    signal.signal(signal.SIGTERM, _unwind)
    with runner_tempdir() as tmp:
        result = run_isolated(RunConfig.from_dict(config), workdir=tmp)
    slurm = {name: os.environ[var] for name, var in _JOB_VARS.items() if var in os.environ}
    return dataclasses.replace(result, extra={**result.extra, "slurm": slurm}).to_dict()


def run_case_across(config: dict[str, Any]) -> dict[str, Any] | None:
    """Run the case ``config`` over the job's tasks, one ``torchrun`` agent each (a node each:
    ``--ntasks-per-node 1``), its ranks ``workers / tasks`` per agent; task 0's agent hosts
    rank 0, whose result this returns (the other tasks return None).

    The rendezvous is torchrun's static one at the job's first node, on a port picked from the
    job's id; every agent has ``--max-restarts 0`` and is stopped with its process group on
    SIGTERM. The result is rank 0's (:mod:`parabench.cli.torchrun`: summed rank peaks, ranks'
    hosts) with where it ran in ``extra.slurm``.
    """
    import json
    import subprocess
    import sys

    from parabench.case.result import read_results
    from parabench.config import ConfigError

    signal.signal(signal.SIGTERM, _unwind)
    case = RunConfig.from_dict(config)
    tasks, task = int(os.environ["SLURM_NTASKS"]), int(os.environ["SLURM_PROCID"])
    if case.workers % tasks:
        raise ConfigError(f"{case.workers} workers do not split over {tasks} nodes")
    head = subprocess.run(["scontrol", "show", "hostnames", os.environ["SLURM_JOB_NODELIST"]],
                          capture_output=True, text=True, check=True).stdout.split()[0]
    port = 20000 + int(os.environ["SLURM_JOB_ID"]) % 20000
    with runner_tempdir() as tmp:
        out = tmp / "case.jsonl"
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", str(tasks),
               "--nproc-per-node", str(case.workers // tasks), "--node-rank", str(task),
               "--master-addr", head, "--master-port", str(port), "--max-restarts", "0",
               "-m", "parabench.cli.torchrun", "--threads", str(case.threads),
               "--timeout", str(case.timeout_s), "--out", str(out)]
        env = {**os.environ, CASE_ENV: json.dumps(config)}
        agent = subprocess.Popen(cmd, env=env, start_new_session=True)
        try:
            rc = agent.wait()
        finally:  # also on SIGTERM: the agent and its ranks go with the job
            kill_case(agent.pid, {})
        if task != 0:
            return None
        rows = list(read_results(out))
        if rc != 0 or not rows:
            raise RuntimeError(f"torchrun on {tasks} node(s) exited {rc} without a result")
        result = rows[-1]
    slurm = {name: os.environ[var] for name, var in _JOB_VARS.items() if var in os.environ}
    slurm["tasks"] = tasks
    return dataclasses.replace(result, extra={**result.extra, "slurm": slurm}).to_dict()

