"""The typed parts of a :class:`~parabench.case.result.Result`, each written by one layer.

Usage::

    Window.from_dict({"unit": "steps", "steps": 5, "warmup": 1})   # unknown keys are ignored
    window.to_dict()                                                # every field, None as null
    Grading(kind="statistical", reason="BatchNorm ...")             # Method.grading's answer

Every fact that code reads from a result is a declared field here; ``Result.extra`` holds
free-form notes only (nothing in ``src/`` decides on them: tests/case/test_result.py checks).

* :class:`Window` - the lifecycle's speed windows (:mod:`parabench.case.lifecycle`)
* :class:`TimeToTarget` - time-to-target mode (:mod:`parabench.case.stopping`)
* :class:`Energy` - the energy counters (:mod:`parabench.case.energy`)
* :class:`Parity` - the verdict against the baseline (:mod:`parabench.analysis.parity`)
* :class:`Trace` - exact parity's evidence (:mod:`parabench.analysis.trajectory`)
* :class:`Machine` - the machine around the case (:mod:`parabench.case.machine`)
* :class:`Grading` - how the method says this workload is graded (``Method.grading``)
* :class:`Facts` - what the session and the runner measured that analysis reads: the forest
  predictions digest, a configuration error, fedavg's per-client samples, per-rank memory
* :class:`Evidence` - counts sent beside the figures, which the checks at the file
  (:mod:`parabench.case.audit`) hold the figures against
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import ClassVar, TypeVar

#: a JSON value as records hold it (no ``Any``: what a record stores is declared)
Json = str | int | float | bool | None | list["Json"] | dict[str, "Json"]


#: a Record subclass (typing.Self needs Python 3.11; parabench supports 3.10)
R = TypeVar("R", bound="Record")


class Record:
    """from_dict / to_dict for a flat frozen dataclass of JSON values and nested records."""

    #: fields holding a nested record (name -> class), rebuilt by :meth:`from_dict`
    nested: ClassVar[dict[str, type[Record]]] = {}

    @classmethod
    def from_dict(cls: type[R], data: dict[str, Json] | R | None) -> R | None:
        """The record for ``data`` (None for None; keys it does not declare are ignored)."""
        if data is None or isinstance(data, cls):
            return data
        if not isinstance(data, dict):
            raise TypeError(f"{cls.__name__}: expected an object, got {type(data).__name__}")
        known = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
        values = {k: v for k, v in data.items() if k in known}
        for name, kind in cls.nested.items():
            if name in values:
                values[name] = kind.from_dict(values[name])
        return cls(**values)

    def to_dict(self) -> dict[str, Json]:
        """Plain JSON data, every field (None as null: a reader finds every key)."""
        out: dict[str, Json] = {}
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            value = getattr(self, f.name)
            out[f.name] = value.to_dict() if isinstance(value, Record) else value
        return out


@dataclass(frozen=True, kw_only=True)
class Window(Record):
    """What a speed window is: its unit ("steps", "fit", "round", "epoch"), steps per window,
    where they came from ("--steps" or "auto": calibrated to ``target_s``), how many of
    ``Result.window_s`` are warm-up, the steady windows asked for (None: the CI decided how
    many, aiming at ``ci_target``)."""

    unit: str = "steps"
    steps: int | None = None
    steps_source: str | None = None
    target_s: float | None = None
    warmup: int = 0
    asked: int | None = None
    ci_target: float | None = None
    #: how many of the windows (warm-up included) are parts trained for quality, timed as
    #: windows (``Method.windows_from_training``: fedavg's rounds from the second epoch on)
    from_training: int = 0


@dataclass(frozen=True, kw_only=True)
class TimeToTarget(Record):
    """Time-to-target mode: the target (and where it came from), whether it was reached, where
    (the 1-based ``epoch``; ``epochs_to_target``, the epochs before it plus the share of its
    parts done, parts being near-equal runs of whole steps; ``samples_to_target``: every
    worker's samples trained up to that evaluation), the training seconds up to it (start-up
    apart), or why not; how often quality was evaluated (``evals_per_epoch``, the nominal
    ``eval_every_samples``, ``resolution`` in words) and every evaluation's samples and
    quality."""

    target: float | None = None
    target_source: str = ""
    higher_is_better: bool = True
    max_epochs: int | None = None
    epochs_run: int = 0
    reached: bool = False
    epoch: int | None = None
    epochs_to_target: float | None = None
    samples_to_target: int | None = None
    train_s: float | None = None
    startup_s: float | None = None
    eval_s_total: float = 0.0
    evals_per_epoch: int | None = None
    eval_every_samples: int | None = None
    resolution: str = ""
    #: the epoch (0-based) from which evaluations went between an epoch's parts; the epochs
    #: before it were evaluated at their ends only (:func:`parabench.case.stopping.mid_epoch_from`)
    mid_epoch_from: int = 0
    eval_samples: list[int] = field(default_factory=list)
    eval_quality: list[float | None] = field(default_factory=list)
    best_quality: float | None = None
    stopped_early: bool = False
    reason: str = ""
    #: a statistical method trains on past the target to the measured table's epoch budget
    #: (the converged check: :mod:`parabench.analysis.target_parity`); its quality after that epoch
    converged_epochs: int | None = None
    converged_quality: float | None = None
    #: a method graded exactly that was not at the target at serial's crossing in the sweep
    #: (``RunConfig.eval_from``) stops there: the epochs it had trained (fractional)
    stopped_at_crossing: float | None = None

    @property
    def stopped_at(self) -> float | None:
        """The epochs trained when training stopped at the target, or at serial's crossing
        (fractional where that was between the parts of an epoch); None where it did not stop
        there (not reached, or held past it to whole epochs)."""
        if self.reached and self.converged_epochs is None:
            return self.epochs_to_target
        return self.stopped_at_crossing


@dataclass(frozen=True, kw_only=True)
class Energy(Record):
    """Joules per epoch (sources summed) and per sample over the steady epochs; null joules
    with the reason when no counter is readable here."""

    source: str | None = None
    domains: list[str] | None = None
    joules_per_epoch: list[float | None] | None = None
    by_source: dict[str, list[float | None]] | None = None
    joules_per_sample: float | None = None
    reason: str = ""


@dataclass(frozen=True, kw_only=True)
class Parity(Record):
    """The comparison with the baseline: status "ok" / "failed" / "not-applicable", the
    grading kind (and, where the method's grading for this workload differs from its
    declared kind, why), the basis (quality, trajectory or predictions) and its figures."""

    status: str
    kind: str | None = None
    reason: str | None = None
    kind_reason: str | None = None
    basis: str | None = None
    gap: float | None = None
    #: quality: one number; trajectory: {"loss_rel": .., "weight_rel_l2": ..}
    tolerance: float | dict[str, float] | None = None
    baseline: str | None = None
    baseline_quality: float | None = None
    spread: float | None = None
    spread_source: str | None = None
    #: statistical: the smallest loss of quality this verdict flags in 95 % of runs (its power;
    #: :func:`parabench.analysis.ratios.detectable_loss`; for basis "target" see
    #: :mod:`parabench.analysis.target_parity`), in the tolerance's units
    detectable_loss: float | None = None
    #: where ``detectable_loss`` comes from, in words (basis "target": a calibrated store or
    #: the shipped table)
    power_source: str | None = None
    #: what the verdict's text adds to its power: the serial seeds it rests on where no
    #: calibration gave them, ``paired by seed`` where it was judged against serial at its
    #: own seed within the paired spread, or why no power can be stated (``ok, power
    #: unknown: ...``)
    power_note: str | None = None
    samples_per_client: list[int] | None = None
    # basis "trajectory" (parabench.analysis.trajectory.compare_traces)
    trajectory_ok: bool | None = None
    quality_tolerance: float | None = None
    steps: int | None = None
    loss_rel_max: float | None = None
    weight_rel_l2: float | None = None
    worst_parameter: str | None = None
    #: what differed from the baseline when it failed: "digest coverage", "steps", "first
    #: steps", "final weights", "epoch K loss", "evaluation +G" (the trajectory's verdicts)
    differs: str | None = None
    #: the whole run: the final (evaluated) weights and every epoch's training loss
    final_weight_rel_l2: float | None = None
    final_graded: bool | None = None
    epoch_loss_rel_max: float | None = None
    #: what of the whole run was not graded, and why (past the measured drift horizon, or on cuda)
    whole_run_note: str | None = None
    # basis "predictions" (seed-exact forests)
    identical: bool | None = None
    predictions_sha: str | None = None
    baseline_predictions_sha: str | None = None


@dataclass(frozen=True, kw_only=True)
class Trace(Record):
    """The first ``steps`` steps' training losses and a weight digest after them
    (``{param: {"sum": s, "norm": n, "proj": [...], "numel": e}}``, see the trajectory
    module), the coverage figures, and the digest of the final (evaluated) weights."""

    steps: int
    losses: list[float]
    digest: dict[str, dict[str, Json]] = field(default_factory=dict)
    #: what ``digest`` covered ({"tensors": T, "elements": E}) and what the model has (its
    #: floating-point parameters and persistent buffers, counted from the module); None in
    #: results recorded before digests said so
    covered: dict[str, int] | None = None
    model: dict[str, int] | None = None
    #: the digest of the weights the held-out evaluation scored (the end of training), and
    #: what it covered
    final_digest: dict[str, dict[str, Json]] | None = None
    final_covered: dict[str, int] | None = None


@dataclass(frozen=True, kw_only=True)
class Peak(Record):
    """The measured matmul peak a row's MFU is against (:mod:`parabench.case.peak`): FLOP/s
    of one device (CPU: at ``threads``) in the case's ``arithmetic`` ("fp32", "tf32", "bf16",
    "fp16"), the best of timed ``n`` x ``n`` products; ``devices``: how many the case used
    (its MFU is over ``flops`` x ``devices``); ``source``: "this sweep" (measured once per
    sweep, device and arithmetic, shared by its cases) or "this case"."""

    #: FLOP/s of one device (CPU: at ``threads``), the best of the timed products
    flops: float
    #: "fp32", "tf32", "bf16" or "fp16": what the case's matmuls and convolutions run in
    arithmetic: str
    #: the device's model (the GPU's name, the CPU's)
    device: str
    #: devices the case used: its MFU is over ``flops`` x ``devices``
    devices: int = 1
    #: torch's intra-op threads it was measured at (CPU; None on a GPU)
    threads: int | None = None
    #: the square matmul's size
    n: int | None = None
    #: "this sweep" (measured once per sweep and shared) or "this case"
    source: str = "this case"
    #: the 1-minute load average when it was measured (a busy machine reads a lower peak)
    load_1m: float | None = None


@dataclass(frozen=True, kw_only=True)
class Machine(Record):
    """The machine around the case: thread settings, load and other processes' CPU, the
    ``busy`` verdict and its basis, a note saying why figures may not hold, and the measured
    matmul ``peak`` the row's MFU is against (torch cases)."""

    nested: ClassVar[dict[str, type[Record]]] = {"peak": Peak}

    omp_wait_policy: str | None = None
    omp_wait_policy_source: str | None = None
    threads: dict[str, str | None] | None = None
    torch_intra_op_threads: list[int] | None = None
    rank_cores: list[list[int] | None] | None = None
    cores: int | None = None
    load_1m_before: float | None = None
    load_1m_after: float | None = None
    other_cores: float | None = None
    other_cpu_share: float | None = None
    case_cpu_s: float | None = None
    runner_cpu_s: float | None = None
    cores_in_use: int | None = None
    oversubscribed: bool = False
    busy: bool = False
    busy_basis: str | None = None
    note: str | None = None
    #: the measured matmul peak the row's MFU is against (torch cases; :mod:`parabench.case.peak`)
    peak: Peak | None = None


@dataclass(frozen=True, kw_only=True)
class Grading(Record):
    """How a method's results are graded against the baseline for one workload: "exact",
    "statistical" or "baseline", and why when it is not the method's declared kind."""

    kind: str
    reason: str | None = None


@dataclass(frozen=True, kw_only=True)
class Facts(Record):
    """Facts of the case that analysis and the runner read (never ``extra``)."""

    #: the case failed on bad input (a ConfigError): the CLI exits with a usage error
    config_error: bool = False
    #: digest of a forest's held-out predictions: seed-exact forests' parity evidence
    predictions_sha: str | None = None
    #: fedavg: each client's samples per epoch (the equal-work figure the parity shows)
    samples_per_client: list[int] | None = None
    #: the worker process's own peak RSS (the runner's sampled peak never goes below it)
    self_max_rss_mb: float | None = None
    #: each rank's torch intra-op threads and pinned cores (recorded in ``Result.machine``)
    rank_threads: list[int] | None = None
    rank_cores: list[list[int] | None] | None = None
    #: torchrun: each rank's peak RSS / PSS and host (summed into the result's peaks)
    rank_max_rss_mb: list[float] | None = None
    rank_peak_pss_mb: list[float | None] | None = None
    rank_hosts: list[str] | None = None
    #: GPUs one worker's stages use (model parallel on cuda); the MFU is over all of them
    gpus_used: int | None = None
    #: the case was forked from a pre-started interpreter (core.prestart): that server's
    #: start and imports in seconds, paid once a sweep and not in ``startup_s`` (None: the
    #: case started plainly, its imports in its start-up)
    prestart_import_s: float | None = None
    #: a pool method's ranks were forked from the case's copy (core.rankfork: True) or spawned
    #: (False); None: no pool of its own (a serial case, torchrun's ranks)
    ranks_forked: bool | None = None


@dataclass(frozen=True, kw_only=True)
class Evidence(Record):
    """Counts taken apart from the figures a user reads, which :mod:`parabench.case.audit`
    checks those figures against after the result is assembled: the samples the data loaders
    served (every rank's count, summed apart from the ranks' claims) in each speed window and
    up to each evaluation, where the steady windows began and ended on the host clock (a
    timestamp every process of the machine shares), and the CPU seconds per wall second of the
    case's process tree over that span as the runner saw it from outside."""

    #: the loaders' samples in each speed window (aligned with ``Result.window_s``; None
    #: where the session keeps no count)
    window_served: list[int | None] = field(default_factory=list)
    #: time-to-target mode: the loaders' samples trained up to each evaluation (aligned with
    #: ``TimeToTarget.eval_samples``)
    eval_served: list[int | None] = field(default_factory=list)
    #: [start, end] of the steady windows on the host clock (``core.clock.now``), seconds
    windows_span: list[float] | None = None
    #: where the steady windows are not one block (parts trained for quality, with the
    #: evaluations between them): [start, end] of each stretch of windows; ``windows_span``
    #: then runs from the first one's start to the last one's end
    window_spans: list[list[float]] | None = None
    #: the runner's own reading of the tree's CPU seconds per wall second over
    #: ``window_spans`` (else ``windows_span``; None: not watched from outside, e.g.
    #: torchrun, or too few samples)
    outside_cores: float | None = None
