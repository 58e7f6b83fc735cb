"""The CLI's report side: the ``list``, ``env``, ``report`` and ``compare`` subcommands, and
what ``run`` adds with ``--dry-run``, ``--report DIR`` and ``--tensorboard DIR``. Kept apart
from ``cli.py``, which parses arguments and dispatches to these.

Usage (from parabench.cli)::

    parser = argparse.ArgumentParser()
    add_report_commands(sub := parser.add_subparsers())   # the report / compare subparsers
    report_command(parser.parse_args(["report", "results.jsonl", "--out", "report"]))
    compare_command(parser.parse_args(["compare", "results.jsonl", "results.jsonl"]))  # 0
    rerun_selection(parser.parse_args(["compare", "--rerun", "HEAD", "--workload", "mlp"]))
    # ['--workload', 'mlp']: what each version's `parabench run` gets (rerun_command runs them)
    earlier = earlier_baselines("results.jsonl")  # serial results already in --out
    write_report_and_say(results, "report", baselines=earlier, sources=["results.jsonl"])
    tensorboard_log(None)                        # None without --tensorboard DIR
    # and `parabench run --dry-run` calls dry_run(grid, args): the plan, nothing run
    list_command(argparse.Namespace(json=True))   # 0: `parabench list --json`
    env_command(argparse.Namespace(json=False))   # 0: `parabench env`

Missing extras (matplotlib, tensorboard) and missing files are UsageErrors: one stderr line,
exit 2, saying what to install or which file. A report or event file that cannot be written
once cases ran (a full disk) is an OSError with one line saying what is kept: exit 1.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Sequence
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
    p.add_argument("base", metavar="BASE.jsonl", nargs="?")
    p.add_argument("new", metavar="NEW.jsonl", nargs="?")
    p.add_argument("--threshold", default="10%",
                   help="slowdown that counts, as 10%% or 0.1 (default: 10%%)")
    p.add_argument("--run-cv", default=None, metavar="CV",
                   help="prior run-to-run variation of one run's throughput, as 6%% or 0.06 "
                        "(default: parabench.analysis.levels.RUN_CV); measure yours with "
                        "repeated runs of the same code")
    p.add_argument("--allow-cross-machine", action="store_true",
                   help="judge speed also when BASE and NEW ran on different machines "
                        "(CPU, cores, GPUs, versions, thread settings); without it such "
                        "cases are 'not comparable' and the exit code is 3")
    add_rerun_arguments(p)


#: ``parabench run``'s flags a rerun passes on to both versions, as given (each version checks
#: them itself: a method only NEW knows is the base version's usage error)
RERUN_SELECTION = ("workload", "method", "device", "workers", "threads", "batch-size",
                   "epochs", "steps", "windows", "profile", "seed", "timeout")


def add_rerun_arguments(p: argparse.ArgumentParser) -> None:
    from parabench.registry import option_specs

    g = p.add_argument_group(
        "interleaved A/B rerun (instead of BASE.jsonl NEW.jsonl; parabench.sweep.rerun)")
    g.add_argument("--rerun", nargs="+", metavar="REF",
                   help="BASE_REF [NEW_REF]: check both versions out (git worktrees, removed "
                        "afterwards) and run the selected cases in alternating rounds; "
                        "NEW_REF defaults to the working tree as it is")
    g.add_argument("--rounds", type=_positive, default=5,
                   help="rounds; each runs the cases once per side (default: 5; from 7 "
                        "the exact sign-flip test judges them, 16 for a 5%% gate)")
    g.add_argument("--order", choices=("abba", "abab"), default="abba",
                   help="abba (default): the side that runs first alternates by round; "
                        "abab: base first every round")
    g.add_argument("--out-dir", metavar="DIR",
                   help="where every round's results file is kept (default: a new "
                        "parabench-rerun-* directory here)")
    for name in RERUN_SELECTION:
        g.add_argument(f"--{name}", dest=f"sel_{name.replace('-', '_')}", metavar="V",
                       help=f"passed to each version's parabench run --{name}")
    g.add_argument("--oversubscribe", action="store_true", dest="sel_oversubscribe",
                   help="passed to each version's parabench run")
    for name in option_specs():
        flag = "--" + name.replace("_", "-")
        g.add_argument(flag, dest=f"selopt_{name}", metavar="V", help=argparse.SUPPRESS)


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive whole number")
    return value


def rerun_selection(args: argparse.Namespace) -> list[str]:
    """The ``parabench run`` arguments the rerun's flags ask for, as given."""
    out: list[str] = []
    for key, value in vars(args).items():
        if value is None or value is False:
            continue
        if key.startswith("sel_"):
            out += [f"--{key[4:].replace('_', '-')}"] + ([] if value is True else [value])
        elif key.startswith("selopt_"):
            out += [f"--{key[7:].replace('_', '-')}", value]
    return out


def dry_run(grid: Any, args: argparse.Namespace) -> int:
    from parabench.sweep.dryrun import describe_plan
    from parabench.sweep.plan import plan

    print(describe_plan(plan(grid), list(read_results(args.out)), resume=args.resume))
    return EXIT_OK


def earlier_baselines(out: str) -> list[Result]:
    """Baseline results already in --out: parity uses them, so the table's speedup does too."""
    from parabench.analysis.ratios import is_baseline

    return [r for r in read_results(out) if is_baseline(r.method) and r.status == "ok"]


def one_line(exc: OSError) -> str:
    """An OSError as one line: ours as they are (they say what was kept), the system's
    naming the file (``[Errno 28] No space left on device: 'x'`` reads worse)."""
    if exc.strerror and exc.filename:
        return f"{exc.filename}: {exc.strerror}"
    return " ".join(str(exc).split())


def tensorboard_log(log_dir: str | None, out: str = "results.jsonl"
                    ) -> Callable[[Result], None] | None:
    """What writes each result's event files under ``log_dir`` (None without it). A write
    that fails (a full disk) stops the run with one line saying the results in ``out`` stay."""
    if log_dir is None:
        return None
    from parabench.sweep.tensorboard import TensorBoardLog

    try:
        log = TensorBoardLog(log_dir)
    except ImportError as exc:
        raise _usage_error(str(exc)) from None

    def write(result: Result) -> None:
        try:
            log.write(result)
        except OSError as exc:
            raise OSError(f"--tensorboard {log_dir}: could not write event files "
                          f"({one_line(exc)}); the run stopped, the results written to "
                          f"{out} so far are kept") from exc

    return write


def write_report_and_say(results: list[Result], out_dir: str, *,
                         baselines: Sequence[Result] = (), sources: Sequence[str] = ()) -> None:
    """Write the report; print its recommendation lines (wrapped within 120 columns: the
    report keeps each whole), then its path (the last line)."""
    from parabench.sweep.report import wrap_lines
    from parabench.sweep.site import write_report

    try:
        files = write_report(results, out_dir, baselines=baselines, sources=sources)
    except ImportError as exc:
        raise _usage_error(str(exc)) from None
    except OSError as exc:  # exit 1, one line: the results themselves are safe
        kept = f"; the results in {', '.join(sources)} are kept" if sources else ""
        raise OSError(f"could not write the report in {out_dir} ({one_line(exc)}){kept}"
                      ) from exc
    print("\n" + "\n".join(wrap_lines(files.lines)))
    print(f"\nreport: {files.html}  (also {files.markdown.name} and {len(files.pngs)} PNGs)")


def _existing(paths: Sequence[str]) -> None:
    for path in paths:
        if not Path(path).is_file():
            raise _usage_error(f"results file {path} does not exist")


def report_command(args: argparse.Namespace) -> int:
    from parabench.sweep.preflight import check_out_dir

    _existing(args.results)
    check_out_dir("--out", args.out)
    results = [r for path in args.results for r in read_results(path)]
    if not results:
        raise _usage_error(f"no results in {', '.join(args.results)}")
    write_report_and_say(results, args.out, sources=args.results)
    return EXIT_OK


def compare_command(args: argparse.Namespace) -> int:
    from parabench.analysis.compare import compare, format_comparison, parse_threshold
    from parabench.analysis.levels import RUN_CV

    try:
        threshold = parse_threshold(args.threshold)
    except ValueError as exc:
        raise _usage_error(str(exc)) from None
    run_cv = RUN_CV
    if getattr(args, "run_cv", None) is not None:
        try:
            run_cv = parse_threshold(args.run_cv)
        except ValueError as exc:
            raise _usage_error(str(exc).replace("threshold", "--run-cv")) from None
    if getattr(args, "rerun", None):
        return rerun_command(args, threshold, run_cv)
    if args.base is None or args.new is None:
        raise _usage_error("compare needs BASE.jsonl NEW.jsonl, or --rerun BASE_REF [NEW_REF]")
    if rerun_selection(args):
        raise _usage_error("run selection flags (--workload, --method, ..) go with --rerun")
    _existing([args.base, args.new])
    cmp = compare(read_results(args.base), read_results(args.new), threshold, run_cv=run_cv,
                  allow_cross_machine=getattr(args, "allow_cross_machine", False))
    print(format_comparison(cmp))
    return cmp.exit_code


def rerun_command(args: argparse.Namespace, threshold: float, run_cv: float) -> int:
    """``compare --rerun BASE_REF [NEW_REF]``: interleaved rounds, then compare's verdict."""
    import tempfile

    from parabench.analysis.compare import compare, format_comparison
    from parabench.analysis.signflip import MIN_ROUNDS
    from parabench.sweep import rerun
    from parabench.sweep.preflight import check_out_dir

    if args.base is not None or len(args.rerun) > 2:
        raise _usage_error("--rerun takes BASE_REF [NEW_REF] (git refs), not results files")
    check_out_dir("--out-dir", args.out_dir)  # before the worktrees and rounds
    root = rerun.git_root(".")
    base = rerun.resolve_ref(root, args.rerun[0])
    new = rerun.resolve_ref(root, args.rerun[1]) if len(args.rerun) == 2 else None
    rerun.check_same_dependencies(root, base, new)
    out_dir = Path(args.out_dir or tempfile.mkdtemp(prefix="parabench-rerun-", dir="."))
    print(f"rerun: base {args.rerun[0]} ({base[:12]}), new "
          f"{args.rerun[1] + f' ({new[:12]})' if new else 'the working tree ' + str(root)}; "
          f"{args.rounds} round(s), {args.order.upper()}; results in {out_dir}", flush=True)
    selection = rerun_selection(args)
    try:
        with rerun.checkouts(root, {"base": base, "new": new}) as trees:
            rounds = rerun.run_rounds(trees, selection, rounds=args.rounds, out_dir=out_dir,
                                      order=args.order,
                                      say=lambda line: print(line, flush=True))
    finally:
        print(f"rerun: round results kept in {out_dir}", flush=True)
    cmp = compare(rounds.base_results(), rounds.new_results(), threshold, run_cv=run_cv,
                  paired=True)
    print(f"\n{args.rounds} round(s), each one run per side:")
    for line in rerun.round_ratios(rounds):
        print("  " + line.text())
    if args.rounds < MIN_ROUNDS:
        print(f"  {args.rounds} round(s) are judged by the t test with a prior run-to-run CV; "
              f"from {MIN_ROUNDS} rounds the exact sign-flip test decides, which a round "
              "spoiled by another process does not move (the README's rates: 16 rounds)")
    print(format_comparison(cmp))
    return cmp.exit_code


#: ``parabench list``'s width: every line fits it (a description is cut, ``--json`` has it all)
LIST_WIDTH = 120
#: headings of the methods that train one workload family (another family: its own name)
FAMILY_TITLES = {"torch": "Training methods", "estimator": "Random-forest engines"}


def method_group(method: Any, workloads: Sequence[Any]) -> tuple[int, str]:
    """(order, heading) of the group ``parabench list`` shows ``method`` in, derived from its
    declarations: a method of several families (serial) is a baseline of them all; a peer
    library (``peer``) and TensorFlow's methods (torch workloads, ``requires`` tf) stand apart
    from the family's own; the rest by the family they train (``families``), its workloads in
    brackets (a family of one workload: its name)."""
    families = sorted(method.families)
    if len(families) != 1:
        title = "Baseline" if method.parity == "baseline" else "Methods"
        every = {w.family for w in workloads} <= method.families
        return 0, f"{title} ({'every workload' if every else ', '.join(families)})"
    family = families[0]
    names = [w.name for w in workloads if w.family == family]
    trains = names[0] if len(names) == 1 else family
    if method.peer:
        return 4, f"Peers ({trains})"
    if family == "torch" and "tf" in method.requires:
        return 2, f"TensorFlow methods ({trains}, compared with {method.baseline_method})"
    order = {"torch": 1, "estimator": 3}.get(family, 5)
    return order, f"{FAMILY_TITLES.get(family, f'{family} methods')} ({trains})"


def _fit(line: str, width: int = LIST_WIDTH) -> str:
    return line if len(line) <= width else line[: width - 3].rstrip() + "..."


def list_command(args: argparse.Namespace) -> int:
    """``parabench list [--json]``: workloads, then methods grouped by family (one line
    each: whether it runs here per device, a footnote saying why not), within 120 columns."""
    import textwrap

    from parabench.registry import methods, workloads

    wls = list(workloads)
    group_of = {m.name: method_group(m, wls) for m in methods}
    data = {
        "workloads": [
            {"name": w.name, "family": w.family, "quality": w.quality.name,
             "description": w.description}
            for w in wls
        ],
        "methods": [
            {"name": m.name, "description": m.description, "devices": list(m.devices),
             "requires": sorted(m.requires), "families": sorted(m.families), "peer": m.peer,
             "group": group_of[m.name][1],
             "runnable": {d: m.unavailable(d) is None for d in m.devices},
             "reason": {d: r for d in m.devices if (r := m.unavailable(d))}}
            for m in methods
        ],
    }
    if args.json:
        print(json.dumps(data, indent=2))
        return EXIT_OK
    names = [w["name"] for w in data["workloads"]] + [m["name"] for m in data["methods"]]
    width = max(map(len, names), default=8)
    q_width = max((len(w["quality"]) for w in data["workloads"]), default=8)
    print("Workloads:")
    for w in data["workloads"]:
        print(_fit(f"  {w['name']:<{width}} {w['family']:<10} {w['quality']:<{q_width}} "
                   f"{w['description']}"))
    reasons: list[str] = []  # footnotes: each reason a method cannot run here, once

    def here(m: dict[str, Any]) -> str:
        cells = []
        for device, ok in m["runnable"].items():
            if ok:
                cells.append(f"{device} yes")
                continue
            if m["reason"][device] not in reasons:
                reasons.append(m["reason"][device])
            cells.append(f"{device} no [{reasons.index(m['reason'][device]) + 1}]")
        return ", ".join(cells)

    shown = sorted(data["methods"], key=lambda m: (group_of[m["name"]], m["name"]))
    lines = {m["name"]: here(m) for m in shown}  # footnotes numbered as shown
    h_width = max(map(len, lines.values()), default=8)
    heading = None
    for m in shown:
        if m["group"] != heading:
            heading = m["group"]
            print(f"\n{heading}: device runnable here?")
        print(_fit(f"  {m['name']:<{width}} {lines[m['name']]:<{h_width}} {m['description']}"))
    if reasons:
        print("\nWhy not here:")
        for i, reason in enumerate(reasons, 1):
            print("\n".join(textwrap.wrap(f"[{i}] {reason}", LIST_WIDTH,
                                           subsequent_indent="    ")))
    return EXIT_OK


def env_command(args: argparse.Namespace) -> int:
    """``parabench env [--json]``: what this machine has (OS, CPU, torch, engines, ...)."""
    from parabench.envinfo import environment, format_environment

    info = environment()
    print(json.dumps(info, indent=2) if args.json else format_environment(info))
    return EXIT_OK
