"""Injected slowdowns: ``serial_slow`` and ``ddp_slow`` do real extra work in every training step.

Usage (a test plugin, loaded like every plugin)::

    PYTHONPATH=tests/plugins PARABENCH_PLUGINS=slow_steps PARABENCH_SLOW_FRACTION=0.10 \\
        parabench run --workload mlp --method serial_slow --profile tiny --epochs 1

Every training iteration (from the end of the previous one, or the start of the training
call, to its optimizer step: fetching the batch, forward, backward, step) is followed by
extra work lasting ``PARABENCH_SLOW_FRACTION`` (default 0: none) of that iteration's own wall
time: a busy loop by default (``PARABENCH_SLOW_MODE=spin``: CPU work, as a real regression
is), or ``sleep``. With fraction f every iteration takes (1 + f) times as long, so the case's
samples/s falls to 1 / (1 + f): a "10 %" plant is a 10 % slowdown of what the gate judges,
whatever share of an iteration data handling or other threads take. The recorded figures are
never touched: the case is simply slower.

The fraction is read from the environment, not from a method option, on purpose: options
are part of a case's identity (``parabench compare`` matches cases by it), and a regression
is a change of code, not of the case. So the gate harness (``scripts/gate_harness.py``) runs
the same case, ``serial_slow``, on both sides and sets the variable on the NEW side only;
with fraction 0 ``serial_slow`` is serial plus a no-op optimizer hook.

The plugin's own counter: ``PARABENCH_SLOW_COUNTER_DIR=DIR`` makes every training process
write ``DIR/<pid>.json`` (``steps``, ``step_s``: the iterations' own seconds, ``extra_s``:
the seconds of extra work, ``spins``: busy-loop iterations) after each epoch or speed window;
``serial_slow`` also puts them in the result's notes (``slow_*``).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any, ClassVar

from parabench.method import EpochStats, Session
from parabench.methods.ddp import DDP, DDPProgram, DDPSession
from parabench.methods.serial import Serial
from parabench.registry import methods
from parabench.torch.local import SerialTorchSession

FRACTION_ENV, MODE_ENV, COUNTER_ENV = ("PARABENCH_SLOW_FRACTION", "PARABENCH_SLOW_MODE",
                                       "PARABENCH_SLOW_COUNTER_DIR")
MODES = ("spin", "sleep")


class Slowdown:
    """The hooks and the counters of one training process."""

    def __init__(self) -> None:
        self.fraction = float(os.environ.get(FRACTION_ENV) or 0.0)
        self.mode = os.environ.get(MODE_ENV) or "spin"
        if not 0 <= self.fraction < 10 or self.mode not in MODES:
            raise ValueError(f"{FRACTION_ENV} must be in [0, 10) and {MODE_ENV} one of "
                             f"{', '.join(MODES)}; got {self.fraction}, {self.mode!r}")
        # wall seconds (perf_counter) for both the iteration and the extra work (a spin keeps
        # the core busy meanwhile): under load both stretch alike, so the plant stays f of the
        # iteration; a spin timed by CPU seconds would miss other threads' share of the step
        self.started: float | None = None  # the current iteration's start; None: not training
        self.steps, self.step_s, self.extra_s, self.spins = 0, 0.0, 0.0, 0

    def begin(self) -> None:
        """A training call starts: its first iteration is timed from here (not from the
        previous call's last step, with evaluation in between). Steps before any begin() get
        no extra work."""
        self.started = time.perf_counter()

    def install(self, optimizer: Any) -> None:
        optimizer.register_step_post_hook(self._after_step)

    def _after_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        if self.started is None:
            return
        now = time.perf_counter()
        own = now - self.started
        target, spins = own * self.fraction, 0
        if target > 0 and self.mode == "sleep":
            time.sleep(target)
        elif target > 0:
            while time.perf_counter() - now < target:  # busy: real CPU work
                spins += 1
        end = time.perf_counter()
        self.steps += 1
        self.step_s += own
        self.extra_s += end - now if target > 0 else 0.0
        self.spins += spins
        self.started = end  # the next iteration starts where this one's extra work ended

    def counters(self) -> dict[str, Any]:
        return {"fraction": self.fraction, "mode": self.mode, "steps": self.steps,
                "step_s": self.step_s, "extra_s": self.extra_s, "spins": self.spins}

    def dump(self) -> None:
        if folder := os.environ.get(COUNTER_ENV):
            path = Path(folder) / f"{os.getpid()}.json"
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps(self.counters()))
            tmp.replace(path)


class SlowSerialSession(SerialTorchSession):
    def start(self) -> None:
        super().start()
        self.slowdown = Slowdown()
        self.slowdown.install(self.loop.optimizer)

    def train(self, epoch: int, indices: Any = None, span: Any = None) -> EpochStats:
        self.slowdown.begin()
        stats = super().train(epoch, indices, span)
        self.slowdown.dump()
        self.notes.update({f"slow_{k}": v for k, v in self.slowdown.counters().items()})
        return stats


@methods.register
class SlowSerial(Serial):
    name: ClassVar[str] = "serial_slow"
    description: ClassVar[str] = "serial with injected extra work per step (test plugin)"
    families: ClassVar[frozenset[str]] = frozenset({"torch"})
    baseline_method: ClassVar[str] = "serial_slow"  # its own baseline, as serial is

    def session(self, workload: Any, config: Any) -> Session:
        return SlowSerialSession(workload, config)


class SlowDDPProgram(DDPProgram):
    slowdown: Slowdown | None = None

    def _train(self, run: Any, weighted: bool = True) -> EpochStats:
        if self.slowdown is None:  # the first training call: the loop's optimizer exists
            self.slowdown = Slowdown()
            self.slowdown.install(self.loop.optimizer)
        self.slowdown.begin()
        stats = super()._train(run, weighted)
        self.slowdown.dump()
        return stats


@methods.register
class SlowDDP(DDP):
    name: ClassVar[str] = "ddp_slow"
    description: ClassVar[str] = "ddp with injected extra work per step (test plugin)"
    session_class: ClassVar[type[Session]] = type(
        "SlowDDPSession", (DDPSession,), {"program": SlowDDPProgram, "__module__": __name__})
    baseline_method: ClassVar[str] = "serial_slow"
    coverage_rank: ClassVar[int | None] = None
