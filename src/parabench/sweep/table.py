"""Summaries of results: the table ``parabench run`` ends with, and the speedup it shows.

Usage::

    rows = summarize(results, baselines=earlier_serial_results)
    print(format_table(rows))                    # compact: within TABLE_WIDTH (120) columns
    print(format_table(rows, wide=True))         # every column (--wide; the report's table)
    print(format_table(rows, width=terminal_width()))  # a terminal: the full one if it fits

One row per (workload, method, device, workers x threads, batch, profile, options). The
compact table lifts the columns with one value in every row into a title line
(``cnn · cpu · profile tiny · batch 64 · 1 repeat``), leaves out ``epoch s`` (its ``~`` / ``!``
marks go on samples/s), ``MFU`` and ``bubble``; where its ok rows are still too wide, it
leaves out ``scaling``, then shows ``to target`` without its samples and start-up; it cuts a
failed case's reason to the room left (the whole reason follows the table, wrapped); the
other cells are the wide table's. Legend lines wrap at 120; :func:`wrap_lines` wraps the answer
the same way. Columns:

* ``samples/s``: steady-state throughput with its 95 % confidence interval, ``50,072 ±3.0%``.
  A case measures it in speed windows (:mod:`parabench.case.lifecycle`): after a warm-up
  window (left out), W steady windows of N global mini-batch steps each (one fit for the
  estimators, one round for fedavg (in time-to-target mode the rounds it trained for
  quality), one epoch for TensorFlow); the figure is the median of
  their samples/s and the CI the percentile bootstrap CI of that median
  (:func:`parabench.analysis.stats.median_ci`). With one repeat the CI is the run's windows';
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
  baseline run (:func:`parabench.analysis.ratios.ratios`): ``speedup`` against serial with the
  same total cores (workers x threads threads) and ``scaling`` efficiency against serial at
  the row's threads per worker, divided by the workers; both at equal work (same workload,
  device, profile, batch and data options; never another batch). A missing baseline run
  leaves the ratio ``-`` and a legend line says what to add. Baselines come from the same
  results or, failing that, from ``baselines`` (e.g. the serial cases already in ``--out``).

``!`` marks a time measured on a busy machine (others took its cores). The parity
column shows the evidence (:func:`parabench.analysis.parity_text.parity_text`). ``*`` marks the
fastest configuration whose parity holds (:mod:`parabench.analysis.recommend`). Cases a method
cannot run at all (an unsupported workload) collapse into one ``n/a`` line; every other reason shows
as one line (the result keeps the whole text).

``bubble`` (``--wide`` and the report; pipeline and hybrid rows): the stages' mean idle share
of the time in the steady windows, beside the ideal pipeline's (p - 1) / (m + p - 1)
(:func:`parabench.analysis.summary.bubble_cell`).

Other modules may add columns: a Row's ``extra`` maps a column header to its cell text
(``extra_short`` to the compact table's, where it differs), and a column shows when any row
has it.
"""

from __future__ import annotations

import sys
import textwrap
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import TextIO

from parabench.analysis.figures import RSS_MARK, memory_cell
from parabench.analysis.ratios import Ratio
from parabench.analysis.stats import rate_text
from parabench.analysis.summary import (
    BUBBLE,
    REASON_WIDTH,
    TO_TARGET,
    UNSUPPORTED_MARK,
    Row,
    one_line,
    summarize,
)

__all__ = ["BUBBLE", "REASON_WIDTH", "TABLE_WIDTH", "TO_TARGET", "UNSUPPORTED_MARK", "Row",
           "format_table", "legend", "mfu_cell", "not_applicable", "one_line", "summarize",
           "terminal_width", "windows_phrase", "wrap_lines"]

#: the compact table and every legend line fit a terminal this wide
TABLE_WIDTH = 120
#: marks an ok row whose note (e.g. "ran on ~1 core (...)") is printed below the table
NOTE_MARK = "†"
#: columns the compact table lifts into its title line when every row has the same value
LIFTABLE = ("workload", "device", "profile", "batch", "options", "n")
#: columns only the wide table has; OPTIONAL: dropped, in order, while it is still too wide
WIDE_ONLY = ("epoch s (IQR)", "MFU", BUBBLE)
#: the wide table's legend line for the MFU column
MFU_LEGEND = ("MFU: FLOPs per sample x samples/s over the matmul peak of the row's arithmetic "
              "(bf16, fp16, tf32 or fp32) measured on this machine in the same sweep, times the "
              "devices the row used (JSON: mfu, machine.peak)")
OPTIONAL = ("scaling",)
#: the wide table's legend line for the bubble column (pipeline rows)
BUBBLE_LEGEND = ("bubble: a pipeline row's stages' mean idle share of the time in its steady "
                 "windows (waiting on transfers, fill and drain), beside the ideal pipeline's "
                 "(p - 1) / (m + p - 1) for p stages and m micro-batches (JSON: extra)")
#: the least of a failed or skipped case's reason the compact table keeps on its row
MIN_REASON = 24


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


def mfu_cell(r: Row) -> str:
    """``11.8% bf16``: the row's MFU and the arithmetic of its peak; ``-`` when unmeasured."""
    if r.mfu is None:
        return "-"
    return f"{r.mfu:.1%} {r.mfu_arithmetic}".rstrip()


def _cells(r: Row, extra_headers: list[str], mfu: bool) -> tuple[str, ...]:
    epoch = "-" if r.epoch_s is None else f"{r.epoch_s:.3f} ({r.epoch_iqr_s or 0:.3f})"
    epoch += ("" if r.steady or r.epoch_s is None else " ~") + (" !" if r.busy else "")
    tail = r.quality if r.status == "ok" else f"{r.status}: {r.note}"
    if r.status == "ok" and r.note:
        tail += " " + NOTE_MARK  # the note itself is a footnote: it would widen every row
    return (r.workload, r.method + (" *" if r.fastest else ""), r.device,
            f"{r.workers}x{r.threads}" if r.threads else str(r.workers),
            str(r.batch_size), r.profile, r.options, str(r.repeats), epoch,
            rate_text(r.samples_per_s, r.samples_per_s_ci),
            _ratio(r.speedup, r.baseline, ".2f", "x"),
            _ratio(r.scaling_efficiency, r.scaling_baseline, ".2f", ""),
            *([mfu_cell(r)] if mfu else []), _memory(r), r.parity,
            *(r.extra.get(h, "-") for h in extra_headers), tail)


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


def format_table(rows: list[Row], *, wide: bool = False, width: int | None = None) -> str:
    """The summary table: compact (fits ``TABLE_WIDTH``) by default, every column when
    ``wide``. ``width``: a terminal's width (:func:`terminal_width`); the full table when it
    fits there, else the compact one fitted to it. None (piped output): the compact table."""
    extra_headers = sorted({h for r in rows for h in r.extra})
    header = ("workload", "method", "device", "workers", "batch", "profile", "options", "n",
              "epoch s (IQR)", "samples/s", "speedup", "scaling", "MFU", "peak MB (PSS)", "parity",
              *extra_headers, "quality / status")
    shown = [r for r in rows if not r.unsupported]
    mfu = any(r.mfu is not None for r in shown)  # results from before MFU: no column
    header = tuple(h for h in header if h != "MFU" or mfu)
    cells = [_cells(r, extra_headers, mfu) for r in shown]
    out = _grid(header, cells)
    hidden: list[str] = []
    if not wide and (width is None or max(map(len, out)) > width):
        out, hidden = _compact(header, cells, shown, width or TABLE_WIDTH)
    if any(r.fastest for r in shown):
        out.extend(_wrap("* fastest configuration whose parity holds (per workload, device, "
                         "profile)" + ("; with 'to target': the soonest to the target, serial "
                                       "when within noise" if TO_TARGET in extra_headers
                                       else "")))
    if na := not_applicable(rows):
        out.extend(_wrap(na))
    out.extend(legend(shown))
    if wide and mfu:
        out.extend(_wrap(MFU_LEGEND))
    if wide and BUBBLE in extra_headers:
        out.extend(_wrap(BUBBLE_LEGEND))
    if hidden:
        out.extend(_wrap(f"--wide shows every column (here also {', '.join(hidden)}); "
                         "so do the report and the JSON results"))
    return "\n".join(out)


def _grid(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """Columns padded to their widest cell, two spaces apart; the last one not padded."""
    lines = [tuple(header), *rows]
    widths = [max(len(row[i]) for row in lines) for i in range(len(header) - 1)]
    out = []
    for row in lines:
        cells = [c.ljust(w) for c, w in zip(row[:-1], widths, strict=True)]
        out.append("  ".join([*cells, row[-1]]).rstrip())
    out.insert(1, "  ".join("-" * w for w in widths) + "  " + "-" * 16)
    return out


def _compact(header: tuple[str, ...], cells: list[tuple[str, ...]], shown: list[Row],
             limit: int) -> tuple[list[str], list[str]]:
    """The table in at most ``limit`` columns (where the rows allow it) and the headers it
    leaves to --wide. Columns with one value in every row become a title line above the
    table; ``epoch s`` goes (it is samples/s again, per epoch), its ``~`` / ``!`` marks move
    to samples/s; where the ok rows are still too wide, ``scaling`` goes too, then ``to
    target`` shows its short cell (the seconds, their CI, ``derived``: the samples and
    start-up stay in the wide one). A failed or skipped case's reason is cut to the room
    left (at least ``MIN_REASON``) and follows the table whole, wrapped."""
    col = {h: i for i, h in enumerate(header)}
    lifted = [h for h in LIFTABLE if cells and len({c[col[h]] for c in cells}) == 1]
    title = " · ".join(t for h in lifted if (t := _titled(h, cells[0][col[h]])))
    keep = [h for h in header if h not in lifted and h not in WIDE_ONLY]
    rows = [tuple(_marked(r, c[col[h]]) if h == "samples/s" else c[col[h]] for h in keep)
            for r, c in zip(shown, cells, strict=True)]
    hidden = [h for h in header if h in WIDE_ONLY]
    for optional in OPTIONAL:  # the figures decide: a status reason is not cut for them
        if _width(keep, rows, shown) <= limit or optional not in keep:
            continue
        i = keep.index(optional)
        del keep[i]
        rows = [row[:i] + row[i + 1:] for row in rows]
        hidden.append(optional)
    short = [tuple(r.extra_short.get(h, cell) for h, cell in zip(keep, row, strict=True))
             for r, row in zip(shown, rows, strict=True)]
    if short != rows and _width(keep, rows, shown) > limit:  # to target's short cells
        rows = short
        hidden.append("to target's samples and start-up")
    rows, cut = _fit_reasons(keep, rows, shown, limit)
    whole = [line for r, reason in cut
             for line in _wrap(f"{r.label()}: {reason}")]
    return ([title] if title else []) + _grid(keep, rows) + whole, hidden


def _fit_reasons(header: list[str], rows: list[tuple[str, ...]], shown: list[Row],
                 limit: int) -> tuple[list[tuple[str, ...]], list[tuple[Row, str]]]:
    """The rows with each failed or skipped case's reason (the last cell) cut to what is
    left of ``limit`` (at least MIN_REASON), and each cut row with its whole reason (shown
    under the table, wrapped)."""
    widths = [max(len(row[i]) for row in [tuple(header), *rows]) for i in range(len(header) - 1)]
    room = max(limit - sum(widths) - 2 * len(widths), MIN_REASON)
    out, cut = [], []
    for row, r in zip(rows, shown, strict=True):
        if r.status != "ok" and len(row[-1]) > room:
            cut.append((r, row[-1]))
            row = (*row[:-1], row[-1][:room - 3].rstrip() + "...")
        out.append(row)
    return out, cut


def _width(header: list[str], rows: list[tuple[str, ...]], shown: list[Row]) -> int:
    """The widest line of the header and the ok rows (whose cells are figures)."""
    ok = [row for row, r in zip(rows, shown, strict=True) if r.status == "ok"]
    return max(map(len, _grid(header, ok)))


def _titled(header: str, value: str) -> str:
    """A lifted column's value as the title line says it: 'batch 64', '3 repeats'."""
    if header == "n":
        return f"{value} repeat" + ("" if value == "1" else "s")
    if header == "options":
        return "" if value == "-" else value
    return value if header in ("workload", "device") else f"{header} {value}"


def _marked(r: Row, rate: str) -> str:
    """The compact samples/s cell: the figure with the epoch cell's ``~`` / ``!`` marks."""
    return rate + ("" if r.steady or r.epoch_s is None else " ~") + (" !" if r.busy else "")


def _wrap(line: str) -> list[str]:
    return textwrap.wrap(line, TABLE_WIDTH, subsequent_indent="  ", break_long_words=False,
                         break_on_hyphens=False) or [line]


def wrap_lines(lines: Iterable[str], width: int = TABLE_WIDTH) -> list[str]:
    """Lines of text (the answer) for a terminal: each wrapped within ``width``, its
    continuation indented four more spaces than the line itself, so a sub-line (two spaces)
    still reads as one."""
    out = []
    for line in lines:
        indent = line[:len(line) - len(line.lstrip(" "))]
        out.extend(textwrap.wrap(line.lstrip(" "), width, initial_indent=indent,
                                 subsequent_indent=indent + "    ", break_long_words=False,
                                 break_on_hyphens=False) or [line])
    return out


def terminal_width(stream: TextIO | None = None) -> int | None:
    """The terminal's width when ``stream`` (default stdout) is a terminal and rich is
    installed (rich reads COLUMNS and the terminal's size); None otherwise: piped output and
    tests get the fixed ``TABLE_WIDTH`` layout, the same on every machine."""
    stream = stream or sys.stdout
    if not stream.isatty():
        return None
    try:
        from rich.console import Console
    except ImportError:
        return None
    return Console(file=stream).width


def legend(rows: list[Row]) -> list[str]:
    """What the ratio columns and the ``~`` / ``!`` marks mean, and which baselines to add;
    lines wrapped to ``TABLE_WIDTH``."""
    ok = [r for r in rows if r.status == "ok"]
    if not ok:
        return []
    lines = [*_speed_legend(ok),
             "workers: processes x threads each; speedup: vs serial with the same total cores "
             "(t=workers x threads);",
             "scaling: speedup vs serial at the threads per worker (t=), / workers;",
             "  each against the same workload, device, profile, batch and data options"]
    for hint in sorted({h for r in ok for h in r.missing}):
        lines.append(f"missing baseline: {hint}")
    if any(r.peak_is_rss for r in ok):
        lines.append(f"peak MB: PSS summed over the case's processes (shared pages once);"
                     f"{RSS_MARK}: RSS sum, PSS unreadable or not recorded (shared pages "
                     "counted per process)")
    if any("blind <" in r.parity for r in ok) and any(TO_TARGET in r.extra for r in ok):
        lines.append("ok, blind <L: a statistical verdict flags 95 % of runs that lose L or "
                     "more, and may pass a smaller loss; with 'to target' it is trained on to "
                     "the measured target's epoch budget and judged there against serial's "
                     "measured seeds (the converged check; without that budget: whether the "
                     "run reached the target)")
    elif any("blind <" in r.parity for r in ok):
        lines.append("ok, blind <L: a statistical verdict (held-out quality against serial's "
                     "seed spread) flags 95 % of runs that lose L or more, and may pass a "
                     "smaller loss: more epochs (or --target-quality) see less")
    if any("(paired by seed)" in r.parity for r in ok):
        lines.append("(paired by seed): judged against serial's quality at the run's own "
                     "seed (this sweep's serial; after the epoch budget, the calibrated one), "
                     "within 3x the spread of two trainings of that same data (`parabench "
                     "calibrate --paired`)")
    if any("power unknown" in r.parity for r in ok):
        lines.append("ok, power unknown: a statistical verdict with no measured serial seeds "
                     "to state its power from; `parabench calibrate` measures them")
    if any(TO_TARGET in r.extra for r in ok):
        lines.append("to target: training seconds to the target quality at the row's samples/s: "
                     "the samples it took / samples/s (derived: serial's samples, for rows whose "
                     "trajectory matches serial's), ± the half-width of its 95 % CI in %; "
                     "start-up apart; over budget: more than 2x serial's samples")
    if any(not r.steady for r in ok):
        lines.append("~ one epoch only, no speed windows (an older result): its time includes "
                     "the warm-up epoch, so it is not steady state")
    for r in ok:
        if r.busy:
            lines.append(f"! {r.label()}: measured on a busy "
                         f"machine: {r.busy}")
        if r.note:
            lines.append(f"{NOTE_MARK} {r.label()}: {r.note}")
    return [w for line in lines for w in _wrap(line)]  # each within TABLE_WIDTH


def _span(values: set[int]) -> str:
    return f"{min(values)}" if len(values) == 1 else f"{min(values)}-{max(values)}"


def windows_phrase(rows: list[Row]) -> str:
    """'3 windows of 112-282 steps' (or 'of one fit', ...) over rows with windows; ''."""
    measured = [r for r in rows if r.windows]
    if not measured:
        return ""
    steps = {r.window_steps for r in measured if r.window_unit == "steps" and r.window_steps}
    what = ([f"{_span(steps)} global steps"] if steps else []) + sorted(
        {f"one {r.window_unit}" + (" trained for quality" if r.windows_trained else "")
         for r in measured if r.window_unit != "steps"})
    return f"{_span({r.windows for r in measured})} windows of {' or '.join(what)}"


def _speed_legend(ok: list[Row]) -> list[str]:
    """What samples/s (and the epoch time derived from it) means for these rows."""
    if not (phrase := windows_phrase(ok)):
        return []
    lines = ["samples/s: median of the steady speed windows (here " + phrase + ", after a "
             "warm-up window left out)",
             "  ± half-width of its 95 % bootstrap CI in % of the median (the larger side when "
             "the interval is asymmetric); it takes the windows as independent, but speed "
             "drifts within a case, so it holds the case's later speed less often than 95 % "
             "(measured: docs/measuring.md, 'Speed windows');",
             "  epoch s: the epoch's samples at that median speed (not a timed epoch)"]
    if any(r.repeats > 1 and r.samples_per_s_ci for r in ok):
        lines.append("  n > 1: median and CI over the repeats' figures (independent runs), not "
                     "over their pooled windows")
    return lines
