"""The CLI's report side: ``report`` and ``compare`` subcommands, and what ``run`` adds with
``--dry-run``, ``--report DIR`` and ``--tensorboard DIR``. Kept apart from ``cli.py``, which
parses arguments and dispatches to these.

Usage (from parabench.cli)::

    parser = argparse.ArgumentParser()
    add_report_commands(sub := parser.add_subparsers())   # the report / compare subparsers
    report_command(parser.parse_args(["report", "results.jsonl", "--out", "report"]))
    compare_command(parser.parse_args(["compare", "results.jsonl", "results.jsonl"]))  # 0
    earlier = earlier_baselines("results.jsonl")  # serial results already in --out
    write_report_and_say(results, "report", baselines=earlier, sources=["results.jsonl"])
    tensorboard_log(None)                        # None without --tensorboard DIR
    # and `parabench run --dry-run` calls dry_run(grid, args): the plan, nothing run

Missing extras (matplotlib, tensorboard) and missing files are UsageErrors: one stderr line,
exit 2, saying what to install or which file.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from parabench.case.result import Result, read_results
from parabench.config import ConfigError

EXIT_OK, EXIT_FAILED = 0, 1


def _usage_error(message: str) -> Exception:
    # a ConfigError is a usage error to the CLI (one stderr line, exit 2); importing cli's
    # UsageError here would make cli and cli_report import each other
    return ConfigError(message)


def add_report_commands(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("report", help="HTML + Markdown report with plots and a recommendation")
    p.add_argument("results", nargs="+", metavar="RESULTS.jsonl", help="results file(s)")
    p.add_argument("--out", default="report",
                   help="folder for report.html, report.md and the PNGs (default: report)")
    p = sub.add_parser("compare", help="throughput / parity changes from BASE to NEW; "
                                       "exit 1 on a significant slowdown or new parity failure")
    p.add_argument("base", metavar="BASE.jsonl")
    p.add_argument("new", metavar="NEW.jsonl")
    p.add_argument("--threshold", default="10%",
                   help="slowdown that counts, as 10%% or 0.1 (default: 10%%)")


def dry_run(grid: Any, args: argparse.Namespace) -> int:
    from parabench.sweep.dryrun import describe_plan
    from parabench.sweep.plan import plan

    print(describe_plan(plan(grid), list(read_results(args.out)), resume=args.resume))
    return EXIT_OK


def earlier_baselines(out: str) -> list[Result]:
    """Baseline results already in --out: parity uses them, so the table's speedup does too."""
    from parabench.analysis.ratios import is_baseline

    return [r for r in read_results(out) if is_baseline(r.method) and r.status == "ok"]


def tensorboard_log(log_dir: str | None) -> Any:
    if log_dir is None:
        return None
    from parabench.sweep.tensorboard import TensorBoardLog

    try:
        return TensorBoardLog(log_dir)
    except ImportError as exc:
        raise _usage_error(str(exc)) from None


def write_report_and_say(results: list[Result], out_dir: str, *,
                         baselines: Sequence[Result] = (), sources: Sequence[str] = ()) -> None:
    """Write the report; print its recommendation lines, then its path (the last line)."""
    from parabench.sweep.site import write_report

    try:
        files = write_report(results, out_dir, baselines=baselines, sources=sources)
    except ImportError as exc:
        raise _usage_error(str(exc)) from None
    print("\n" + "\n".join(files.lines))
    print(f"\nreport: {files.html}  (also {files.markdown.name} and {len(files.pngs)} PNGs)")


def _existing(paths: Sequence[str]) -> None:
    for path in paths:
        if not Path(path).is_file():
            raise _usage_error(f"results file {path} does not exist")


def report_command(args: argparse.Namespace) -> int:
    _existing(args.results)
    results = [r for path in args.results for r in read_results(path)]
    if not results:
        raise _usage_error(f"no results in {', '.join(args.results)}")
    write_report_and_say(results, args.out, sources=args.results)
    return EXIT_OK


def compare_command(args: argparse.Namespace) -> int:
    from parabench.analysis.compare import compare, format_comparison, parse_threshold

    try:
        threshold = parse_threshold(args.threshold)
    except ValueError as exc:
        raise _usage_error(str(exc)) from None
    _existing([args.base, args.new])
    cmp = compare(read_results(args.base), read_results(args.new), threshold)
    print(format_comparison(cmp))
    return EXIT_FAILED if cmp.regressed else EXIT_OK
