"""Results: one JSON object per case, schema-versioned, appended to JSON Lines atomically.

Usage::

    append_result("results.jsonl", result)          # one write(2) of one whole line
    for r in read_results("results.jsonl"): ...     # torn / foreign lines are skipped, not fatal
    Result.from_dict(json.loads(line))              # round-trips to_dict()

Everything downstream (summary table, pytest-benchmark extra_info, asv tracks) reads these.

Each part a layer writes is a typed record (:mod:`parabench.core.records`): ``window``,
``time_to_target``, ``energy``, ``parity``, ``trace``, ``machine``, ``grading`` (how the method
grades this workload) and ``facts`` (what analysis and the runner read: predictions digest,
configuration error, per-rank figures). ``extra`` is free-form notes, shown and never decided
on (tests/case/test_typed_results.py checks src/). Schema-1 lines, which kept those facts in
``extra``, still read (:mod:`parabench.case.legacy`). A result recorded under a method name since
retired reads under the current one (:data:`parabench.registry.RENAMED_METHODS`: ``threads``
is ``rf_threads``), for ``--resume``, ``report`` and ``compare`` alike.
"""

from __future__ import annotations

import dataclasses
import errno
import fcntl
import json
import math
import os
import re
import statistics
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from parabench.case.legacy import upgraded
from parabench.core.records import (
    Energy,
    Evidence,
    Facts,
    Grading,
    Machine,
    Parity,
    Record,
    TimeToTarget,
    Trace,
    Window,
)
from parabench.identity import CaseId

__all__ = ["FAILED_STATUSES", "SCHEMA", "STATUSES", "Energy", "Evidence", "Facts", "Grading",
           "Machine", "Parity", "QualityValue", "Result", "TimeToTarget", "Trace", "Window",
           "ResultWriteError", "append_result", "read_results"]

#: 2: typed sub-records (window, time_to_target, energy, parity, trace, machine), ``grading``
#: and ``facts`` declared instead of keys in ``extra``; 1 still reads (:mod:`parabench.case.legacy`)
SCHEMA = 2
STATUSES = ("ok", "failed", "timeout", "oom", "skipped")
FAILED_STATUSES = frozenset({"failed", "timeout", "oom"})


@dataclass(frozen=True, kw_only=True)
class QualityValue:
    name: str
    value: float | None
    higher_is_better: bool


@dataclass(frozen=True, kw_only=True)
class Result:
    """One case's outcome. Times in seconds, memory in MiB."""

    workload: str
    method: str
    device: str
    workers: int
    threads_per_worker: int
    batch_size: int | str | None
    epochs: int
    profile: str
    seed: int
    repeat: int
    status: str
    reason: str = ""
    startup_s: float | None = None
    epoch_s: list[float] = field(default_factory=list)
    eval_s: float | None = None
    samples_per_epoch: int | None = None
    #: steady-state throughput: the median of the steady speed windows' samples/s (results
    #: without windows: samples per epoch over the median steady epoch)
    samples_per_s: float | None = None
    #: 95 % bootstrap confidence interval [low, high] of ``samples_per_s`` (None: fewer than
    #: two steady windows); see parabench.analysis.stats.median_ci
    samples_per_s_ci: list[float] | None = None
    #: every speed window in order, the warm-up one(s) first (parabench.case.lifecycle): its
    #: seconds and the samples it trained (all ranks)
    window_s: list[float] = field(default_factory=list)
    window_samples: list[int] = field(default_factory=list)
    #: what a window is (unit, steps, how many of ``window_s`` are warm-up): see Window
    window: Window | None = None
    loss: list[float] = field(default_factory=list)
    quality: QualityValue | None = None
    peak_rss_mb: float | None = None
    #: peak of the PSS sum over the case's processes (shared pages counted once; see
    #: parabench.core.measure); None when no PSS was readable. Its source: extra.peak_pss_source
    peak_pss_mb: float | None = None
    #: what training needs on its largest GPU, MB: ``torch.cuda.max_memory_allocated`` from
    #: the first step on, evaluation apart, less the data kept on the device (those two are
    #: ``extra.gpu_eval_peak_mb`` / ``extra.gpu_data_mb``); per rank in ``extra`` for
    #: multi-GPU methods
    peak_gpu_mb: float | None = None
    cpu_efficiency: float | None = None
    #: CPU seconds the case's processes used per wall second over the steady speed windows
    #: (the cores really kept busy; None: no windows, or not measurable, e.g. under torchrun);
    #: near 1 on a case that asked for more, on a machine that was not busy, the table says
    #: ``ran on ~1 core`` (parabench.analysis.summary.one_core)
    window_cores: float | None = None
    wall_s: float | None = None
    #: ``wall_s`` split by part, seconds (parabench.analysis.wall): ``launch`` (process start
    #: and parabench's imports), ``start`` (the session's start, its engine's imports included,
    #: less the ``data`` and ``model`` it built in the case's process), ``train`` (the epochs),
    #: ``evaluate``, ``windows`` (every speed window), ``bookkeeping`` (between parts and
    #: windows), ``close``, ``peak`` (the matmul peak), ``exit`` (the runner's remainder: the
    #: result, writing it, the process's exit)
    wall_parts: dict[str, float] = field(default_factory=dict)
    #: seconds per epoch of each time component (data, forward, backward, optimizer,
    #: communication, idle: whatever the method measures), aligned with ``epoch_s``
    components: dict[str, list[float]] = field(default_factory=dict)
    #: forward + backward FLOPs per training sample (torch.utils.flop_counter)
    flops_per_sample: float | None = None
    #: model FLOPs utilisation: ``flops_per_sample`` x ``samples_per_s`` over the measured
    #: matmul peak of the case's arithmetic x its devices (``machine.peak``,
    #: :mod:`parabench.case.peak`); None: not a torch case, no speed, or not measured
    mfu: float | None = None
    #: held-out quality after each epoch (its last evaluation; a last epoch cut short by time
    #: to target: where it stopped; None: not evaluated, as before serial's crossing or while
    #: held past the target), aligned with ``epoch_s`` (time-to-target mode only; every
    #: evaluation: ``time_to_target.eval_quality``)
    epoch_quality: list[float | None] = field(default_factory=list)
    #: time-to-target mode (see parabench.case.stopping and TimeToTarget)
    time_to_target: TimeToTarget | None = None
    #: energy (see parabench.case.energy and Energy)
    energy: Energy | None = None
    #: comparison with the serial baseline (see parabench.analysis.parity and Parity)
    parity: Parity | None = None
    #: exact parity's evidence (see parabench.analysis.trajectory): the per-step training loss
    #: of the first ``steps`` steps and a weight digest after them, from serial's initial
    #: weights and data order
    trace: Trace | None = None
    #: the machine around the case (see parabench.case.machine and Machine)
    machine: Machine | None = None
    #: how this method is graded for this workload (``Method.grading``); None: the method's
    #: declared kind (a result written before grading was recorded)
    grading: Grading | None = None
    #: facts analysis and the runner read: predictions digest, config error, rank memory
    facts: Facts = field(default_factory=Facts)
    #: counts the checks at the file hold the figures against (see Evidence)
    evidence: Evidence | None = None
    #: the RunConfig as requested (top-level fields hold what actually ran)
    config: dict[str, Any] = field(default_factory=dict)
    #: free-form notes (sessions' ``notes``, traceback, memory sources): shown, never decided on
    extra: dict[str, Any] = field(default_factory=dict)
    env: dict[str, Any] = field(default_factory=dict)
    git_commit: str | None = None
    #: the workload's version (:func:`parabench.workloads.version.workload_version`): a
    #: fingerprint of the code that defines its model and data; ``compare`` and ``--resume``
    #: take a result of another version for another case. None: written before versions
    #: were recorded, compared as before
    workload_version: str | None = None
    timestamp: str = ""
    schema: int = SCHEMA

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"unknown status {self.status!r}; valid: {', '.join(STATUSES)}")
        for name, kind in RECORDS.items():  # a record given as its dict (a test, a script)
            if isinstance(value := getattr(self, name), dict):
                object.__setattr__(self, name, kind.from_dict(value) or kind())

    @property
    def window_rates(self) -> list[float]:
        """Samples per second of each steady speed window (the warm-up ones left out)."""
        skip = self.window.warmup if self.window else 0
        pairs = list(zip(self.window_s, self.window_samples, strict=False))[skip:]
        return [n / s for s, n in pairs if s > 0]

    @property
    def steady_epoch_s(self) -> list[float]:
        """Epoch times without the first (warm-up) epoch, when there is more than one (and
        without a last epoch time to target cut short: :meth:`steady`)."""
        return self.steady(self.epoch_s)

    def steady(self, per_epoch: list[float]) -> list[float]:
        """``per_epoch`` without the first (warm-up) epoch, and without a last epoch that time
        to target stopped between its parts, each while another one is left."""
        if self.cut_short and len(per_epoch) > 1:
            per_epoch = per_epoch[:-1]  # a part of an epoch: not an epoch's time
        return per_epoch[1:] if len(per_epoch) > 1 else list(per_epoch)

    @property
    def cut_short(self) -> bool:
        """Whether time to target stopped the last epoch between its parts."""
        ttt = self.time_to_target
        return bool(ttt is not None and (ttt.stopped_at or 0) % 1)

    @property
    def peak_mb(self) -> float | None:
        """Peak memory: the PSS sum when recorded, else the RSS sum (older results)."""
        return self.peak_pss_mb if self.peak_pss_mb is not None else self.peak_rss_mb

    @property
    def median_epoch_s(self) -> float | None:
        """Seconds of one steady-state epoch: the epoch's samples at the windows' median
        throughput when windows were measured (so ratios never include warm-up), else the
        median steady epoch."""
        if self.window_rates and self.samples_per_epoch:
            return self.samples_per_epoch / statistics.median(self.window_rates)
        steady = self.steady_epoch_s
        return statistics.median(steady) if steady else None

    def median_components(self) -> dict[str, float]:
        """Each component's median over the steady epochs (:meth:`steady`, as for time)."""
        out = {}
        for name, values in self.components.items():
            steady = self.steady(values)
            if steady:
                out[name] = statistics.median(steady)
        return out

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            out[f.name] = (value.to_dict() if isinstance(value, Record)
                           else dataclasses.asdict(value) if isinstance(value, QualityValue)
                           else value)
        return out

    def to_json(self) -> str:
        """Strict JSON: a non-finite number becomes null, its path noted in ``extra``."""
        data = self.to_dict()
        replaced: list[str] = []
        data = _finite(data, "", replaced)
        if replaced:
            data["extra"]["non_finite"] = sorted(set(data["extra"].get("non_finite", [])
                                                     + replaced))
        return json.dumps(data, sort_keys=True, allow_nan=False, default=str)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Result:
        if not isinstance(data, dict):
            raise ValueError(f"not a result object: a JSON {type(data).__name__}")
        schema = data.get("schema")
        if schema not in (1, SCHEMA):
            raise ValueError(f"result schema {schema!r} is not supported (this is {SCHEMA}; "
                             f"1 still reads)")
        for entry in (data.get("extra") or {}).get("non_finite", []):
            _restore(data, str(entry))  # the NaN / infinity to_json wrote as null
        data = upgraded(data)
        known = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        if isinstance(values.get("quality"), dict):
            values["quality"] = QualityValue(**values["quality"])
        for name, kind in RECORDS.items():
            if name in values:
                values[name] = kind.from_dict(values[name])
        if values.get("facts") is None:
            values.pop("facts", None)
        return cls(**values)

    def case_key(self) -> tuple[Any, ...] | None:
        """The requested case's :meth:`RunConfig.key`, for ``--resume`` (None if unknown)."""
        from parabench.config import ConfigError, RunConfig

        try:
            return RunConfig.from_dict(self.config).key()
        except (ConfigError, TypeError):
            return None


#: the Result fields that hold a typed record
RECORDS: dict[str, type[Record]] = {
    "window": Window, "time_to_target": TimeToTarget, "energy": Energy, "parity": Parity,
    "trace": Trace, "machine": Machine, "grading": Grading, "facts": Facts,
    "evidence": Evidence}

def _finite(value: Any, where: str, replaced: list[str]) -> Any:
    """``value`` with every NaN / infinity replaced by None; their paths go to ``replaced``."""
    if isinstance(value, float) and not math.isfinite(value):
        replaced.append(f"{where}={value!r}")
        return None
    if isinstance(value, dict):
        return {k: _finite(v, f"{where}.{k}" if where else str(k), replaced)
                for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v, f"{where}[{i}]", replaced) for i, v in enumerate(value)]
    return value


def _restore(data: dict[str, Any], entry: str) -> None:
    """Put back one ``path=value`` that :func:`_finite` replaced by None (best effort)."""
    path, _, text = entry.rpartition("=")
    steps = [int(s[1:-1]) if s.startswith("[") else s
             for s in re.findall(r"\[\d+\]|[^.\[\]]+", path)]
    try:
        value = float(text)
        target: Any = data
        for step in steps[:-1]:
            target = target[step]
        if steps and target[steps[-1]] is None:
            target[steps[-1]] = value
    except (ValueError, KeyError, IndexError, TypeError):
        pass  # a hand-edited entry: the null stays


def _ends_torn(fd: int) -> bool:
    """True when the file's last byte is not a newline (a writer died mid-line)."""
    size = os.fstat(fd).st_size
    return size > 0 and os.pread(fd, 1, size - 1) != b"\n"


class ResultWriteError(OSError):
    """A result could not be appended (a full disk); the bytes it got were cut off again."""


def append_result(path: str | os.PathLike[str], result: Result) -> None:
    """Append one line with a single ``write`` on an O_APPEND descriptor, then fsync.

    All or nothing: a runner killed at any moment leaves the whole line or none of it, and a
    write that fails (ENOSPC, EIO, a failed fsync) is cut off before :class:`ResultWriteError`.
    If an earlier writer left a torn last line anyway, a newline is written first, so the
    damage stays on its own line (which readers skip) instead of swallowing this result.
    """
    line = (result.to_json() + "\n").encode()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # two runs on one file: cut back only our own bytes
        start = os.fstat(fd).st_size
        if _ends_torn(fd):
            line = b"\n" + line
        try:
            _write_all(fd, line)
            os.fsync(fd)
        except OSError as exc:
            raise ResultWriteError(
                f"could not write the result of {CaseId.recorded(result).label()} to {path} "
                f"({exc.strerror or exc}); "
                f"{_cut_back(fd, start)}") from exc
    finally:
        os.close(fd)  # releases the lock


def _write_all(fd: int, line: bytes) -> None:
    """One write, as a rule; after a short one, the rest: a full disk then says ENOSPC."""
    done = 0
    while done < len(line):
        if (n := os.write(fd, line[done:])) <= 0:
            raise OSError(errno.EIO, f"short write, {done} of {len(line)} bytes")
        done += n


def _cut_back(fd: int, size: int) -> str:
    try:
        os.ftruncate(fd, size)
    except OSError as exc:
        return f"its partial line could not be removed ({exc.strerror}); readers skip it"
    return "the results before it in the file are intact; this one is not in it"


def read_results(path: str | os.PathLike[str]) -> Iterator[Result]:
    """Every whole, parseable result in ``path``; damaged or foreign lines are reported
    and skipped (torn writes, non-JSON text, JSON that is not a parabench result)."""
    p = Path(path)
    if not p.exists():
        return
    with p.open(encoding="utf-8", errors="replace") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                yield Result.from_dict(json.loads(line))
            except (ValueError, TypeError) as exc:
                warnings.warn(f"{path}:{lineno}: skipping unreadable result ({exc})", stacklevel=2)
