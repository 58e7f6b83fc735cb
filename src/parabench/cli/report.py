"""``parabench report``: the HTML and Markdown report of results files.

Usage::

    parabench report results.jsonl [more.jsonl ...] --out report

``parabench run --report DIR`` writes the same report (:func:`write_report_and_say`). A missing
file or extra (matplotlib) is a usage error: one stderr line, exit 2; a report that cannot be
written once cases ran (a full disk) is one line saying what is kept, exit 1.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from parabench.case.result import Result, read_results
from parabench.cli.common import EXIT_OK, UsageError, one_line


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("report", help="HTML + Markdown report with plots and a recommendation")
    p.add_argument("results", nargs="+", metavar="RESULTS.jsonl", help="results file(s)")
    p.add_argument("--out", default="report",
                   help="folder for report.html, report.md and the PNGs (default: report)")


def write_report_and_say(results: list[Result], out_dir: str, *,
                         baselines: Sequence[Result] = (), sources: Sequence[str] = ()) -> None:
    """Write the report; print its recommendation lines (wrapped within 120 columns: the
    report keeps each whole), then its path (the last line)."""
    from parabench.sweep.site import write_report
    from parabench.sweep.table import wrap_lines

    try:
        files = write_report(results, out_dir, baselines=baselines, sources=sources)
    except ImportError as exc:
        raise UsageError(str(exc)) from None
    except OSError as exc:  # exit 1, one line: the results themselves are safe
        kept = f"; the results in {', '.join(sources)} are kept" if sources else ""
        raise OSError(f"could not write the report in {out_dir} ({one_line(exc)}){kept}"
                      ) from exc
    print("\n" + "\n".join(wrap_lines(files.lines)))
    print(f"\nreport: {files.html}  (also {files.markdown.name} and {len(files.pngs)} PNGs)")


def _existing(paths: Sequence[str]) -> None:
    for path in paths:
        if not Path(path).is_file():
            raise UsageError(f"results file {path} does not exist")


def report_command(args: argparse.Namespace) -> int:
    from parabench.sweep.preflight import check_out_dir

    _existing(args.results)
    check_out_dir("--out", args.out)
    results = [r for path in args.results for r in read_results(path)]
    if not results:
        raise UsageError(f"no results in {', '.join(args.results)}")
    write_report_and_say(results, args.out, sources=args.results)
    return EXIT_OK
