"""What every ``parabench`` command shares: exit codes, the usage error, the parser class.

Usage::

    from parabench.cli.common import EXIT_USAGE, UsageError
    error = UsageError("--epochs takes a number")   # raised: one stderr line, exit EXIT_USAGE


A :class:`~parabench.config.ConfigError` (a bad value found below the CLI) is a usage error
too (:func:`parabench.cli.main` turns both into one line and exit 2).
"""

from __future__ import annotations

import argparse
import signal
from typing import NoReturn

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
EXIT_SIGINT, EXIT_SIGTERM = 128 + signal.SIGINT, 128 + signal.SIGTERM  # the shell's 130, 143


class UsageError(Exception):
    """Bad command-line input; becomes one stderr line and exit code 2."""


class Terminated(BaseException):
    """SIGTERM arrived; unwinds like KeyboardInterrupt, so every ``finally`` runs (the case's
    process group is killed, the temporary directory removed)."""


def _on_sigterm(signum: int, frame: object) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second SIGTERM must not cut cleanup short
    raise Terminated


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see '{self.prog} --help')")


def one_line(exc: OSError) -> str:
    """An OSError as one line: ours as they are (they say what was kept), the system's
    naming the file (``[Errno 28] No space left on device: 'x'`` reads worse)."""
    if exc.strerror and exc.filename:
        return f"{exc.filename}: {exc.strerror}"
    return " ".join(str(exc).split())
