"""A case's identity, defined once, and the views of it each part of parabench compares by.

Usage::

    cid = CaseId.of(config)             # a planned case; RunConfig.key() (--resume) is this
    cid = CaseId.recorded(result)       # a result: the threads and batch it really ran with
    key = cid.group                     # CaseKey: what repeats share (a table row, a ratio)
    cid.work                            # group + epochs + seeds: what `parabench compare` pairs
    cid.history                         # what the dry run takes earlier wall times from
    cid.parity_slot                     # what parity's baseline result must share
    cid.baseline_slot("serial")         # what the planner's extra baseline runs share
    key.baseline_at(2)                  # the baseline run a ratio wants (serial, 1 worker)
    key.same_work(other)                # may a speed ratio compare the two runs?
    cid.label()                         # 'mlp/ddp cpu w=2 t=1 bs=default r0': one case
    key.label()                         # 'mlp/ddp cpu w=2x1 bs=- tiny': one configuration
    key.slug()                          # 'mlp-ddp-cpu-w2': pytest-benchmark's id, asv's
    key.scope                           # Scope('mlp', 'cpu', 'tiny'): what one answer is about

A case is a workload trained by a method on a device by ``workers`` processes of ``threads``
threads, at a batch size, profile, epochs, seed (and train seed) and repeat, with options
and (time-to-target mode) a target quality: :class:`CaseId`. Every other key is a projection
of it, named for its reader; none is spelled out anywhere else. Which options a baseline
shares is not listed here either: it derives from the options' declarations
(:class:`parabench.config.OptionSpec` ``changes_math`` / ``equal_work``, declared by the
methods and workloads that read them).

The baseline rule lives here too: a method's baseline is its ``baseline_method`` (``serial``;
``tf_serial`` for TensorFlow's methods), a method is a baseline when it is its own, and
serial fits a scikit-learn estimator on one thread whatever it is given
(:func:`baseline_threads`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

from parabench.registry import methods, option_specs, workloads

if TYPE_CHECKING:
    from parabench.case.result import Result
    from parabench.config import RunConfig

BASELINE_METHOD = "serial"


def baseline_of(method: str) -> str:
    """The method ``method`` is compared with: its ``baseline_method``, else serial."""
    if method in methods:
        return getattr(methods.get(method), "baseline_method", BASELINE_METHOD)
    return BASELINE_METHOD


def is_baseline(method: str) -> bool:
    """Whether ``method`` is a baseline others are compared with (it is its own baseline)."""
    return baseline_of(method) == method


def baseline_threads(workload: str, baseline: str, threads: int) -> int:
    """The threads ``baseline`` runs ``workload`` with when given ``threads``: serial fits a
    scikit-learn estimator with ``n_jobs=1`` whatever it is given, so its one-thread run is
    also the serial "with the same total cores" (a second run at 2 threads would repeat it)."""
    if baseline == BASELINE_METHOD and workload in workloads and (
            workloads.get(workload).family == "estimator"):  # parabench.workload.EstimatorWorkload
        return 1
    return threads


def labelled_options(options: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """The options a label shows, by name: all but those declared ``in_label=False`` (a
    path); an option no registered owner declares (an older result's) is shown."""
    specs = option_specs()
    return [(k, v) for k, v in sorted(options.items()) if k not in specs or specs[k].in_label]


def options_label(options: Mapping[str, Any]) -> str:
    """``"name=value ..."`` of :func:`labelled_options`, or ``"-"``: a group's options."""
    return " ".join(f"{k}={v}" for k, v in labelled_options(options)) or "-"


def math_options() -> tuple[str, ...]:
    """Options that change what is computed: parity's baseline must share them."""
    return tuple(n for n, spec in option_specs().items() if spec.changes_math)


def work_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """The options in ``options`` away from their defaults that change the work timed but not
    the mathematics (activation checkpointing, compile, the DataLoader knobs): a baseline run
    with them is graded on the same baseline without them."""
    specs = option_specs()
    return {k: v for k, v in options.items()
            if k in specs and specs[k].equal_work and not specs[k].changes_math
            and v != specs[k].default}


def shared_options(label: str) -> str:
    """The part of an options label a speed ratio's baseline must share: the options that
    change the mathematics or the work timed (``changes_math`` / ``equal_work``)."""
    specs = option_specs()
    shared = {n for n, s in specs.items() if s.changes_math or s.equal_work}
    return " ".join(o for o in label.split() if o.split("=")[0] in shared)


def slug(*parts: object) -> str:
    """``parts`` joined by ``-`` with every run of characters outside ``[A-Za-z0-9_.+-]``
    made ``_``: a file, URL or test id part."""
    return re.sub(r"[^A-Za-z0-9_.+-]+", "_", "-".join(str(p) for p in parts))


class Scope(NamedTuple):
    """What one answer is about: a workload on a device at a profile (a plain tuple)."""

    workload: str
    device: str
    profile: str

    def label(self) -> str:
        return f"{self.workload} on {self.device} at {self.profile}"

    def slug(self) -> str:
        return slug(self.workload, self.device, self.profile)


class CaseKey(NamedTuple):
    """What identifies a configuration (its repeats share it); a plain tuple underneath.

    :attr:`CaseId.group` makes it; its fields are strings where a result's table shows them.
    """

    workload: str
    method: str
    device: str
    workers: int
    batch: str          # "-": the workload's default for the profile
    profile: str
    options: str        # "name=value ..." or "-"
    threads: int        # threads per worker

    @property
    def scope(self) -> Scope:
        return Scope(self.workload, self.device, self.profile)

    def label(self) -> str:
        """``mlp/ddp cpu w=2x1 bs=64 tiny`` and the options: one configuration, any repeat."""
        text = (f"{self.workload}/{self.method} {self.device} w={self.workers}x{self.threads} "
                f"bs={self.batch} {self.profile}")
        return text + ("" if self.options == "-" else f" {self.options}")

    def slug(self) -> str:
        """``mlp-ddp-cpu-w2``: the id of a benchmark case (pytest-benchmark's; asv's
        parameters are the same four values)."""
        return slug(self.workload, self.method, self.device, f"w{self.workers}")

    def baseline_at(self, threads: int) -> CaseKey:
        """The baseline run this case's ratio wants: its baseline method, one worker of
        ``threads`` threads, the rest (workload, device, batch, profile, options) its own."""
        return self._replace(method=baseline_of(self.method), workers=1, threads=threads)

    def same_work(self, other: CaseKey) -> bool:
        """Whether a speed ratio may compare the two runs: equal keys but for the options
        that change neither the mathematics nor the work timed (the cheap fields first)."""
        return (self._replace(options="") == other._replace(options="")
                and shared_options(self.options) == shared_options(other.options))


def seed_label(seed: int, train_seed: int | None) -> str:
    """`` seed=3`` / `` train_seed=1003`` as a label's tail: empty for seed 0's own training."""
    return ("" if seed == 0 else f" seed={seed}") + (
        "" if train_seed is None else f" train_seed={train_seed}")


@dataclass(frozen=True, kw_only=True)
class CaseId:
    """The identity of one case (hashable): equal ids are the same case."""

    workload: str
    method: str
    device: str
    workers: int
    threads: int
    batch: int | str | None
    profile: str
    epochs: int
    seed: int
    repeat: int
    options: tuple[tuple[str, Any], ...] = ()
    target_quality: float | None = None
    #: :attr:`parabench.config.RunConfig.train_seed` (None: the seed's own training)
    train_seed: int | None = None

    @classmethod
    def of(cls, config: RunConfig) -> CaseId:
        """A planned case: the batch it asks for (None: the default), its thread share."""
        return cls(workload=config.workload, method=config.method, device=config.device,
                   workers=config.workers, threads=config.threads, batch=config.batch_size,
                   profile=config.profile, epochs=config.epochs, seed=config.seed,
                   repeat=config.repeat, options=tuple(sorted(config.options.items())),
                   target_quality=config.target_quality, train_seed=config.train_seed)

    @classmethod
    def recorded(cls, r: Result) -> CaseId:
        """A result's case as it ran: its recorded threads per worker and batch size."""
        config = r.config or {}
        return cls(workload=r.workload, method=r.method, device=r.device, workers=r.workers,
                   threads=r.threads_per_worker, batch=r.batch_size, profile=r.profile,
                   epochs=r.epochs, seed=r.seed, repeat=r.repeat,
                   options=tuple(sorted((config.get("options") or {}).items())),
                   target_quality=config.get("target_quality"),
                   train_seed=config.get("train_seed"))

    @property
    def scope(self) -> Scope:
        return Scope(self.workload, self.device, self.profile)

    def label(self) -> str:
        """``mlp/ddp cpu w=2 t=1 bs=default`` with its options and target, and ``r<repeat>``:
        one case, as the progress lines and the dry run show it."""
        bs = "default" if self.batch is None else self.batch
        opts = "".join(f" {k}={v}" for k, v in labelled_options(dict(self.options)))
        if self.target_quality is not None:
            opts += f" target={self.target_quality:g}"
        if self.train_seed is not None:
            opts += f" train_seed={self.train_seed}"
        return (f"{self.workload}/{self.method} {self.device} w={self.workers} "
                f"t={self.threads} bs={bs}{opts} r{self.repeat}")

    def work_label(self) -> str:
        """The group's label with epochs (and a seed other than 0): what compare pairs."""
        return self.group.label() + f" e={self.epochs}" + seed_label(self.seed, self.train_seed)

    @property
    def group(self) -> CaseKey:
        """What repeats (and seeds, epochs, targets) share: one row of the table."""
        batch = "-" if self.batch is None else str(self.batch)
        return CaseKey(self.workload, self.method, self.device, self.workers, batch,
                       self.profile, options_label(dict(self.options)), self.threads)

    @property
    def work(self) -> tuple[Any, ...]:
        """The group at its epochs and seed: the same work, paired by ``parabench compare``."""
        return (*self.group, self.epochs, self.seed, self.train_seed)

    @property
    def history(self) -> tuple[Any, ...]:
        """What the dry run's earlier wall times are looked up by (any threads, batch, options)."""
        return (self.workload, self.method, self.device, self.workers, self.profile,
                self.epochs)

    @property
    def parity_slot(self) -> tuple[Any, ...]:
        """What parity's baseline result shares with this one (method and device aside): the
        same training, workers and threads aside, and the options that change the math."""
        options = dict(self.options)
        return (self.workload, self.profile, self.seed, self.train_seed, self.epochs,
                str(self.batch),
                tuple((k, options.get(k)) for k in math_options()))

    def baseline_slot(self, method: str) -> tuple[Any, ...]:
        """What the planner's runs of baseline ``method`` share with the cases they serve
        (workers and threads aside): one planned baseline run per option set and repeat."""
        return (self.workload, method, self.device, self.batch,
                tuple(sorted(self.options, key=str)), self.repeat)

