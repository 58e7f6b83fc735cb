"""Results: one JSON object per case, schema-versioned, appended to JSON Lines atomically.

Usage::

    append_result("results.jsonl", result)          # one write(2) of one whole line
    for r in read_results("results.jsonl"): ...     # torn / foreign lines are skipped, not fatal
    Result.from_dict(json.loads(line))              # round-trips to_dict()

Everything downstream (summary table, pytest-benchmark extra_info, asv tracks) reads these.
"""

from __future__ import annotations

import dataclasses
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

SCHEMA = 1
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
    #: what a window is: unit ("steps", "fit", "round", "epoch"), steps (per window, unit
    #: "steps"), steps_source ("--steps" or "auto": calibrated to target_s), warmup (how many
    #: of ``window_s`` are warm-up)
    window: dict[str, Any] | None = None
    loss: list[float] = field(default_factory=list)
    quality: QualityValue | None = None
    peak_rss_mb: float | None = None
    #: peak of the PSS sum over the case's processes (shared pages counted once; see
    #: parabench.case.measure); None when no PSS was readable. Its source: extra.peak_pss_source
    peak_pss_mb: float | None = None
    peak_gpu_mb: float | None = None
    cpu_efficiency: float | None = None
    wall_s: float | None = None
    #: seconds per epoch of each time component (data, forward, backward, optimizer,
    #: communication, idle: whatever the method measures), aligned with ``epoch_s``
    components: dict[str, list[float]] = field(default_factory=dict)
    #: forward + backward FLOPs per training sample (torch.utils.flop_counter)
    flops_per_sample: float | None = None
    #: held-out quality after each epoch, aligned with ``epoch_s`` (time-to-target mode only)
    epoch_quality: list[float | None] = field(default_factory=list)
    #: time-to-target mode (see parabench.case.target): target, reached, epoch (1-based),
    #: train_s (epoch times summed up to it), startup_s apart, or the reason it was not reached
    time_to_target: dict[str, Any] | None = None
    #: energy (see parabench.case.energy): source, joules_per_epoch, joules_per_sample (steady
    #: epochs), by_source; null joules with the reason when no counter is readable here
    energy: dict[str, Any] | None = None
    #: comparison with the serial baseline (see parabench.analysis.parity): status ok / failed /
    #: not-applicable, gap, tolerance, baseline
    parity: dict[str, Any] | None = None
    #: exact parity's evidence (see parabench.analysis.trajectory): the per-step training loss
    #: of the first ``steps`` steps and a weight digest after them, from serial's initial
    #: weights and data order
    trace: dict[str, Any] | None = None
    #: the machine around the case (see parabench.case.machine): load average and other
    #: processes' CPU share before/after, thread settings (OMP_WAIT_POLICY, ...), ``busy``
    machine: dict[str, Any] = field(default_factory=dict)
    #: the RunConfig as requested (top-level fields hold what actually ran)
    config: dict[str, Any] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)
    env: dict[str, Any] = field(default_factory=dict)
    git_commit: str | None = None
    timestamp: str = ""
    schema: int = SCHEMA

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"unknown status {self.status!r}; valid: {', '.join(STATUSES)}")

    @property
    def window_rates(self) -> list[float]:
        """Samples per second of each steady speed window (the warm-up ones left out)."""
        skip = (self.window or {}).get("warmup", 0)
        pairs = list(zip(self.window_s, self.window_samples, strict=False))[skip:]
        return [n / s for s, n in pairs if s > 0]

    @property
    def steady_epoch_s(self) -> list[float]:
        """Epoch times without the first (warm-up) epoch, when there is more than one."""
        return self.epoch_s[1:] if len(self.epoch_s) > 1 else list(self.epoch_s)

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
        """Each component's median over the steady epochs (the first dropped, as for time)."""
        out = {}
        for name, values in self.components.items():
            steady = values[1:] if len(values) > 1 else values
            if steady:
                out[name] = statistics.median(steady)
        return out

    @property
    def achieved_flops(self) -> float | None:
        """FLOP/s over the steady epochs (samples/s x FLOPs per sample)."""
        if self.flops_per_sample and self.samples_per_s:
            return self.flops_per_sample * self.samples_per_s
        return None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

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
        if schema != SCHEMA:
            raise ValueError(f"result schema {schema!r} is not supported (this is {SCHEMA})")
        for entry in (data.get("extra") or {}).get("non_finite", []):
            _restore(data, str(entry))  # the NaN / infinity to_json wrote as null
        known = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        if isinstance(values.get("quality"), dict):
            values["quality"] = QualityValue(**values["quality"])
        return cls(**values)

    def case_key(self) -> tuple[Any, ...] | None:
        """The requested case's :meth:`RunConfig.key`, for ``--resume`` (None if unknown)."""
        from parabench.config import ConfigError, RunConfig

        try:
            return RunConfig.from_dict(self.config).key()
        except (ConfigError, TypeError):
            return None


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


def append_result(path: str | os.PathLike[str], result: Result) -> None:
    """Append one line with a single ``write`` on an O_APPEND descriptor, then fsync.

    A runner killed at any moment leaves either the whole line or none of it. If an earlier
    writer left a torn last line anyway, a newline is written first, so the damage stays on
    its own line (which readers skip) instead of swallowing this result.
    """
    line = (result.to_json() + "\n").encode()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        if _ends_torn(fd):
            line = b"\n" + line
        written = os.write(fd, line)
        if written != len(line):  # pragma: no cover - would need a full disk
            raise OSError(f"short write to {path}: {written} of {len(line)} bytes")
        os.fsync(fd)
    finally:
        os.close(fd)


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
