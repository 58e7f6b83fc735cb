"""Summaries of results: the table ``parabench run`` ends with, and the speedup it shows.

Usage::

    rows = summarize(results)          # one row per (workload, method, device, workers, batch)
    print(format_table(rows))

Speedup is the serial baseline's median steady-state epoch time divided by the method's, at
equal work (same workload, device, profile and, where recorded, batch size); the baseline a
row was compared with is named in the row. Medians are over repeats; the spread column is the
interquartile range of the per-repeat medians (0 with a single repeat).
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from parabench.result import Result

BASELINE_METHOD = "serial"


@dataclass(frozen=True, kw_only=True)
class Row:
    workload: str
    method: str
    device: str
    workers: int
    batch_size: object
    options: str
    repeats: int
    status: str
    epoch_s: float | None = None
    epoch_iqr_s: float | None = None
    samples_per_s: float | None = None
    speedup: float | None = None
    baseline: str | None = None
    quality: str = ""
    parity: str = "-"
    note: str = ""
    #: time-to-target mode (parabench.target): median training seconds to the target over the
    #: repeats that reached it (None: not reached, or the mode is off); rows rank by it
    to_target_s: float | None = None
    to_target: str = ""


def _iqr(values: list[float]) -> float:
    if len(values) < 2:
        return 0.0
    q = statistics.quantiles(values, n=4, method="inclusive")
    return q[2] - q[0]


def _options(r: Result) -> str:
    opts = (r.config or {}).get("options", {})
    return " ".join(f"{k}={v}" for k, v in sorted(opts.items()) if k != "data_dir") or "-"


#: options serial itself has: a method's speedup is against serial with the same ones
BASELINE_OPTIONS = ("data_dir", "precision", "num_workers", "pin_memory")


def _data_options(options: str) -> str:
    """The part of an options label the serial baseline must share."""
    return " ".join(o for o in options.split() if o.split("=")[0] in BASELINE_OPTIONS)


def _parity(rs: list[Result]) -> str:
    """'ok', 'FAILED -0.21' (the worst gap), or '-' when not checked."""
    checked = [r.parity for r in rs if r.parity and r.parity.get("status") in ("ok", "failed")]
    if not checked:
        return "base" if any(r.parity and r.parity.get("kind") == "baseline" for r in rs) else "-"
    worst = min(checked, key=lambda p: p["gap"])
    return "ok" if worst["status"] == "ok" else f"FAILED {worst['gap']:+.3f}"


def summarize(results: Iterable[Result]) -> list[Row]:
    groups: dict[tuple, list[Result]] = defaultdict(list)
    for r in results:
        batch = "-" if r.batch_size is None else str(r.batch_size)
        groups[(r.workload, r.method, r.device, r.workers, batch, r.profile, _options(r))
               ].append(r)

    medians: dict[tuple, float] = {}
    for key, rs in groups.items():
        times = [t for r in rs if r.status == "ok" and (t := r.median_epoch_s) is not None]
        if times:
            medians[key] = statistics.median(times)

    rows = []
    for key, rs in groups.items():
        workload, method, device, workers, batch, profile, options = key
        ok = [r for r in rs if r.status == "ok"]
        if not ok:
            worst = rs[0]
            rows.append(Row(workload=workload, method=method, device=device, workers=workers,
                            batch_size=batch, options=options, repeats=len(rs),
                            status=worst.status, note=worst.reason))
            continue
        times = [t for r in ok if (t := r.median_epoch_s) is not None]
        rates = [r.samples_per_s for r in ok if r.samples_per_s]
        qualities = [r.quality.value for r in ok if r.quality and r.quality.value is not None]
        q_name = ok[0].quality.name if ok[0].quality else ""
        base_key = _baseline_key(key, medians)
        speedup = None
        if base_key is not None and key in medians:
            speedup = medians[base_key] / medians[key]
        failed = len(rs) - len(ok)
        to_target_s, to_target = _to_target(ok)
        rows.append(Row(
            workload=workload, method=method, device=device, workers=workers, batch_size=batch,
            options=options, repeats=len(ok), status="ok", parity=_parity(ok),
            epoch_s=statistics.median(times) if times else None,
            epoch_iqr_s=_iqr(times),
            samples_per_s=statistics.median(rates) if rates else None,
            speedup=speedup,
            baseline=f"{BASELINE_METHOD}/{base_key[2]} bs={base_key[4]}" if base_key else None,
            quality=f"{q_name} {statistics.median(qualities):.4f}" if qualities else "",
            note=f"{failed} repeat(s) not ok" if failed else "",
            to_target_s=to_target_s, to_target=to_target,
        ))
    if any(r.to_target for r in rows):  # time-to-target mode: fastest to the target first
        return sorted(rows, key=lambda r: (r.workload, r.device, r.to_target_s is None,
                                           r.to_target_s or 0.0, r.method, r.workers))
    return sorted(rows, key=lambda r: (r.workload, r.device, r.method != BASELINE_METHOD,
                                       r.method, r.workers, str(r.batch_size), r.options))


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


def _baseline_key(key: tuple, medians: dict[tuple, float]) -> tuple | None:
    """Serial at the same batch and data options; else the same data options, any batch."""
    workload, _method, device, _workers, batch, profile, options = key
    data = _data_options(options)
    serial = [c for c in sorted(medians)
              if c[:3] == (workload, BASELINE_METHOD, device) and c[5] == profile
              and _data_options(c[6]) == data]
    exact = [c for c in serial if c[4] == batch]
    return (exact or serial or [None])[0]


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def format_table(rows: list[Row]) -> str:
    header = ("workload", "method", "device", "workers", "batch", "options", "n",
              "epoch s (IQR)", "samples/s", "speedup", "parity", "quality / status")
    lines = [header]
    for r in rows:
        epoch = "-" if r.epoch_s is None else f"{r.epoch_s:.3f} ({r.epoch_iqr_s or 0:.3f})"
        tail = r.quality if r.status == "ok" else f"{r.status}: {r.note}"
        if r.status == "ok" and r.note:
            tail += f" [{r.note}]"
        lines.append((r.workload, r.method, r.device, str(r.workers), str(r.batch_size),
                      r.options, str(r.repeats), epoch, _fmt(r.samples_per_s, ",.0f"),
                      "-" if r.speedup is None else f"{r.speedup:.2f}x", r.parity, tail))
    if any(r.to_target for r in rows):  # the column exists only in time-to-target mode
        lines = [(*line[:-1], "to target" if i == 0 else rows[i - 1].to_target or "-", line[-1])
                 for i, line in enumerate(lines)]
        header = lines[0]
    widths = [max(len(row[i]) for row in lines) for i in range(len(header) - 1)]
    out = []
    for row in lines:
        cells = [c.ljust(w) for c, w in zip(row[:-1], widths, strict=True)]
        out.append("  ".join([*cells, row[-1]]).rstrip())
    out.insert(1, "  ".join("-" * w for w in widths) + "  " + "-" * 16)
    return "\n".join(out)
