"""Planted bugs for the checks at the file: real methods whose figures go wrong on the way to
the results file, one hop each.

Usage (a test plugin, loaded like every plugin)::

    PYTHONPATH=tests/plugins PARABENCH_PLUGINS=figure_bugs parabench run --workload mlp \\
        --method serial,serial_assembled2x,ddp_onecpu,fedavg_assembled2x --workers 1,2 \\
        --threads 1 --profile tiny --epochs 1 --windows 2

Each trains exactly as its base method does; what goes wrong is a figure:

* ``<method>_assembled2x`` (serial, ddp, fedavg, tp): while the case assembles its result
  (:func:`parabench.case.execute._finish`), samples/s is doubled, and in time-to-target mode
  every evaluation's sample count too. Nothing inside the case sees it; the check at the file
  does (:mod:`parabench.case.audit`: samples/s against the loaders' served samples over the
  windows' seconds; the evaluations against the loaders' count up to each).
* ``ddp_onecpu`` / ``fedavg_onecpu``: the case's CPU seconds per wall second measured on its
  own process, not its tree (the ranks are other processes), so a case that kept two cores
  busy would read as one or none. The runner's reading from outside disagrees.
* ``tp_eachcount`` (gpt): every tensor rank counts the samples it shares with its replica's
  other ranks, so samples and served are both doubled (they agree with each other); the
  lifecycle's window check (steps x global batch) must fail the case.
"""

from __future__ import annotations

import dataclasses
import resource
from typing import Any

from parabench.case import execute, lifecycle
from parabench.config import RunConfig
from parabench.core.measure import _rusage_cpu_s
from parabench.method import Session
from parabench.methods.ddp import DDP
from parabench.methods.fedavg import FedAvg
from parabench.methods.serial import Serial
from parabench.methods.tp import TensorParallel
from parabench.registry import methods
from parabench.torch.tensor_parallel import TensorParallelProgram, TensorParallelSession
from parabench.workload import Workload

#: the faults planted in this process (a planted method's session() adds its own)
PLANTED: set[str] = set()


def _planted(base: type, fault: str) -> None:
    def session(self: Any, workload: Workload, config: RunConfig) -> Session:
        PLANTED.add(fault)
        return base.session(self, workload, config)

    name = f"{base.name}_{fault}"
    methods.register(type(f"{base.__name__}_{fault}", (base,), {
        "name": name, "description": f"planted bug: {fault} (tests/plugins/figure_bugs.py)",
        "session": session, "__module__": __name__}))


for _base in (Serial, DDP, FedAvg, TensorParallel):
    _planted(_base, "assembled2x")
for _base in (DDP, FedAvg):
    _planted(_base, "onecpu")

_finish = execute._finish


def _doubled_finish(*args: Any, **kwargs: Any) -> Any:
    result = _finish(*args, **kwargs)
    if "assembled2x" not in PLANTED:
        return result
    ttt = result.time_to_target
    if ttt is not None:
        ttt = dataclasses.replace(ttt, eval_samples=[2 * n for n in ttt.eval_samples])
    return dataclasses.replace(result, time_to_target=ttt, samples_per_s=(
        None if result.samples_per_s is None else 2 * result.samples_per_s))


class _OwnCpuRate(lifecycle.CpuRate):
    """CpuRate reading this process alone when ``onecpu`` is planted."""

    def __enter__(self) -> _OwnCpuRate:
        super().__enter__()
        self._own0 = _rusage_cpu_s(resource.RUSAGE_SELF)
        return self

    def __exit__(self, *exc: object) -> None:
        super().__exit__(*exc)
        if "onecpu" in PLANTED and self.span:
            self.cpu_s = own = _rusage_cpu_s(resource.RUSAGE_SELF) - self._own0
            self.cores = round(own / (self.span[1] - self.span[0]), 3)


class EachCountProgram(TensorParallelProgram):
    """Every tensor rank counts its replica's samples (one should)."""

    def counts_samples(self) -> bool:
        return True


methods.register(type("TensorParallelEachCount", (TensorParallel,), {
    "name": "tp_eachcount", "description": "planted bug: every tensor rank counts the samples",
    "session_class": type("EachCountSession", (TensorParallelSession,),
                          {"program": EachCountProgram, "__module__": __name__}),
    "__module__": __name__}))

execute._finish = _doubled_finish
lifecycle.CpuRate = _OwnCpuRate
