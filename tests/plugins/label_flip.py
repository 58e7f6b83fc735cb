"""Degraded training, for the quality gate's power: ``serial_flip`` trains on partly wrong labels.

Usage (a test plugin, loaded like every plugin)::

    PYTHONPATH=tests/plugins PARABENCH_PLUGINS=label_flip PARABENCH_FLIP_FRACTION=0.3 \\
        parabench run --workload mlp --method serial,serial_flip --profile tiny --epochs 3

``serial_flip`` is serial whose training labels are changed, once, before the first step:
a seeded ``PARABENCH_FLIP_FRACTION`` (default 0.3) of the training samples each get another
class, ``(y + r) mod C`` with ``r`` drawn from 1..C-1. It is real training on degraded data: the
held-out set is untouched and no figure is edited, so its quality falls by what the flipped
labels cost. Graded statistically (``parity = "statistical"``), it is the method the
statistical verdict's stated power (``ok, blind <L``) is checked against: with no labels
flipped it must pass, with enough flipped it must fail (``tests/analysis/test_label_flip.py``). The
result's notes say how many labels were flipped (``flipped_labels``). Classification
workloads only: a workload whose targets are not class indices is refused with the reason.

The fraction is read from the environment, as ``slow_steps`` reads its slowdown: a method
option would be part of the case's identity, and the point is the same case, degraded.
``serial_flip2`` is the same with its own fraction (``PARABENCH_FLIP_FRACTION2``, default
0.6), so one run holds a clean and a degraded method beside one serial baseline.

``forest_flip`` is the estimator's twin: serial's forest fitted with ``random_state`` = its
training seed + 1 (another forest of the same data, as a sound statistical forest is) on
training labels of which the same seeded fraction is flipped. At fraction 0 it is the A/A
case of a forest verdict paired by seed; above it, the planted fault
(``python scripts/quality_gate_power.py --workload random_forest --method forest_flip``).
"""

from __future__ import annotations

import os
from typing import Any, ClassVar

from parabench.config import RunConfig
from parabench.method import Session
from parabench.methods.serial import Serial, SerialEstimatorSession
from parabench.registry import methods
from parabench.torch.local import SerialTorchSession
from parabench.workload import Dataset, EstimatorWorkload, TorchWorkload, Workload

FRACTION_ENV = "PARABENCH_FLIP_FRACTION"
DEFAULT_FRACTION = 0.3
FRACTION2_ENV = "PARABENCH_FLIP_FRACTION2"
DEFAULT_FRACTION2 = 0.6


def flip_fraction(env: str = FRACTION_ENV, default: float = DEFAULT_FRACTION) -> float:
    fraction = float(os.environ.get(env) or default)
    if not 0 <= fraction <= 1:
        raise ValueError(f"{env} must be in [0, 1]; got {fraction}")
    return fraction


class FlipSession(SerialTorchSession):
    """Serial, with a seeded fraction of its training labels moved to another class."""

    fraction_from: ClassVar[tuple[str, float]] = (FRACTION_ENV, DEFAULT_FRACTION)

    def start(self) -> None:
        import torch

        super().start()
        y = self.case.data.y  # the tensor the training loop indexes (flipped in place)
        if y.dtype.is_floating_point or y.dim() != 1:
            raise ValueError(f"serial_flip needs class labels; {self.workload.name}'s targets "
                             f"are {y.dtype} of shape {tuple(y.shape)}")
        classes = int(y.max()) + 1
        n = len(y)
        fraction = flip_fraction(*self.fraction_from)
        k = round(fraction * n) if classes > 1 else 0
        g = torch.Generator().manual_seed(self.config.seed * 7919 + 17)
        index = torch.randperm(n, generator=g)[:k].to(y.device)
        shift = torch.randint(1, max(classes, 2), (k,), generator=g).to(y.device)
        y[index] = (y[index] + shift.to(y.dtype)) % classes
        self.notes["flipped_labels"] = k
        self.notes["flip_fraction"] = fraction


@methods.register
class SerialFlip(Serial):
    name: ClassVar[str] = "serial_flip"
    description: ClassVar[str] = "serial on labels of which a fraction is flipped (test plugin)"
    devices: ClassVar[tuple[str, ...]] = ("cpu",)
    families: ClassVar[frozenset[str]] = frozenset({"torch"})
    parity: ClassVar[str] = "statistical"
    session_class: ClassVar[type[FlipSession]] = FlipSession

    def session(self, workload: Workload, config: RunConfig) -> Session:
        if not isinstance(workload, TorchWorkload):
            raise TypeError(f"{self.name} cannot train {type(workload).__name__}")
        return self.session_class(workload, config)


class FlipSession2(FlipSession):
    fraction_from: ClassVar[tuple[str, float]] = (FRACTION2_ENV, DEFAULT_FRACTION2)


@methods.register
class SerialFlip2(SerialFlip):
    name: ClassVar[str] = "serial_flip2"
    description: ClassVar[str] = "serial_flip at PARABENCH_FLIP_FRACTION2 (test plugin)"
    session_class: ClassVar[type[FlipSession]] = FlipSession2


class ForestFlipSession(SerialEstimatorSession):
    """Serial's forest from another ``random_state`` on partly flipped training labels."""

    def fit(self, data: Dataset) -> Any:
        import numpy as np

        y = np.array(data.y_train, copy=True)
        classes = int(y.max()) + 1
        fraction = flip_fraction()
        k = round(fraction * len(y)) if classes > 1 else 0
        rng = np.random.default_rng(self.config.seed * 7919 + 17)
        index = rng.permutation(len(y))[:k]
        y[index] = (y[index] + rng.integers(1, max(classes, 2), k)) % classes
        self.notes.update(flipped_labels=k, flip_fraction=fraction)
        est = self.workload.build_estimator(self.config.profile, self.config.training_seed + 1,
                                            self.n_jobs)
        est.fit(data.x_train, y)
        return est


@methods.register
class ForestFlip(Serial):
    name: ClassVar[str] = "forest_flip"
    description: ClassVar[str] = ("serial's forest, another random_state, a fraction of labels "
                                  "flipped (test plugin)")
    devices: ClassVar[tuple[str, ...]] = ("cpu",)
    families: ClassVar[frozenset[str]] = frozenset({"estimator"})
    parity: ClassVar[str] = "statistical"

    def session(self, workload: Workload, config: RunConfig) -> Session:
        if not isinstance(workload, EstimatorWorkload):
            raise TypeError(f"{self.name} cannot train {type(workload).__name__}")
        return ForestFlipSession(workload, config)
