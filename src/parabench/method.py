"""Methods (*how* a workload is parallelized) and the Session lifecycle they open.

Usage::

    method = methods.get("serial")
    if (reason := method.check(workload, config)) is None:
        with method.session(workload, config) as s:
            s.start()                       # spawn / rendezvous / JIT: timed once as startup_s
            for epoch in range(config.epochs):
                stats = s.train_epoch(epoch)  # steady state: never spawns anything
            quality = s.evaluate()
            stats = s.train_window(0, steps=20)   # speed: one window (after the epochs)
            parts = s.epoch_parts(8)          # time to target: an epoch in up to 8 parts,
            stats = s.train_part(3, 0, parts)  # each followed by an evaluation
        # close() ran: nothing of the session is left running, even after an error

The harness drives these steps through :class:`parabench.case.lifecycle.CaseLifecycle`, which
sets ``session.clock`` and ``session.launcher`` before ``start`` and times start-up itself.

Speed is measured in *windows* after the epochs (:mod:`parabench.case.lifecycle`): a session
whose ``window_unit`` is ``"steps"`` trains ``steps`` global mini-batch steps per window, drawn
from :func:`parabench.torch.loop.window_order` (full global batches, the same samples for
every method); any other session's window is one more epoch (``"epoch"``) or one more fit
(``"fit"``, the estimators), the default :meth:`Session.train_window`.

**Parts of an epoch.** Time-to-target mode (:mod:`parabench.case.stopping`) evaluates
held-out quality between *parts* of an epoch: ``epoch_parts(wanted)`` says how many the
session trains an epoch in (at most ``wanted``; the default 1: whole epochs only) and
``train_part(epoch, part, parts)`` trains one of them. The parts of an epoch, in order, train
exactly what ``train_epoch(epoch)`` trains (the same batches in the same order, the same
random stream), so evaluating between them changes nothing but when quality is read.

A method declares what it ``requires`` (see :mod:`parabench.hardware`), the ``devices`` it
runs on, and which workloads it ``supports``. ``check`` turns all of that into one reason
string, so the runner can record a skipped case instead of crashing on it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from parabench import hardware
from parabench.config import OptionSpec, RunConfig, available_cores
from parabench.core.clock import Clock
from parabench.core.launcher import POOL, Launcher
from parabench.core.records import Facts, Grading
from parabench.registry import declared_option
from parabench.workload import Workload

#: how many steps a session traces for exact parity (fewer when an epoch has fewer): part of
#: the trace format that :mod:`parabench.analysis.trajectory` reads, fixed where it is recorded
TRACE_STEPS = 20


@dataclass(frozen=True, kw_only=True)
class EpochStats:
    """One training epoch as the session measured it.

    ``seconds`` is wall time of the epoch (for multi-process methods: the slowest rank's
    time between barriers); ``samples`` counts every rank's samples. ``served`` is the
    independent count taken where the data is served (every rank's loader, summed), which the
    lifecycle checks ``samples`` against; None where a session keeps no such count.
    """

    seconds: float
    loss: float
    samples: int
    components: dict[str, float] = field(default_factory=dict)
    served: int | None = None

    @classmethod
    def join(cls, parts: list[EpochStats]) -> EpochStats:
        """One epoch from its parts (:meth:`Session.train_part`): seconds, samples,
        components and served counts summed, the loss weighted by samples."""
        if len(parts) == 1:
            return parts[0]
        seconds = samples = 0
        components: dict[str, float] = {}
        for p in parts:
            seconds, samples = seconds + p.seconds, samples + p.samples
            for name, value in p.components.items():
                components[name] = components.get(name, 0.0) + value
        loss = sum(p.loss * p.samples for p in parts) / samples if samples else float("nan")
        served = [p.served for p in parts]
        return cls(seconds=seconds, loss=loss, samples=samples, components=components,
                   served=None if None in served else sum(s or 0 for s in served))


#: epoch numbers of the windows a non-step session trains: far past any epoch run for quality
WINDOW_EPOCH_BASE = 1_000_000


class Session(ABC):
    """A started method + workload pair. Subclasses implement the four lifecycle steps."""

    #: what one speed window is: ``"steps"`` (``train_window`` trains that many global
    #: steps), ``"epoch"`` or ``"fit"`` (one more epoch: an estimator's epoch is one fit)
    window_unit: ClassVar[str] = "epoch"
    #: whether its ranks may be the processes ``torchrun`` started, on one node or several
    #: (:mod:`parabench.cli.torchrun`; a multi-node SLURM job, :mod:`parabench.sweep.slurm`)
    spans_nodes: ClassVar[bool] = False

    def __init__(self, workload: Workload, config: RunConfig) -> None:
        self.workload = workload
        self.config = config
        #: filled by the session so the result records what actually ran
        self.threads_per_worker: int = config.threads
        self.batch_size: int | None = None
        self.samples_per_epoch: int = 0
        #: forward + backward FLOPs per training sample, where the session can count them
        self.flops_per_sample: float | None = None
        #: free-form notes for ``Result.extra`` (shown, never decided on)
        self.notes: dict[str, Any] = {}
        #: facts analysis reads (``Result.facts``): set them here, never in ``notes``
        self.facts = Facts()
        #: exact parity's evidence, when the session records it: the first steps' losses and
        #: a weight digest after them (format: :mod:`parabench.analysis.trajectory`)
        self.trace: dict[str, Any] | None = None
        #: the harness's clock (:mod:`parabench.core.clock`): the lifecycle replaces it before
        #: ``start``; a session times its work with ``self.clock.time`` and reads no timer itself
        self.clock = Clock()
        #: where rank processes come from (:mod:`parabench.core.launcher`), set by the
        #: lifecycle with the clock; only multi-process sessions ask it for their group
        self.launcher: Launcher = POOL

    @abstractmethod
    def start(self) -> None:
        """Everything done once: data, model, processes, clusters, compilation."""

    @abstractmethod
    def train_epoch(self, epoch: int) -> EpochStats:
        """Train one epoch over the training data and time it."""

    def train_window(self, window: int, steps: int) -> EpochStats:
        """One speed window (see the module doc); by default one more epoch, ``steps`` unused."""
        return self.train_epoch(WINDOW_EPOCH_BASE + window)

    def epoch_parts(self, wanted: int) -> int:
        """The parts (at most ``wanted``) this session trains an epoch in with
        :meth:`train_part`; by default 1: it trains whole epochs only."""
        return 1

    def train_part(self, epoch: int, part: int, parts: int) -> EpochStats:
        """Part ``part`` (0-based) of ``parts`` (:meth:`epoch_parts`) of epoch ``epoch``; the
        parts in order train what :meth:`train_epoch` does (see the module doc).

        The default serves sessions of whole epochs (``epoch_parts`` 1): its one part is the
        epoch; asking it for more parts is a caller's error, said as such."""
        if parts != 1:
            raise ValueError(f"{type(self).__name__} trains an epoch in 1 part "
                             f"(epoch_parts), asked for part {part + 1} of {parts}")
        return self.train_epoch(epoch)

    @abstractmethod
    def evaluate(self) -> float:
        """The workload's quality metric on held-out data."""

    def keep_final_weights(self) -> None:  # noqa: B027 - optional hook: most keep nothing
        """After the final evaluation, before the speed windows (which train on): keep what
        parity needs of the weights that evaluation scored (the torch sessions' final weight
        digest). Called once per case, so the per-part evaluations of time-to-target mode
        do not pay for it."""

    def close(self) -> None:  # noqa: B027 - optional hook: most sessions hold nothing to free
        """Release everything ``start`` acquired. Must be safe to call twice or after errors."""

    def peak_gpu_mb(self) -> float | None:
        return None

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Method(ABC):
    """Base of all methods. Subclasses set the class attributes and implement ``session``."""

    name: ClassVar[str]
    description: ClassVar[str] = ""
    requires: ClassVar[frozenset[str]] = frozenset()
    devices: ClassVar[tuple[str, ...]] = ("cpu",)
    #: workload families this method can train ("torch", "estimator")
    families: ClassVar[frozenset[str]] = frozenset()
    #: True for a peer: another library's own implementation run as it ships (XGBoost,
    #: LightGBM, cuML), compared with parabench's engines; ``parabench list`` groups them apart
    peer: ClassVar[bool] = False
    #: None: any count; otherwise the largest worker count this method can use
    max_workers: ClassVar[int | None] = None
    #: how results compare with ``serial`` (see :mod:`parabench.analysis.parity`): "exact" -
    #: the same mathematics, so held-out quality must match serial's to float tolerance;
    #: "statistical" - a different algorithm (federated averaging, histogram forests, Spark),
    #: so quality must be within a margin derived from serial's seed-to-seed spread;
    #: "baseline" - this is what the others are compared with.
    parity: ClassVar[str] = "exact"
    #: the method (one with parity "baseline") whose results parity and speedup compare with:
    #: TensorFlow's methods are compared with ``tf_serial``, everything else with ``serial``
    baseline_method: ClassVar[str] = "serial"
    #: the options this method reads, name -> declaration (type, default, whether it changes
    #: the mathematics: :class:`~parabench.config.OptionSpec`); the registry collects them,
    #: so a plugin's own option is declared here and nowhere else. An option given on the
    #: command line that no selected method or workload reads is refused before anything runs
    options: ClassVar[Mapping[str, OptionSpec]] = {}
    #: seconds this method takes to start a ``tiny`` case on 2 cores (imports, processes,
    #: clusters, JIT; for the forest peers, their fit beyond sklearn's): the dry run's and the
    #: coverage planner's guess (:mod:`parabench.sweep.dryrun`, which says how the built-in
    #: figures were measured). None: the dry run assumes its fallback and says so on the line
    startup_guess_s: ClassVar[float | None] = None
    #: rank among the methods the coverage grid may pick to stand for data parallelism on a
    #: workload (lowest first, the first that trains it); None: never picked. Read from the
    #: class itself, not inherited: a subclass is a variant (a plugin), not the family's face
    coverage_rank: ClassVar[int | None] = None
    #: why the method cannot train in ``channels_last`` (None: it can); e.g. FSDP2 shards
    #: only contiguous parameters
    no_channels_last: ClassVar[str | None] = None
    #: True where a part of an epoch (``Session.train_part``) is the unit of a speed window
    #: (``Session.train_window``), as fedavg's round is: in time-to-target mode the lifecycle
    #: then times the parts trained for quality from the second epoch on as the speed windows,
    #: instead of training more parts only to time them
    #: (:meth:`~parabench.case.lifecycle.CaseLifecycle.measure_windows`)
    windows_from_training: ClassVar[bool] = False

    def supports(self, workload: Workload) -> bool:
        return workload.family in self.families

    def devices_for(self, workload: Workload) -> tuple[str, ...]:
        """Devices this method can train ``workload`` on (default: all of ``devices``)."""
        return self.devices

    def default_workers(self, cores: int | None = None) -> list[int]:
        """Worker counts a default sweep tries: 1, 2, 4, ... up to the cores here."""
        cores = cores or available_cores()
        limit = min(cores, self.max_workers or cores)
        counts, n = [], 1
        while n <= limit:
            counts.append(n)
            n *= 2
        return counts

    def unavailable(self, device: str = "cpu") -> str | None:
        """Why this method cannot run on this machine at all (None: it can)."""
        needs = set(self.requires) | ({"cuda"} if device == "cuda" else set())
        return hardware.missing(needs)

    def check(self, workload: Workload, config: RunConfig) -> str | None:
        """Why this case cannot run here (None: it can). Never raises for a bad combination."""
        if not self.supports(workload):
            return f"{self.name} does not support workload {workload.name} ({workload.family})"
        if config.device not in (devices := self.devices_for(workload)):
            return f"{self.name} runs {workload.name} on {', '.join(devices)}, not {config.device}"
        if self.max_workers is not None and config.workers > self.max_workers:
            return f"{self.name} runs at most {self.max_workers} worker(s), asked {config.workers}"
        if workload.family != "torch" and config.batch_size == "auto":
            return f"--batch-size auto applies to mini-batch workloads, not {workload.name}"
        family_of = {k: declared_option(k, self.name).family for k in config.options}
        foreign = [k for k, f in family_of.items() if f is not None and f != workload.family]
        if foreign:  # e.g. the DataLoader knobs on a forest
            return (f"{', '.join(foreign)} apply to {family_of[foreign[0]]} workloads, "
                    f"not {workload.name}")
        if config.option("precision") == "fp16" and config.device != "cuda":
            return "fp16 autocast needs CUDA; use --precision bf16 on CPU"
        if self.no_channels_last and config.options.get("channels_last") == "on":
            return f"{self.name} cannot train in channels_last: {self.no_channels_last}"
        return self.unavailable(config.device) or hardware.missing(workload.requires)

    def grading(self, workload: Workload, config: RunConfig) -> Grading:
        """How this case's results are graded against the baseline (recorded in the result,
        read by :mod:`parabench.analysis.parity`): the declared ``parity``, unless a method
        declares otherwise for a workload here (with the reason)."""
        return Grading(kind=self.parity)

    @abstractmethod
    def session(self, workload: Workload, config: RunConfig) -> Session:
        """A not-yet-started session for this case."""
