"""The runner's temporary directory: named for its owner, removed on every exit path.

Usage::

    with runner_tempdir() as tmp:      # /tmp/parabench-run-<pid>-<random suffix>
        ...                             # gone afterwards, on return, exception or signal

A runner killed by SIGKILL cannot clean up, so each new runner first removes the
``parabench-run-<pid>-*`` directories whose owning pid is no longer alive (and only those:
a directory of a live runner, or of another user, is left alone).
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psutil

PREFIX = "parabench-run-"
_NAME = re.compile(rf"^{re.escape(PREFIX)}(\d+)-")


def _owner_alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def remove_stale(root: str | os.PathLike[str] | None = None) -> list[Path]:
    """Remove the directories left by runners that died without cleaning up; return them."""
    base = Path(root or tempfile.gettempdir())
    removed = []
    try:
        entries = list(base.iterdir())
    except OSError:
        return removed
    for path in entries:
        match = _NAME.match(path.name)
        if match is None or _owner_alive(int(match.group(1))):
            continue
        try:
            if not path.is_dir() or path.stat().st_uid != os.getuid():
                continue
        except OSError:
            continue
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    return removed


@contextmanager
def runner_tempdir(root: str | os.PathLike[str] | None = None) -> Iterator[Path]:
    """A fresh directory named for this process, removed when the block ends in any way."""
    remove_stale(root)
    with tempfile.TemporaryDirectory(prefix=f"{PREFIX}{os.getpid()}-", dir=root) as tmp:
        yield Path(tmp)
