"""report.html: one self-contained page (CSS inline, plots as base64 PNGs, no scripts).

Usage::

    Path("report.html").write_text(render_html(data))

The recommendation is the first thing on the page, above the fold; then the summary table,
one section per workload/device/profile with its plots, Amdahl predictions and parity, the
cases that failed or were skipped (whole reasons), and the environment.
"""

from __future__ import annotations

import base64
from html import escape
from pathlib import Path

from parabench.analysis.figures import memory_cell
from parabench.analysis.stats import rate_text
from parabench.identity import CaseId
from parabench.sweep.site.build import SAMPLES_NOTE, SPEED_NOTE, ReportData, Scope
from parabench.sweep.table import TO_TARGET, Row, mfu_cell, windows_phrase

CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:1.2em auto;
max-width:1100px;padding:0 1em;color:#222;line-height:1.4}
h1{font-size:1.4em;margin:0 0 .4em}h2{font-size:1.15em;margin-top:1.6em;
border-bottom:1px solid #ddd}h3{font-size:1em}
#recommendation{background:#eef6ee;border:2px solid #3a7d44;border-radius:6px;padding:.6em 1em}
#recommendation p{margin:.3em 0}.rec-main{font-weight:600;font-size:1.05em}
.rec-sub{margin-left:1.2em;font-size:.92em}.bad{color:#a00}
table{border-collapse:collapse;font-size:.82em;margin:.5em 0}
td,th{border:1px solid #ccc;padding:2px 6px;text-align:left;white-space:nowrap}
th{background:#f4f4f4}tr.best td{background:#eef6ee;font-weight:600}
img{max-width:100%;margin:.3em 0;border:1px solid #eee}.note{color:#555;font-size:.88em}
pre{background:#f7f7f7;padding:.5em;white-space:pre-wrap;font-size:.82em}
"""


def _img(path: Path) -> str:
    data = base64.b64encode(path.read_bytes()).decode()
    return f'<img alt="{escape(path.stem)}" src="data:image/png;base64,{data}">'


def _recommendation(data: ReportData) -> str:
    parts = []
    for line in data.recommendation_lines():
        sub = line.startswith("  ")
        cls = "rec-sub" + (" bad" if "FAILED" in line else "") if sub else "rec-main"
        parts.append(f'<p class="{cls}">{escape(line.strip())}</p>')
    return ('<section id="recommendation"><h2 style="margin-top:0;border:0">Recommendation'
            "</h2>" + "".join(parts) + "</section>")


def _table(rows: list[Row]) -> str:
    extra = sorted({h for r in rows for h in r.extra})
    mfu = any(r.mfu is not None for r in rows)  # results from before MFU: no column
    head = ["workload", "method", "device", "workers", "batch", "profile", "options", "n",
            "epoch s (IQR)", "samples/s", "speedup", *(["MFU"] if mfu else []),
            "peak MB (PSS)", "parity", *extra, "quality / status"]
    out = ["<table><tr>" + "".join(f"<th>{escape(h)}</th>" for h in head) + "</tr>"]
    for r in rows:
        if r.unsupported:
            continue
        epoch = "-" if r.epoch_s is None else f"{r.epoch_s:.3f} ({r.epoch_iqr_s or 0:.3f})"
        mem = memory_cell(r.peak_mb, r.peak_is_rss) + (
            f" + {r.peak_gpu_mb:,.0f} GPU" if r.peak_mb is not None and r.peak_gpu_mb else "")
        tail = r.quality if r.status == "ok" else f"{r.status}: {r.note}"
        cells = [r.workload, r.method + (" *" if r.fastest else ""), r.device, r.workers,
                 r.batch_size, r.profile, r.options, r.repeats, epoch,
                 rate_text(r.samples_per_s, r.samples_per_s_ci),
                 "-" if r.speedup is None else f"{r.speedup:.2f}x",
                 *([mfu_cell(r)] if mfu else []), mem, r.parity,
                 *(r.extra.get(h, "-") for h in extra), tail]
        cls = ' class="best"' if r.fastest else ""
        out.append(f"<tr{cls}>" + "".join(f"<td>{escape(str(c))}</td>" for c in cells)
                   + "</tr>")
    out.append("</table>")
    return "".join(out)


def _speed_note(rows: list[Row]) -> str:
    """SPEED_NOTE, plus the windows these rows measured (when any did)."""
    phrase = windows_phrase(rows)
    return f"{SPEED_NOTE} Here: {phrase}." if phrase else SPEED_NOTE


def _scope(scope: Scope) -> str:
    out = [f"<h2>{escape(scope.title)}</h2>"]
    for name, path in scope.figures.items():
        out.append(f"<h3>{escape(name.capitalize())}</h3>{_img(path)}")
    if scope.amdahl:
        out.append("<h3>Amdahl predictions</h3><ul>"
                   + "".join(f"<li>{escape(a)}</li>" for a in scope.amdahl) + "</ul>")
    out.append("<h3>Parity with serial</h3><table><tr><th>configuration</th><th>parity</th>"
               "<th>quality gap (+ better)</th><th>tolerance</th></tr>")
    for label, status, gap, tol in scope.parity:
        cls = ' class="bad"' if status == "failed" else ""
        out.append(f"<tr{cls}><td>{escape(label)}</td><td>{escape(status)}</td>"
                   f"<td>{gap}</td><td>{tol}</td></tr>")
    out.append("</table>")
    return "".join(out)


def _problems(data: ReportData) -> str:
    if not data.problems and not data.not_applicable:
        return ""
    out = ["<h2>Cases that failed, timed out or were skipped</h2>"]
    if data.problems:
        out.append("<table><tr><th>case</th><th>status</th><th>reason</th></tr>")
        for r in data.problems:
            case = CaseId.recorded(r).label()
            out.append(f"<tr><td>{escape(case)}</td><td>{escape(r.status)}</td>"
                       f"<td><pre>{escape(r.reason)}</pre></td></tr>")
        out.append("</table>")
    if data.not_applicable:
        out.append(f'<p class="note">{escape(data.not_applicable)}</p>')
    return "".join(out)


def _wall(data: ReportData) -> str:
    if not data.wall:
        return ""
    rows = "".join(f"<tr><td>{escape(name)}</td><td>{seconds:.1f}</td><td>{share:.0%}</td>"
                   f"<td>{escape(what)}</td></tr>" for name, what, seconds, share in data.wall)
    return (f"<h2>Where the time went</h2>"
            f"<p>The cases' wall time, {data.wall_total:.1f} s in all:</p>"
            f"<table><tr><th>part</th><th>seconds</th><th>share</th><th>what it holds</th>"
            f"</tr>{rows}</table>")


def _environment(data: ReportData) -> str:
    rows = "".join(f"<tr><th>{escape(str(k))}</th><td>{escape(str(v))}</td></tr>"
                   for k, v in data.env.items())
    commits = ", ".join(data.commits) or "not recorded"
    sources = ", ".join(data.sources) or "-"
    return (f"<h2>Environment</h2><table>{rows}</table>"
            f'<p class="note">commit(s): {escape(commits)}; results: {escape(sources)}</p>')


def _star_note(rows: list[Row]) -> str:
    """What the star means: the soonest to the target in time-to-target mode, else the
    fastest by samples/s (as the text table's note says)."""
    star = ("* soonest to the target among configurations whose parity holds (serial when "
            "within noise)" if any(TO_TARGET in r.extra for r in rows)
            else "* fastest configuration whose parity holds")
    return f"{star}; speedup is against serial at the same batch and data options."


def render_html(data: ReportData) -> str:
    body = [
        "<h1>parabench report</h1>",
        _recommendation(data),
        f'<p class="note">{escape(SAMPLES_NOTE)}</p>',
        "<h2>Summary</h2>", _table(data.rows),
        f'<p class="note">{escape(_star_note(data.rows))}</p>',
        f'<p class="note">{escape(_speed_note(data.rows))}</p>',
        *(_scope(s) for s in data.scopes),
        _problems(data),
        _wall(data),
        _environment(data),
    ]
    return ("<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">"
            f"<title>parabench report</title><style>{CSS}</style></head><body>"
            + "\n".join(body) + "</body></html>\n")
