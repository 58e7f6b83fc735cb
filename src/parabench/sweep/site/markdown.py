"""report.md: the same content as report.html in Markdown, plots linked as PNG files.

Usage::

    Path("report.md").write_text(render_markdown(data))
"""

from __future__ import annotations

from parabench.identity import CaseId
from parabench.sweep.site.build import SAMPLES_NOTE, ReportData


def render_markdown(data: ReportData) -> str:
    out = ["# parabench report", "", "## Recommendation", ""]
    for line in data.recommendation_lines():
        out.append(f"{'  ' if line.startswith('  ') else ''}- {line.strip()}")
    out += ["", f"_{SAMPLES_NOTE}_", "", "## Summary", "", "```", data.table, "```", ""]
    for scope in data.scopes:
        out += [f"## {scope.title}", ""]
        for name, path in scope.figures.items():
            out += [f"![{name}]({path.name})", ""]
        if scope.amdahl:
            out += ["Amdahl predictions:", "", *(f"- {a}" for a in scope.amdahl), ""]
        out += ["| configuration | parity | quality gap (+ better) | tolerance |",
                "|---|---|---|---|"]
        out += [f"| {label} | {status} | {gap} | {tol} |"
                for label, status, gap, tol in scope.parity]
        out.append("")
    if data.problems:
        out += ["## Cases that failed, timed out or were skipped", ""]
        for r in data.problems:
            reason = " ".join(r.reason.split())
            out.append(f"- {CaseId.recorded(r).label()}: **{r.status}**: {reason}")
        out.append("")
    if data.not_applicable:
        out += [data.not_applicable, ""]
    if data.wall:
        out += ["## Where the time went", "",
                f"The cases' wall time, {data.wall_total:.1f} s in all:", "",
                "| part | seconds | share | what it holds |", "|---|---|---|---|"]
        out += [f"| {name} | {seconds:.1f} | {share:.0%} | {what} |"
                for name, what, seconds, share in data.wall]
        out.append("")
    out += ["## Environment", ""]
    out += [f"- {k}: {v}" for k, v in data.env.items()]
    out += [f"- commit(s): {', '.join(data.commits) or 'not recorded'}",
            f"- results: {', '.join(data.sources) or '-'}", ""]
    return "\n".join(out)
