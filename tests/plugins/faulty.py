"""Test-only workloads that misbehave inside ``fit``, run through the real ``serial`` method.

Loaded in runner subprocesses through ``PARABENCH_PLUGINS=faulty`` with this folder on
``PYTHONPATH``. A workload that starts a helper process writes the helper's pid to the file
named by ``PARABENCH_TEST_PIDFILE`` so a test can check it is gone afterwards.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from typing import Any, ClassVar

import numpy as np

from parabench.config import OptionSpec
from parabench.methods.serial import Serial
from parabench.registry import methods, workloads
from parabench.workload import Dataset, EstimatorWorkload, Quality


def _spawn_sleeper() -> None:
    """A grandchild that would outlive the case if the runner did not kill it."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    with open(os.environ["PARABENCH_TEST_PIDFILE"], "a") as fh:
        fh.write(f"{proc.pid}\n")


class _Estimator:
    def __init__(self, behaviour: str) -> None:
        self.behaviour = behaviour
        self.classes_ = np.array([0, 1])

    def fit(self, x: np.ndarray, y: np.ndarray) -> _Estimator:
        if self.behaviour == "raise":
            raise RuntimeError("boom in fit")
        if self.behaviour == "exit":
            _spawn_sleeper()
            os._exit(3)
        if self.behaviour == "hang":
            _spawn_sleeper()
            time.sleep(600)
        if self.behaviour == "oom":
            raise MemoryError("cannot allocate the forest")
        return self

    def predict(self, x: np.ndarray) -> np.ndarray:
        return (x[:, 0] > 0).astype(np.int64)

    def predict_proba(self, x: np.ndarray) -> np.ndarray:
        p = (x[:, 0] > 0).astype(float) * 0.8 + 0.1
        return np.stack([1 - p, p], axis=1)


class _Fault(EstimatorWorkload):
    behaviour: ClassVar[str]
    quality: ClassVar[Quality] = Quality(name="accuracy", higher_is_better=True)

    def make_data(self, profile: str, seed: int, data_dir: str | None = None) -> Dataset:
        rng = np.random.default_rng(seed)
        x = rng.normal(size=(200, 3)).astype(np.float32)
        y = (x[:, 0] > 0).astype(np.int64)
        return Dataset(x_train=x[:160], y_train=y[:160], x_test=x[160:], y_test=y[160:],
                       n_classes=2)

    def build_estimator(self, profile: str, seed: int, n_jobs: int) -> Any:
        return _Estimator(self.behaviour)


# fault_ok, fault_raise, fault_exit, fault_hang, fault_oom
for _behaviour in ("ok", "raise", "exit", "hang", "oom"):
    workloads.register(
        type(f"Fault{_behaviour.title()}", (_Fault,),
             {"name": f"fault_{_behaviour}", "behaviour": _behaviour})
    )


@methods.register
class WideSerial(Serial):
    """Serial that accepts any worker count: only for thread-budget planning tests."""

    name = "wide_serial"
    max_workers = None
    parity = "exact"  # the same math as serial, checked against it
    # a plugin's own option, declared by the method that reads it (the registry collects it)
    options = {**Serial.options,
               "fault_knob": OptionSpec(int, "test-only plugin option", minimum=1)}


