"""When a case stops training: one typed rule, from the command line to the case.

Usage::

    from parabench.stopping import Epochs, ToTarget

    Epochs(3)                                  # train exactly 3 epochs (the first is warm-up)
    ToTarget(0.9, max_epochs=12)               # until held-out quality reaches 0.9, at most 12
    ToTarget()                                 # each workload's own target (measured, else
                                               # 0.97 x its quick reference), the default cap
    ToTarget(otherwise=Epochs(3))              # a measured target where the workload has one
                                               # at the profile, else exactly 3 epochs
    from parabench.config import RunConfig
    RunConfig(workload="mlp", method="serial", epochs=12, target_quality=0.9).stop
                                               # one case's rule, resolved: ToTarget(0.9, 12)

The command line parses ``--epochs``, ``--target-quality`` and ``--max-epochs`` into these
values; the planner (:func:`parabench.sweep.plan.stopping_rule`) decides the grid's rule from
them, and :meth:`parabench.sweep.plan.Grid.config` resolves it per workload into the case's
:class:`~parabench.config.RunConfig`, which records it as ``epochs`` (all the epochs under
:class:`Epochs`, the cap under :class:`ToTarget`) and ``target_quality`` (None under
:class:`Epochs`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

#: epochs of a sweep given neither --epochs nor --target-quality, for a workload without a
#: measured target at the profile (:func:`parabench.sweep.plan.stopping_rule`); and of the
#: coverage grid (:mod:`parabench.sweep.coverage`)
DEFAULT_EPOCHS, COVERAGE_EPOCHS = 3, 1


class StopError(ValueError):
    """A stopping rule that cannot be: the message says what is valid."""


def _epoch_count(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise StopError(f"{name} must be an integer >= 1, got {value!r}")


@dataclass(frozen=True)
class Epochs:
    """Train exactly ``n`` epochs."""

    n: int

    def __post_init__(self) -> None:
        _epoch_count("epochs", self.n)

    def describe(self) -> str:
        return f"{self.n} epoch{'s' if self.n != 1 else ''}"


@dataclass(frozen=True)
class ToTarget:
    """Train until held-out quality reaches ``quality`` (``<=`` for lower-is-better metrics),
    at most ``max_epochs`` epochs.

    ``quality`` None: each workload's own target. ``max_epochs`` None: each workload's default
    cap (:func:`parabench.case.stopping.default_max_epochs`). ``otherwise`` (only with
    ``quality`` None): the rule of a workload that has no measured target at the profile, or
    trains on the user's own data; without it such a workload trains to the fallback target.
    """

    quality: float | None = None
    max_epochs: int | None = None
    otherwise: Epochs | None = None

    def __post_init__(self) -> None:
        q = self.quality
        if q is not None and (isinstance(q, bool) or not isinstance(q, int | float)
                              or not math.isfinite(q)):
            raise StopError(f"target quality must be a finite number, got {q!r}")
        if self.max_epochs is not None:
            _epoch_count("max_epochs", self.max_epochs)
        if self.otherwise is not None and q is not None:
            raise StopError("a numeric target applies to every workload; 'otherwise' is for "
                            "each workload's own measured target")

    def describe(self) -> str:
        what = "each workload's target" if self.quality is None else f"quality {self.quality:g}"
        cap = "" if self.max_epochs is None else f", at most {self.max_epochs} epochs"
        rest = "" if self.otherwise is None else f" (else {self.otherwise.describe()})"
        return f"to {what}{cap}{rest}"


#: the stopping rule of a grid (possibly per-workload) or of one case (resolved)
StoppingRule = Epochs | ToTarget
