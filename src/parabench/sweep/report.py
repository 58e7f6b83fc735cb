"""Summaries of results: the table ``parabench run`` ends with, and the speedup it shows.

Usage::

    rows = summarize(results, baselines=earlier_serial_results)
    print(format_table(rows))

One row per (workload, method, device, workers x threads, batch, profile, options). Columns:

* ``samples/s``: steady-state throughput with its 95 % confidence interval, ``50,072 ±3.0%``.
  A case measures it in speed windows (:mod:`parabench.case.lifecycle`): after a warm-up
  window (left out), W steady windows of N global mini-batch steps each (one fit for the
  estimators, one round for fedavg, one epoch for TensorFlow); the figure is the median of
  their samples/s and the CI the percentile bootstrap CI of that median
  (:func:`parabench.sweep.stats.median_ci`). With one repeat the CI is the run's windows';
  with repeats (``n`` > 1) the figure is the median of the repeats' figures and the CI the
  bootstrap CI of that median over the repeats: repeats are independent runs, while one run's
  windows share a process, so pooling windows would understate the run-to-run noise. ``±`` is
  the half-width in percent of the median, the larger side when the interval is asymmetric.
  Rows without a CI (one repeat without windows: older results) show the figure alone.
* ``epoch s (IQR)``: one epoch's time at steady-state speed: the epoch's samples over the
  windows' median samples/s (older results without windows: the median steady epoch); the
  IQR is over the per-repeat figures (0 with a single repeat). An epoch time marked ``~``
  comes from one epoch only and includes the warm-up, so it is not steady state: only older
  results without windows can have it.
* ``speedup`` and ``scaling``: two ratios of steady seconds per training sample (the epoch
  time over its samples: equal work even where a method's epoch holds more samples, as
  fedavg's clients each process serial's), each naming its
  baseline run (:func:`parabench.sweep.compare.ratios`): ``speedup`` against serial with the
  same total cores (workers x threads threads) and ``scaling`` efficiency against serial at
  the row's threads per worker, divided by the workers; both at equal work (same workload,
  device, profile, batch and data options; never another batch). A missing baseline run
  leaves the ratio ``-`` and a legend line says what to add. Baselines come from the same
  results or, failing that, from ``baselines`` (e.g. the serial cases already in ``--out``).

``!`` marks a time measured on a busy machine (load above the cores in use). The parity
column shows the evidence (:func:`parabench.sweep.recommend.parity_text`). ``*`` marks the
fastest configuration whose parity holds (:mod:`parabench.sweep.recommend`). Cases a method cannot
run at all (an unsupported workload) collapse into one ``n/a`` line; every other reason shows
as one line (the result keeps the whole text).

Other modules may add columns: a Row's ``extra`` maps a column header to its cell text, and
a column shows when any row has it.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from parabench.case.result import Result
from parabench.sweep.compare import Ratio, is_baseline, ratios, total_cores
from parabench.sweep.recommend import (
    RSS_MARK,
    group_key,
    is_busy,
    median_times,
    memory_cell,
    parity_cell,
    peak_memory,
    recommend,
)
from parabench.sweep.stats import median_ci, rate_text

#: the reason Method.check gives for a workload the method cannot train at all
UNSUPPORTED_MARK = " does not support workload "
REASON_WIDTH = 100
TO_TARGET = "to target"


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
    #: "load X > cores in use Y" when measured on a busy machine; "" otherwise
    busy: str = ""
    quality: str = ""
    parity: str = "-"
    note: str = ""
    #: peak memory, MB: the PSS sum over the case's processes, else RSS (``peak_is_rss``)
    peak_mb: float | None = None
    peak_is_rss: bool = False
    peak_gpu_mb: float | None = None
    #: the fastest configuration whose parity holds, in its workload/device/profile
    fastest: bool = False
    #: a skipped pair the method cannot run at all (summarised in one n/a line)
    unsupported: bool = False
    #: optional columns: header -> cell text
    extra: dict[str, str] = field(default_factory=dict)
    #: time-to-target mode (parabench.case.target): median training seconds to the target over the
    #: repeats that reached it (None: not reached, or the mode is off); rows rank by it
    to_target_s: float | None = None


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


def _busy(rs: list[Result], cores: int) -> str:
    """'load 5.2 > cores in use 2' (with 'k/n repeats' when not all), or ''."""
    busy = [r for r in rs if is_busy(r)]
    if not busy:
        return ""
    # case/machine.py's keys (load_1m_*), and the plain names a hand-made result may carry
    loads = [v for r in busy for k in ("load_1m_before", "load_1m_after", "load_before",
                                       "load_after")
             if isinstance(v := r.machine.get(k), int | float)]
    others = [v for r in busy if isinstance(v := r.machine.get("other_cores"), int | float)]
    cores = next((c for r in busy if isinstance(c := r.machine.get("cores_in_use"), int)), cores)
    text = (f"load {max(loads):.1f} > cores in use {cores}" if loads
            else f"busy (cores in use {cores})")
    text += f", other processes used {max(others):.2f} cores" if others else ""
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
        to_target_s, to_target = _to_target(ok)
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
            note=f"{failed} repeat(s) not ok" if failed else "",
            **dict(zip(("peak_mb", "peak_is_rss"), peak_memory(ok), strict=True)),
            peak_gpu_mb=_median(r.peak_gpu_mb for r in ok),
            fastest=key in fastest,
            extra={TO_TARGET: to_target} if to_target else {}, to_target_s=to_target_s,
        ))
    if any(TO_TARGET in r.extra for r in rows):  # time-to-target mode: fastest to it first
        return sorted(rows, key=lambda r: (r.workload, r.device, r.profile,
                                           r.to_target_s is None, r.to_target_s or 0.0,
                                           r.method, r.workers, str(r.batch_size)))
    return sorted(rows, key=lambda r: (r.workload, r.device, not is_baseline(r.method),
                                       r.method, r.workers, str(r.batch_size), r.options))


def _steady(r: Result) -> bool:
    """Whether ``r.median_epoch_s`` is steady state: from windows, or from epochs after the
    first (:attr:`Result.median_epoch_s`)."""
    return bool(r.window_rates and r.samples_per_epoch) or len(r.epoch_s) > 1


def _window_fields(ok: list[Result]) -> dict[str, object]:
    """The row's windows, unit and steps: the first repeat that measured windows'."""
    r = next((r for r in ok if r.window_rates), None)
    if r is None:
        return {}
    window = r.window or {}
    return {"windows": len(r.window_rates), "window_unit": window.get("unit", "steps"),
            "window_steps": window.get("steps")}


def _speed_ci(ok: list[Result]) -> tuple[float, float] | None:
    """The row's samples/s CI: over the repeats' figures with repeats, else the one run's
    windows (its recorded CI, or computed from its windows); see the module doc."""
    if len(ok) > 1:
        ci = median_ci([r.samples_per_s for r in ok if r.samples_per_s])
    else:
        ci = ok[0].samples_per_s_ci or median_ci(ok[0].window_rates)
    return (float(ci[0]), float(ci[1])) if ci else None


def _to_target(ok: list[Result]) -> tuple[float | None, str]:
    """Median train seconds to the target, and 'SEC (ep E, +START start)' or why not."""
    runs = [t for r in ok if (t := r.time_to_target)]
    hits = [t for t in runs if t.get("reached")]
    if not hits:
        return None, f"not reached ({runs[0]['epochs_run']} ep)" if runs else ""
    train = statistics.median(t["train_s"] for t in hits)
    text = f"{train:.2f}s (ep {statistics.median(t['epoch'] for t in hits):g}"
    starts = [t["startup_s"] for t in hits if t.get("startup_s") is not None]
    text += f", +{statistics.median(starts):.1f}s start)" if starts else ")"
    if len(hits) < len(runs):
        text += f" {len(hits)}/{len(runs)} reached"
    return train, text


def _ratio(value: float | None, baseline: str | None, spec: str, unit: str) -> str:
    """``1.85x (t=2)``: the ratio and its baseline's threads; ``- (no t=2)`` when missing."""
    if baseline is None:
        return "-"
    return Ratio(value=value, baseline=baseline).cell(spec, unit)


def _memory(r: Row) -> str:
    if r.peak_mb is None:
        return "-"
    return memory_cell(r.peak_mb, r.peak_is_rss) + (f" +{r.peak_gpu_mb:,.0f}gpu"
                                                   if r.peak_gpu_mb else "")


def _cells(r: Row, extra_headers: list[str]) -> tuple[str, ...]:
    epoch = "-" if r.epoch_s is None else f"{r.epoch_s:.3f} ({r.epoch_iqr_s or 0:.3f})"
    epoch += ("" if r.steady or r.epoch_s is None else " ~") + (" !" if r.busy else "")
    tail = r.quality if r.status == "ok" else f"{r.status}: {r.note}"
    if r.status == "ok" and r.note:
        tail += f" [{r.note}]"
    return (r.workload, r.method + (" *" if r.fastest else ""), r.device,
            f"{r.workers}x{r.threads}" if r.threads else str(r.workers),
            str(r.batch_size), r.profile, r.options, str(r.repeats), epoch,
            rate_text(r.samples_per_s, r.samples_per_s_ci),
            _ratio(r.speedup, r.baseline, ".2f", "x"),
            _ratio(r.scaling_efficiency, r.scaling_baseline, ".2f", ""),
            _memory(r), r.parity, *(r.extra.get(h, "-") for h in extra_headers), tail)


def not_applicable(rows: Iterable[Row]) -> str:
    """One line naming every unsupported workload x method pair, grouped by workload."""
    pairs: dict[str, set[str]] = defaultdict(set)
    for r in rows:
        if r.unsupported:
            pairs[r.workload].add(r.method)
    if not pairs:
        return ""
    parts = [f"{w} x {', '.join(sorted(ms))}" for w, ms in sorted(pairs.items())]
    return f"n/a (method does not support the workload): {'; '.join(parts)}"


def format_table(rows: list[Row]) -> str:
    extra_headers = sorted({h for r in rows for h in r.extra})
    header = ("workload", "method", "device", "workers", "batch", "profile", "options", "n",
              "epoch s (IQR)", "samples/s", "speedup", "scaling", "peak MB (PSS)", "parity",
              *extra_headers, "quality / status")
    shown = [r for r in rows if not r.unsupported]
    lines = [header, *(_cells(r, extra_headers) for r in shown)]
    widths = [max(len(row[i]) for row in lines) for i in range(len(header) - 1)]
    out = []
    for row in lines:
        cells = [c.ljust(w) for c, w in zip(row[:-1], widths, strict=True)]
        out.append("  ".join([*cells, row[-1]]).rstrip())
    out.insert(1, "  ".join("-" * w for w in widths) + "  " + "-" * 16)
    if any(r.fastest for r in shown):
        out.append("* fastest configuration whose parity holds (per workload, device, profile)")
    if na := not_applicable(rows):
        out.append(na)
    out.extend(legend(shown))
    return "\n".join(out)


def legend(rows: list[Row]) -> list[str]:
    """What the ratio columns and the ``~`` / ``!`` marks mean, and which baselines to add."""
    ok = [r for r in rows if r.status == "ok"]
    if not ok:
        return []
    lines = [*_speed_legend(ok),
             "workers: processes x threads each; speedup: vs serial with the same total cores "
             "(t=workers x threads);",
             "scaling: speedup vs serial at the threads per worker (t=), / workers; each against "
             "the same workload, device, profile, batch and data options"]
    for hint in sorted({h for r in ok for h in r.missing}):
        lines.append(f"missing baseline: {hint}")
    if any(r.peak_is_rss for r in ok):
        lines.append(f"peak MB: PSS summed over the case's processes (shared pages once);"
                     f"{RSS_MARK}: RSS sum, PSS unreadable or not recorded (shared pages "
                     "counted per process)")
    if any(not r.steady for r in ok):
        lines.append("~ one epoch only, no speed windows (an older result): its time includes "
                     "the warm-up epoch, so it is not steady state")
    for r in ok:
        if r.busy:
            lines.append(f"! {r.workload}/{r.method} {r.workers}x{r.threads}: measured on a busy "
                         f"machine: {r.busy}")
    return lines


def _span(values: set[int]) -> str:
    return f"{min(values)}" if len(values) == 1 else f"{min(values)}-{max(values)}"


def windows_phrase(rows: list[Row]) -> str:
    """'3 windows of 112-282 steps' (or 'of one fit', ...) over rows with windows; ''."""
    measured = [r for r in rows if r.windows]
    if not measured:
        return ""
    steps = {r.window_steps for r in measured if r.window_unit == "steps" and r.window_steps}
    what = ([f"{_span(steps)} global steps"] if steps else []) + sorted(
        {f"one {r.window_unit}" for r in measured if r.window_unit != "steps"})
    return f"{_span({r.windows for r in measured})} windows of {' or '.join(what)}"


def _speed_legend(ok: list[Row]) -> list[str]:
    """What samples/s (and the epoch time derived from it) means for these rows."""
    if not (phrase := windows_phrase(ok)):
        return []
    lines = ["samples/s: median of the steady speed windows (here " + phrase + ", after a "
             "warm-up window left out)",
             "  ± half-width of its 95 % bootstrap CI in % of the median (the larger side when "
             "the interval is asymmetric);",
             "  epoch s: the epoch's samples at that median speed (not a timed epoch)"]
    if any(r.repeats > 1 and r.samples_per_s_ci for r in ok):
        lines.append("  n > 1: median and CI over the repeats' figures (independent runs), not "
                     "over their pooled windows")
    return lines
