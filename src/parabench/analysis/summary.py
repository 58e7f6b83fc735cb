"""The summary table's rows: one per configuration (workload, method, device, workers x
threads, batch, profile, options), its repeats folded into medians, ratios, parity and the
fastest mark. :mod:`parabench.sweep.table` draws them; what each column means is there.

Usage::

    rows = summarize(results, baselines=earlier_serial_results)
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from parabench.analysis.figures import group_key, median_times, peak_memory, recorded_busy
from parabench.analysis.ratios import is_baseline, ratios, total_cores
from parabench.analysis.recommend import parity_cell, recommend, times_to_target
from parabench.analysis.stats import median_ci
from parabench.case.result import Result

#: the reason Method.check gives for a workload the method cannot train at all
UNSUPPORTED_MARK = " does not support workload "
REASON_WIDTH = 100
#: a CPU case that asked for more cores but whose processes used at most this many per wall
#: second over its speed windows (``Result.window_cores``), on a machine that was not busy,
#: "ran on ~1 core": a warning, not a failure (an I/O-bound engine may do so honestly)
ONE_CORE = 1.3
TO_TARGET = "to target"
#: the wide table's column (and the report's) for a pipeline row's measured bubble
BUBBLE = "bubble"


@dataclass(frozen=True, kw_only=True)
class Row:
    workload: str
    method: str
    device: str
    workers: int
    batch_size: object
    #: threads per worker (the group key's; 0 when unknown)
    threads: int = 0
    options: str
    repeats: int
    status: str
    profile: str = "-"
    epoch_s: float | None = None
    epoch_iqr_s: float | None = None
    samples_per_s: float | None = None
    #: 95 % bootstrap CI of ``samples_per_s`` (see the module doc; None: figure alone)
    samples_per_s_ci: tuple[float, float] | None = None
    #: steady speed windows of a repeat (0: speed from epochs, an older result), their unit
    #: ("steps", "fit", "round", "epoch") and steps per window (unit "steps")
    windows: int = 0
    window_unit: str = ""
    window_steps: int | None = None
    #: the windows were parts trained for quality (``Window.from_training``: fedavg's rounds)
    windows_trained: bool = False
    #: vs the baseline with the same total cores; ``baseline`` names that run
    speedup: float | None = None
    baseline: str | None = None
    #: vs the baseline at ``threads`` threads, divided by the workers; ``scaling_baseline``
    scaling_efficiency: float | None = None
    scaling_baseline: str | None = None
    #: what to run for a missing baseline (one hint per missing ratio)
    missing: tuple[str, ...] = ()
    #: False: every repeat's epoch time is its single epoch's, which includes the warm-up
    steady: bool = True
    #: why it counts as measured on a busy machine (:func:`_busy`); "" otherwise
    busy: str = ""
    quality: str = ""
    parity: str = "-"
    note: str = ""
    #: peak memory, MB: the PSS sum over the case's processes, else RSS (``peak_is_rss``)
    peak_mb: float | None = None
    peak_is_rss: bool = False
    peak_gpu_mb: float | None = None
    #: model FLOPs utilisation (median over the repeats) and the arithmetic of the peak it
    #: is against (:mod:`parabench.case.peak`)
    mfu: float | None = None
    mfu_arithmetic: str = ""
    #: the fastest configuration whose parity holds, in its workload/device/profile
    fastest: bool = False
    #: a skipped pair the method cannot run at all (summarised in one n/a line)
    unsupported: bool = False
    #: optional columns: header -> cell text
    extra: dict[str, str] = field(default_factory=dict)
    #: the compact table's shorter cell for an optional column (header -> text), where the
    #: wide one would not fit 120 columns: ``to target`` without its samples and start-up
    extra_short: dict[str, str] = field(default_factory=dict)
    #: time-to-target mode: training seconds to the target at the row's steady speed
    #: (:mod:`parabench.analysis.time_to_target`; older results without samples-to-target:
    #: the median measured training seconds); None: not reached, or the mode is off. Rows
    #: rank by it
    to_target_s: float | None = None

    def label(self) -> str:
        """``mlp/ddp 2x1``: the row as its notes under the table name it."""
        return f"{self.workload}/{self.method} {self.workers}x{self.threads}"


def _iqr(values: list[float]) -> float:
    if len(values) < 2:
        return 0.0
    q = statistics.quantiles(values, n=4, method="inclusive")
    return q[2] - q[0]


def one_line(text: str, width: int = REASON_WIDTH) -> str:
    """A reason as one table cell: first line only, shortened; the result keeps it all."""
    lines = [ln.strip() for ln in (text or "").strip().splitlines() if ln.strip()]
    first = lines[0] if lines else ""
    if len(lines) > 1 and len(first) < width:
        first += " ..."
    return first if len(first) <= width else first[: width - 3] + "..."


def one_core(rs: list[Result], device: str, cores: int) -> str:
    """'ran on ~1 core (1.02 CPU s per wall s, 2 asked)' when a CPU case that asked for more
    than one core kept about one busy (ONE_CORE, median over the repeats taken on a machine
    that was not busy: there the cores were free), else ''."""
    used = [r.window_cores for r in rs if r.window_cores is not None and not recorded_busy(r)]
    if device != "cpu" or cores <= 1 or not used or statistics.median(used) > ONE_CORE:
        return ""
    return f"ran on ~1 core ({statistics.median(used):.2f} CPU s per wall s, {cores} asked)"


def _busy(rs: list[Result], cores: int) -> str:
    """The evidence :func:`parabench.case.machine.is_busy` judged, as it judged it: other
    processes' CPU during the case where it was measured, else the load before the case:
    'other processes used 1.50 cores, 2 of 2 in use' / 'load 5.2 before the case, 2 of 2 in
    use' (with 'k/n repeats' when not all), or ''. Not "load > cores in use": with the CPU
    share measured, the load does not decide and may well be below the cores in use."""
    busy = [r for r in rs if recorded_busy(r)]
    if not busy:
        return ""
    machines = [r.machine for r in busy if r.machine]
    others = [m.other_cores for m in machines if isinstance(m.other_cores, int | float)]
    loads = [m.load_1m_before for m in machines if isinstance(m.load_1m_before, int | float)]
    in_use = next((m.cores_in_use for m in machines if isinstance(m.cores_in_use, int)), cores)
    total = next((m.cores for m in machines if isinstance(m.cores, int)), None)
    text = (f"other processes used {max(others):.2f} cores" if others
            else f"load {max(loads):.1f} before the case" if loads else "busy")
    text += f", {in_use} of {total} in use" if total else f", {in_use} cores in use"
    return text + (f", {len(busy)}/{len(rs)} repeats" if len(busy) < len(rs) else "")


def _median(values: Iterable[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def summarize(results: Iterable[Result], baselines: Iterable[Result] = ()) -> list[Row]:
    results = list(results)
    groups: dict[tuple, list[Result]] = defaultdict(list)
    for r in results:
        groups[group_key(r)].append(r)
    baselines = list(baselines)
    all_times = {**median_times(baselines), **median_times(results)}  # this sweep's first
    fastest = {rec.best.key for rec in recommend(results, baselines) if rec.best}
    to_targets = times_to_target(results, baselines)
    rows = []
    for key, rs in groups.items():
        workload, method, device, workers, batch, profile, options, threads = key
        ok = [r for r in rs if r.status == "ok"]
        ident = dict(workload=workload, method=method, device=device, workers=workers,
                     batch_size=batch, options=options, profile=profile, threads=threads)
        if not ok:
            worst = rs[0]
            rows.append(Row(**ident, repeats=len(rs), status=worst.status,
                            note=one_line(worst.reason),
                            unsupported=worst.status == "skipped"
                            and UNSUPPORTED_MARK in worst.reason))
            continue
        times = [t for r in ok if (t := r.median_epoch_s) is not None]
        qualities = [r.quality.value for r in ok if r.quality and r.quality.value is not None]
        q_name = ok[0].quality.name if ok[0].quality else ""
        figures = ratios(key, all_times)
        failed = len(rs) - len(ok)
        to_target_s, to_target, to_target_short = (
            (to_targets[key].seconds, to_targets[key].text(), to_targets[key].text(short=True))
            if key in to_targets else _to_target(ok))
        extra = {h: cell for h, cell in ((TO_TARGET, to_target), (BUBBLE, bubble_cell(ok)))
                 if cell}
        rows.append(Row(
            **ident, repeats=len(ok), status="ok", parity=parity_cell(r.parity for r in ok),
            epoch_s=statistics.median(times) if times else None,
            epoch_iqr_s=_iqr(times),
            samples_per_s=_median(r.samples_per_s for r in ok), samples_per_s_ci=_speed_ci(ok),
            **_window_fields(ok),
            speedup=figures.speedup.value, baseline=figures.speedup.baseline,
            scaling_efficiency=figures.scaling_efficiency.value,
            scaling_baseline=figures.scaling_efficiency.baseline,
            missing=tuple(figures.as_dict()["missing"]),
            steady=any(_steady(r) for r in ok),
            busy=_busy(ok, total_cores(workers, threads)),
            quality=f"{q_name} {statistics.median(qualities):.4f}" if qualities else "",
            note="; ".join(n for n in (f"{failed} repeat(s) not ok" if failed else "",
                                       one_core(ok, device, total_cores(workers, threads))) if n),
            **dict(zip(("peak_mb", "peak_is_rss"), peak_memory(ok), strict=True)),
            peak_gpu_mb=_median(r.peak_gpu_mb for r in ok),
            mfu=_median(r.mfu for r in ok), mfu_arithmetic=_arithmetic(ok),
            fastest=key in fastest,
            extra=extra, to_target_s=to_target_s,
            extra_short={TO_TARGET: to_target_short} if to_target else {},
        ))
    if any(TO_TARGET in r.extra for r in rows):  # time-to-target mode: fastest to it first
        return sorted(rows, key=lambda r: (r.workload, r.device, r.profile,
                                           r.to_target_s is None, r.to_target_s or 0.0,
                                           r.method, r.workers, str(r.batch_size)))
    return sorted(rows, key=lambda r: (r.workload, r.device, not is_baseline(r.method),
                                       r.method, r.workers, str(r.batch_size), r.options))


def _arithmetic(rs: list[Result]) -> str:
    """The arithmetic of the peak the rows' MFU is against ("" when none was measured)."""
    return next((r.machine.peak.arithmetic for r in rs if r.machine and r.machine.peak), "")


def _steady(r: Result) -> bool:
    """Whether ``r.median_epoch_s`` is steady state: from windows, or from epochs after the
    first (:attr:`Result.median_epoch_s`)."""
    return bool(r.window_rates and r.samples_per_epoch) or len(r.epoch_s) > 1


def _window_fields(ok: list[Result]) -> dict[str, object]:
    """The row's windows, unit and steps: the first repeat that measured windows'."""
    r = next((r for r in ok if r.window_rates), None)
    if r is None:
        return {}
    return {"windows": len(r.window_rates),
            "window_unit": r.window.unit if r.window else "steps",
            "window_steps": r.window.steps if r.window else None,
            "windows_trained": bool(r.window and r.window.from_training)}


def _speed_ci(ok: list[Result]) -> tuple[float, float] | None:
    """The row's samples/s CI: over the repeats' figures with repeats, else the one run's
    windows (its recorded CI, or computed from its windows); see the module doc."""
    if len(ok) > 1:
        ci = median_ci([r.samples_per_s for r in ok if r.samples_per_s])
    else:
        ci = ok[0].samples_per_s_ci or median_ci(ok[0].window_rates)
    return (float(ci[0]), float(ci[1])) if ci else None


def _to_target(ok: list[Result]) -> tuple[float | None, str, str]:
    """Median train seconds to the target, 'SEC (N samples, +START start)' (older results
    without ``samples_to_target``: 'SEC (ep E, ...)') and the compact table's 'SEC', or why
    not (twice)."""
    runs = [t for r in ok if (t := r.time_to_target)]
    hits = [t for t in runs if t.reached]
    if not hits:
        why = f"not reached ({runs[0].epochs_run} ep)" if runs else ""
        return None, why, why
    train = statistics.median(t.train_s or 0.0 for t in hits)
    reached = f" {len(hits)}/{len(runs)} reached" if len(hits) < len(runs) else ""
    samples = [t.samples_to_target for t in hits if t.samples_to_target is not None]
    if len(samples) == len(hits):  # what the target cost in work, the same scale for all
        text = f"{train:.2f}s ({statistics.median(samples):,.0f} samples"
    else:
        text = f"{train:.2f}s (ep {statistics.median(t.epoch or 0 for t in hits):g}"
    starts = [t.startup_s for t in hits if t.startup_s is not None]
    text += f", +{statistics.median(starts):.1f}s start)" if starts else ")"
    return train, text + reached, f"{train:.2f}s{reached}"


def _fractions(r: Result, note: str) -> list[float]:
    """A session note's figures, to show (``extra`` is shown, never decided on): one number,
    or a list of them (per epoch, per window)."""
    value = r.extra.get(note)
    values = value if isinstance(value, list) else [value]
    return [float(v) for v in values if isinstance(v, int | float) and not isinstance(v, bool)]


def bubble_cell(ok: list[Result]) -> str:
    """A pipeline row's measured bubble (the stages' mean idle share of the time), the median
    over its runs of each run's median over its speed windows (``window_bubble_fraction``;
    older results: its epochs', ``bubble_fraction``), beside the ideal pipeline's
    ``bubble_theory`` = (p - 1) / (m + p - 1): '31% (ideal 20%)'; '' for other methods."""
    runs = [statistics.median(f) for r in ok
            if (f := _fractions(r, "window_bubble_fraction") or _fractions(r, "bubble_fraction"))]
    if not runs:
        return ""
    ideal = [t for r in ok for t in _fractions(r, "bubble_theory")]
    return f"{statistics.median(runs):.0%}" + (
        f" (ideal {statistics.median(ideal):.0%})" if ideal else "")
