"""Planted waits for the wall-time split: each sleeps in one part of a case, so a test can see
the seconds land in that part (``Result.wall_parts``) and in no other.

Usage (a test plugin, loaded like every plugin)::

    PYTHONPATH=tests/plugins PARABENCH_PLUGINS=wall_plants parabench run \\
        --workload mlp,mlp_slowdata \\
        --method serial,serial_slowclose,serial_slowcheck,serial_sloweval \\
        --profile tiny --epochs 1 --windows 2

* ``serial_slowclose``: the session's ``close`` sleeps :data:`PLANT_S` first (part ``close``);
* ``serial_slowcheck``: the method's ``check`` (can the case run here?) sleeps
  :data:`PLANT_S` first (part ``check``);
* ``serial_sloweval``: every held-out evaluation sleeps :data:`EVAL_PLANT_S` first (part
  ``evaluate``; the result's ``time_to_target.eval_quality`` counts them);
* workload ``mlp_slowdata``: mlp whose data generation sleeps :data:`PLANT_S` first (part
  ``data``; built once per sweep folder, then read from its cache).

Training is serial's and mlp's own: only the planted wait is added.
"""

from __future__ import annotations

import time
from typing import Any

from parabench.config import RunConfig
from parabench.method import Session
from parabench.methods.serial import Serial
from parabench.registry import methods, workloads
from parabench.workload import Workload
from parabench.workloads.mlp import MLP

PLANT_S = 0.8
EVAL_PLANT_S = 0.8  # as PLANT_S: the other parts of two cases differ by up to 0.15 s (exit)


def _slowed(session: Session, attr: str, seconds: float) -> Session:
    real = getattr(session, attr)

    def slow(*args: Any, **kwargs: Any) -> Any:
        time.sleep(seconds)
        return real(*args, **kwargs)

    setattr(session, attr, slow)
    return session


@methods.register
class SerialSlowClose(Serial):
    name = "serial_slowclose"
    description = f"serial whose close sleeps {PLANT_S} s (tests/plugins/wall_plants.py)"

    def session(self, workload: Workload, config: RunConfig) -> Session:
        return _slowed(super().session(workload, config), "close", PLANT_S)


@methods.register
class SerialSlowCheck(Serial):
    name = "serial_slowcheck"
    description = f"serial whose check sleeps {PLANT_S} s (tests/plugins/wall_plants.py)"

    def check(self, workload: Workload, config: RunConfig) -> str | None:
        time.sleep(PLANT_S)
        return super().check(workload, config)


@methods.register
class SerialSlowEval(Serial):
    name = "serial_sloweval"
    description = (f"serial whose evaluations each sleep {EVAL_PLANT_S} s "
                   "(tests/plugins/wall_plants.py)")

    def session(self, workload: Workload, config: RunConfig) -> Session:
        return _slowed(super().session(workload, config), "evaluate", EVAL_PLANT_S)


@workloads.register
class MLPSlowData(MLP):
    name = "mlp_slowdata"
    description = f"mlp whose data generation sleeps {PLANT_S} s (tests/plugins/wall_plants.py)"

    def make_data(self, *args: Any, **kwargs: Any) -> Any:
        time.sleep(PLANT_S)
        return super().make_data(*args, **kwargs)
