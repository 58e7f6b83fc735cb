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
    repeats: int
    status: str
    epoch_s: float | None = None
    epoch_iqr_s: float | None = None
    samples_per_s: float | None = None
    speedup: float | None = None
    baseline: str | None = None
    quality: str = ""
    note: str = ""


def _iqr(values: list[float]) -> float:
    if len(values) < 2:
        return 0.0
    q = statistics.quantiles(values, n=4, method="inclusive")
    return q[2] - q[0]


def summarize(results: Iterable[Result]) -> list[Row]:
    groups: dict[tuple, list[Result]] = defaultdict(list)
    for r in results:
        batch = "-" if r.batch_size is None else str(r.batch_size)
        groups[(r.workload, r.method, r.device, r.workers, batch, r.profile)].append(r)

    medians: dict[tuple, float] = {}
    for key, rs in groups.items():
        times = [t for r in rs if r.status == "ok" and (t := r.median_epoch_s) is not None]
        if times:
            medians[key] = statistics.median(times)

    rows = []
    for key, rs in groups.items():
        workload, method, device, workers, batch, profile = key
        ok = [r for r in rs if r.status == "ok"]
        if not ok:
            worst = rs[0]
            rows.append(Row(workload=workload, method=method, device=device, workers=workers,
                            batch_size=batch, repeats=len(rs), status=worst.status,
                            note=worst.reason))
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
        rows.append(Row(
            workload=workload, method=method, device=device, workers=workers, batch_size=batch,
            repeats=len(ok), status="ok",
            epoch_s=statistics.median(times) if times else None,
            epoch_iqr_s=_iqr(times),
            samples_per_s=statistics.median(rates) if rates else None,
            speedup=speedup,
            baseline=f"{BASELINE_METHOD}/{base_key[2]} bs={base_key[4]}" if base_key else None,
            quality=f"{q_name} {statistics.median(qualities):.4f}" if qualities else "",
            note=f"{failed} repeat(s) not ok" if failed else "",
        ))
    return sorted(rows, key=lambda r: (r.workload, r.device, r.method != BASELINE_METHOD,
                                       r.method, r.workers, r.batch_size))


def _baseline_key(key: tuple, medians: dict[tuple, float]) -> tuple | None:
    workload, _method, device, _workers, batch, profile = key
    exact = (workload, BASELINE_METHOD, device, 1, batch, profile)
    if exact in medians:
        return exact
    for cand in sorted(medians):  # same workload/device/profile, any batch size
        if cand[0] == workload and cand[1] == BASELINE_METHOD and cand[2] == device \
                and cand[5] == profile:
            return cand
    return None


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def format_table(rows: list[Row]) -> str:
    header = ("workload", "method", "device", "workers", "batch", "n", "epoch s (IQR)",
              "samples/s", "speedup", "quality / status")
    lines = [header]
    for r in rows:
        epoch = "-" if r.epoch_s is None else f"{r.epoch_s:.3f} ({r.epoch_iqr_s or 0:.3f})"
        tail = r.quality if r.status == "ok" else f"{r.status}: {r.note}"
        if r.status == "ok" and r.note:
            tail += f" [{r.note}]"
        lines.append((r.workload, r.method, r.device, str(r.workers), str(r.batch_size),
                      str(r.repeats), epoch, _fmt(r.samples_per_s, ",.0f"),
                      "-" if r.speedup is None else f"{r.speedup:.2f}x", tail))
    widths = [max(len(row[i]) for row in lines) for i in range(len(header) - 1)]
    out = []
    for row in lines:
        cells = [c.ljust(w) for c, w in zip(row[:-1], widths, strict=True)]
        out.append("  ".join([*cells, row[-1]]).rstrip())
    out.insert(1, "  ".join("-" * w for w in widths) + "  " + "-" * 16)
    return "\n".join(out)
