"""``parabench report``: one self-contained HTML page, a Markdown twin and the plot PNGs.

Usage::

    from parabench.sweep.site import write_report
    paths = write_report(results, out_dir="report", sources=["results.jsonl"])
    paths.html, paths.markdown, paths.pngs
    paths.lines          # the recommendation as text, the page's first lines

The page needs no network to view (plots are embedded as base64). Building it needs
matplotlib (``pip install 'parabench[report]'``); without it this raises ImportError with
that advice.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from parabench.case.result import Result


@dataclass(frozen=True, kw_only=True)
class ReportFiles:
    html: Path
    markdown: Path
    pngs: list[Path]
    lines: list[str]


def write_report(results: Iterable[Result], out_dir: str | Path, *,
                 baselines: Iterable[Result] = (), sources: Sequence[str] = ()) -> ReportFiles:
    from parabench.sweep.site.build import build
    from parabench.sweep.site.html import render_html
    from parabench.sweep.site.markdown import render_markdown

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    data = build(results, out_dir=out, baselines=baselines, sources=sources)
    html, md = out / "report.html", out / "report.md"
    html.write_text(render_html(data), encoding="utf-8")
    md.write_text(render_markdown(data), encoding="utf-8")
    pngs = [p for s in data.scopes for p in s.figures.values()]
    return ReportFiles(html=html, markdown=md, pngs=pngs, lines=data.recommendation_lines())
