"""Command line: ``parabench list | env | run | calibrate | report | compare``.

Usage::

    parabench list [--json]
    parabench env [--json]
    parabench run [--workload W,..] [--method M,..] [--all] [--device cpu,cuda] [--workers 1,2]
                  [--batch-size N,..|auto] [--epochs N] [--profile tiny|quick|full]
                  [--repeats R] [--seed S] [--timeout SEC] [--out FILE.jsonl] [--resume]
                  [--target-quality [Q|default] [--max-epochs N]]   # time to accuracy
                  [--report DIR] [--tensorboard DIR] [--dry-run] [--targets FILE]
    parabench calibrate --workload W [--profile P] [--seeds N] [--targets FILE] [--dry-run]
    parabench report RESULTS.jsonl [...] [--out DIR]
    parabench compare BASE.jsonl NEW.jsonl [--threshold 10%] [--run-cv 6%]
                  [--allow-cross-machine]
    parabench compare --rerun BASE_REF [NEW_REF] [--rounds N] [--order abba|abab]
                      [--out-dir DIR] [--workload W,..] [--method M,..] [--profile P] ...

``parabench run`` with neither ``--workload`` nor ``--method`` plans the coverage grid (every
method once, every workload under serial and a data-parallel method; tiny, 1 epoch: minutes,
see :mod:`parabench.sweep.coverage`); ``--all`` plans the full product (quick, 3 epochs: hours).
A sweep given neither ``--epochs`` nor ``--target-quality`` trains each workload that has a
measured target at the profile (tiny) to it, and ranks by time to it (the planner decides:
:func:`parabench.sweep.plan.stopping_rule`).

One module per command: :mod:`~parabench.cli.run`, :mod:`~parabench.cli.calibrate`,
:mod:`~parabench.cli.report`, :mod:`~parabench.cli.compare`, :mod:`~parabench.cli.info` (list,
env); torchrun's entry point is :mod:`~parabench.cli.torchrun`; what they share is
:mod:`~parabench.cli.common`.

Exit codes: 0 every case ok or skipped, 1 some case failed / timed out / ran out of memory,
or a result, report or event file could not be written (one line; what was written is kept),
2 usage error (one line on stderr saying what was wrong and what is valid; found before any
case starts where it can be), 130 interrupted by Ctrl-C (SIGINT), 143 stopped by SIGTERM.
``compare``: 0 no regression, 1 a regression, 2 usage error, 3 no regression but some case's
speed not judged because BASE and NEW ran on different machines.
Either signal stops the running case (its whole process group) and keeps the results
already written. Argument parsing lives in ``build_parser``; each subcommand is one
``cmd_<name>`` function.
"""

from __future__ import annotations

import argparse
import signal
import sys
from collections.abc import Callable, Sequence

from parabench.cli import calibrate, compare, info, report, run
from parabench.cli.common import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_SIGINT,
    EXIT_SIGTERM,
    EXIT_USAGE,
    Terminated,
    UsageError,
    _on_sigterm,
    _Parser,
    one_line,
)
from parabench.cli.run import COVERAGE_PROFILE, FULL_PROFILE, grid_from, option_axes
from parabench.config import ConfigError
from parabench.registry import UnknownNameError
from parabench.stopping import StopError

__all__ = ["COMMANDS", "COVERAGE_PROFILE", "EXIT_FAILED", "EXIT_OK", "EXIT_USAGE", "FULL_PROFILE",
           "UsageError", "build_parser", "grid_from", "main", "option_axes"]


def build_parser() -> argparse.ArgumentParser:
    from parabench import __version__

    parser = _Parser(prog="parabench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--version", action="version", version=f"parabench {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    info.add_parsers(sub)
    run.add_parser(sub)
    calibrate.add_parser(sub)
    report.add_parser(sub)
    compare.add_parser(sub)
    return parser


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "list": info.list_command,
    "env": info.env_command,
    "run": run.cmd_run,
    "calibrate": calibrate.cmd_calibrate,
    "report": report.report_command,
    "compare": compare.compare_command,
}


def main(argv: Sequence[str] | None = None) -> int:
    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        return _main(argv)
    finally:
        signal.signal(signal.SIGTERM, previous)


def _main(argv: Sequence[str] | None) -> int:
    try:
        args = build_parser().parse_args(argv)
        return COMMANDS[args.command](args)
    except (UsageError, UnknownNameError, ConfigError, StopError) as exc:
        print(f"parabench: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except BrokenPipeError:  # `parabench list | head`: the reader left; not an error
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK
    except OSError as exc:  # a disk filled or a folder went away after the checks up front
        print(f"parabench: error: {one_line(exc)}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        print("parabench: interrupted; results recorded so far are kept", file=sys.stderr)
        return EXIT_SIGINT
    except Terminated:
        print("parabench: terminated by SIGTERM; the running case was stopped, results "
              "recorded so far are kept", file=sys.stderr)
        return EXIT_SIGTERM


if __name__ == "__main__":
    sys.exit(main())
