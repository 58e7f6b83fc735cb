"""``parabench compare``: throughput and parity changes from BASE to NEW, or two commits rerun.

Usage::

    parabench compare BASE.jsonl NEW.jsonl [--threshold 10%] [--run-cv 6%]
    parabench compare --rerun BASE_REF [NEW_REF] --rounds 4 --workload mlp --method ddp

Exit codes: 0 no regression, 1 a regression, 2 usage error, 3 no regression but some case's
speed was not judged (BASE and NEW ran on different machines).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from parabench.case.result import read_results
from parabench.cli.common import UsageError
from parabench.cli.report import _existing


def add_parser(sub: argparse._SubParsersAction) -> None:
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


def compare_command(args: argparse.Namespace) -> int:
    from parabench.analysis.compare import compare, format_comparison, parse_threshold
    from parabench.analysis.levels import RUN_CV

    try:
        threshold = parse_threshold(args.threshold)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    run_cv = RUN_CV
    if getattr(args, "run_cv", None) is not None:
        try:
            run_cv = parse_threshold(args.run_cv)
        except ValueError as exc:
            raise UsageError(str(exc).replace("threshold", "--run-cv")) from None
    if getattr(args, "rerun", None):
        return rerun_command(args, threshold, run_cv)
    if args.base is None or args.new is None:
        raise UsageError("compare needs BASE.jsonl NEW.jsonl, or --rerun BASE_REF [NEW_REF]")
    if rerun_selection(args):
        raise UsageError("run selection flags (--workload, --method, ..) go with --rerun")
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
        raise UsageError("--rerun takes BASE_REF [NEW_REF] (git refs), not results files")
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
