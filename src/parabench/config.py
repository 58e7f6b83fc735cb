"""Run configuration: one frozen, validated description of one benchmark case.

Usage::

    cfg = RunConfig(workload="mlp", method="serial", workers=1, profile="tiny")
    cfg = RunConfig.from_dict({"workload": "mlp", "method": "serial"})   # unknown keys rejected
    cfg.to_dict()

Validation happens on construction, so a RunConfig that exists is a RunConfig that makes
sense; errors are :class:`ConfigError` (a ``ValueError``) whose message says what is valid.
Whether the *names* exist is the registry's business (:mod:`parabench.registry`), and so are
the options: each method and workload declares the ones it reads (:class:`OptionSpec`), and a
case's options are checked against those declarations; ``cfg.option(name)`` reads the value
or the declared default. A case's identity (``cfg.key()``) is :class:`parabench.identity.CaseId`.
"""

from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import KW_ONLY, dataclass, field
from typing import Any, Literal

from parabench.identity import CaseId
from parabench.registry import declared_option, option_specs
from parabench.stopping import Epochs, ToTarget

DEVICES = ("cpu", "cuda")
PROFILES = ("tiny", "quick", "full")
AUTO = "auto"
#: :meth:`RunConfig.option`'s "no default given": the owner's declared default is read
DECLARED: Any = object()

BatchSize = int | Literal["auto"] | None


class ConfigError(ValueError):
    """A configuration value is invalid; the message says what is valid."""


@dataclass(frozen=True)
class OptionSpec:
    """A method/workload knob carried in ``RunConfig.options`` (a grid axis on the CLI).

    Declared by its owner, never in a central table: a method or workload lists the options it
    reads in its ``options`` mapping (name -> spec), and :func:`parabench.registry.option_specs`
    collects them, plugins included. ``default`` is what :meth:`RunConfig.option` reads when
    the case leaves the option unset (per owner: ``stages`` is 2 for model_parallel, one per
    worker for pipeline). ``changes_math``: the option changes what is computed, so parity's
    baseline must share it; ``equal_work``: it changes the work timed (the DataLoader knobs),
    so a speed ratio's baseline must share it too. ``family``: the workload family it applies
    to (None: any). ``in_label``: shown in case labels and the table (a path is not).
    """

    kind: type
    help: str
    choices: tuple[str, ...] = ()
    minimum: int | None = None
    _: KW_ONLY
    default: Any = None
    changes_math: bool = False
    equal_work: bool = False
    family: str | None = None
    in_label: bool = True

    def validate(self, name: str, value: Any) -> None:
        if self.kind is int:
            _require_int(f"option {name}", value, self.minimum or 0)
        elif not isinstance(value, self.kind):
            raise ConfigError(f"option {name} must be a {self.kind.__name__}, got {value!r}")
        if self.choices and value not in self.choices:
            raise ConfigError(
                f"option {name}={value!r} is not valid; valid: {', '.join(self.choices)}"
            )

    def with_default(self, default: Any) -> OptionSpec:
        """The same knob with another owner's default (``stages``: 2 here, per worker there)."""
        return dataclasses.replace(self, default=default)

    def same_knob(self, other: OptionSpec) -> bool:
        """Whether two owners' declarations of one name agree (each may have its own default
        and help text; the type, the valid values and what it changes must be the same)."""
        return dataclasses.replace(self, help="", default=None) == dataclasses.replace(
            other, help="", default=None)


def available_cores() -> int:
    """Cores this process may run on (respects affinity masks / cgroup cpusets)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - macOS / Windows
        return os.cpu_count() or 1


def _require_int(name: str, value: Any, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{name} must be an integer >= {minimum}, got {value!r}")
    if value < minimum:
        raise ConfigError(f"{name} must be >= {minimum}, got {value}")


@dataclass(frozen=True, kw_only=True)
class RunConfig:
    """One case: which workload, which method, on what, how big, how often.

    ``batch_size`` None means the workload's default for the profile; ``"auto"`` asks the
    method to find the largest batch that fits. ``threads_per_worker`` None means the fair
    share ``cores // workers`` (at least 1).
    """

    workload: str
    method: str
    device: str = "cpu"
    workers: int = 1
    threads_per_worker: int | None = None
    batch_size: BatchSize = None
    #: the most epochs this case trains: all of them when ``target_quality`` is None, else the
    #: cap on the way to the target (``stop`` is the same rule, typed)
    epochs: int = 3
    profile: str = "quick"
    seed: int = 0
    #: the seed of the training's own randomness (the initial weights, each epoch's sample
    #: order, fedavg's client split, a forest's random_state); None: ``seed``, which also
    #: draws the data. Another train seed on the same data is another sound run of that data,
    #: what ``parabench calibrate --train-seed-offset`` measures (read it as ``training_seed``)
    train_seed: int | None = None
    repeat: int = 0
    timeout_s: float = 600.0
    options: dict[str, Any] = field(default_factory=dict)
    #: time-to-accuracy mode (parabench.case.stopping): stop at the first epoch whose held-out
    #: quality reaches this; ``epochs`` is then the most epochs tried. None: fixed epochs
    target_quality: float | None = None
    #: training steps per speed window (parabench.case.windows): None picks them so a window
    #: takes about WINDOW_TARGET_S; 0 measures no windows (epoch mode only). Not part of
    #: ``key``: the window changes how finely speed is sampled, not what the case trains
    steps: int | None = None
    #: steady speed windows after the warm-up one; None: ``$PARABENCH_WINDOWS`` or the
    #: rule's WINDOWS (parabench.case.windows; a test suite sets the variable low: it checks)
    windows: int | None = None
    #: time to target, a method graded exactly: the samples at which serial, run before it in
    #: this sweep, first reached the target (set by the sweep: parabench.sweep.run.crossing_hint);
    #: the case is evaluated there only, and stops there. Not part of ``key``
    eval_from: int | None = None

    def __post_init__(self) -> None:
        for name in ("workload", "method"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value:
                raise ConfigError(f"{name} must be a non-empty name, got {value!r}")
        if self.device not in DEVICES:
            raise ConfigError(f"unknown device {self.device!r}; valid: {', '.join(DEVICES)}")
        if self.profile not in PROFILES:
            raise ConfigError(f"unknown profile {self.profile!r}; valid: {', '.join(PROFILES)}")
        _require_int("workers", self.workers, 1)
        if self.threads_per_worker is not None:
            _require_int("threads_per_worker", self.threads_per_worker, 1)
        if self.batch_size is not None and self.batch_size != AUTO:
            _require_int("batch_size", self.batch_size, 1)
        _require_int("epochs", self.epochs, 1)
        _require_int("seed", self.seed, 0)
        if self.train_seed is not None:
            _require_int("train_seed", self.train_seed, 0)
        if self.steps is not None:
            _require_int("steps", self.steps, 0)
        if self.windows is not None:
            _require_int("windows", self.windows, 2)
        _require_int("repeat", self.repeat, 0)
        if self.eval_from is not None:
            _require_int("eval_from", self.eval_from, 1)
        if isinstance(self.timeout_s, bool) or not isinstance(self.timeout_s, int | float):
            raise ConfigError(f"timeout_s must be a number of seconds, got {self.timeout_s!r}")
        if not math.isfinite(self.timeout_s) or self.timeout_s <= 0:
            raise ConfigError(f"timeout_s must be > 0 and finite, got {self.timeout_s}")
        if self.target_quality is not None and (
            isinstance(self.target_quality, bool)
            or not isinstance(self.target_quality, int | float)
            or not math.isfinite(self.target_quality)
        ):
            raise ConfigError(
                f"target_quality must be a finite number, got {self.target_quality!r}"
            )
        if not isinstance(self.options, dict):
            raise ConfigError(f"options must be a mapping, got {type(self.options).__name__}")
        specs = option_specs() if self.options else {}  # no options: no registry to load
        for name, value in self.options.items():
            if name not in specs:
                raise ConfigError(
                    f"unknown option {name!r}; valid: {', '.join(sorted(specs))}"
                )
            if value is not None:
                specs[name].validate(name, value)
        # Freeze a private copy without unset (None) options, so {} and {"x": None} are the
        # same case, and a caller mutating its dict cannot change this one.
        object.__setattr__(
            self, "options", {k: v for k, v in sorted(self.options.items()) if v is not None}
        )

    @property
    def training_seed(self) -> int:
        """The seed of the training's randomness: ``train_seed``, else ``seed``."""
        return self.seed if self.train_seed is None else self.train_seed

    @property
    def threads(self) -> int:
        """Threads each worker process gets: explicit, or the fair share of the cores."""
        if self.threads_per_worker is not None:
            return self.threads_per_worker
        return max(1, available_cores() // self.workers)

    def oversubscribed(self, cores: int | None = None) -> bool:
        """True when workers x threads exceeds the cores available."""
        return self.workers * self.threads > (cores or available_cores())

    def replace(self, **changes: Any) -> RunConfig:
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunConfig:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ConfigError(
                f"unknown config key(s): {', '.join(unknown)}; valid: {', '.join(sorted(known))}"
            )
        return cls(**data)

    def key(self) -> CaseId:
        """Identity of the case (:class:`parabench.identity.CaseId`); ``--resume`` recognises
        finished cases by it."""
        return CaseId.of(self)

    @property
    def stop(self) -> Epochs | ToTarget:
        """This case's stopping rule, resolved: exactly ``epochs`` epochs, or to the number
        ``target_quality`` within ``epochs`` epochs (:mod:`parabench.stopping`)."""
        if self.target_quality is None:
            return Epochs(self.epochs)
        return ToTarget(self.target_quality, max_epochs=self.epochs)

    def with_stop(self, rule: Epochs | ToTarget) -> RunConfig:
        """This case under a resolved ``rule`` (a :class:`ToTarget` with a number and a cap)."""
        if isinstance(rule, Epochs):
            return self.replace(epochs=rule.n, target_quality=None)
        if rule.quality is None or rule.max_epochs is None:
            raise ConfigError(f"a case's rule is resolved (a number and a cap), got {rule}")
        return self.replace(epochs=rule.max_epochs, target_quality=rule.quality)

    def option(self, name: str, default: Any = DECLARED) -> Any:
        """``options[name]``, or when unset the default declared by the option's owner (this
        case's method, else its workload; see :class:`OptionSpec`). A ``default`` given here
        overrides the declared one (for callers outside parabench; parabench restates none)."""
        spec = declared_option(name, method=self.method, workload=self.workload)  # KeyError
        if name in self.options:
            return self.options[name]
        return spec.default if default is DECLARED else default

    def label(self) -> str:
        """This case's label (:meth:`parabench.identity.CaseId.label`)."""
        return self.key().label()
