"""The runner's temporary directory: named for its owner, removed on every exit path.

Usage::

    with runner_tempdir() as tmp:      # /tmp/parabench-run-<pid>-<random suffix>
        ...                             # gone afterwards, on return, exception or signal
        env = {SWEEP_DIR_ENV: str(tmp)}  # the runner hands it to every case it starts
    sweep_dir()                         # in a case: that folder (None outside a sweep)

What the cases of one sweep share lives in the sweep's folder (the matmul peak an MFU is
against, generated data): measured or built by the first case that needs it, read by the
others, gone with the sweep. A ``$PARABENCH_SWEEP_DIR`` already set when the runner starts
(an existing folder) is used instead, so several runs of a script share it; the user removes it.

A runner killed by SIGKILL cannot clean up, so each new runner first removes the
``parabench-run-<pid>-*`` directories whose owning pid is no longer alive (and only those:
a directory of a live runner, or of another user, is left alone). Other owners name their
folders the same way with their own prefix and find their dead ones with
``stale_dirs(prefix=...)`` (``parabench compare --rerun``'s worktrees: ``parabench.sweep.rerun``).
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
#: the variable naming the sweep's folder in a case's environment
SWEEP_DIR_ENV = "PARABENCH_SWEEP_DIR"


def _owner_alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def stale_dirs(root: str | os.PathLike[str] | None = None, prefix: str = PREFIX) -> list[Path]:
    """This user's ``<prefix><pid>-*`` directories in ``root`` (the temporary directory) whose
    owning pid is no longer alive, in name order."""
    base = Path(root or tempfile.gettempdir())
    name = re.compile(rf"^{re.escape(prefix)}(\d+)-")
    try:
        entries = sorted(base.iterdir())
    except OSError:
        return []
    stale = []
    for path in entries:
        match = name.match(path.name)
        if match is None or _owner_alive(int(match.group(1))):
            continue
        try:
            if path.is_dir() and path.stat().st_uid == os.getuid():
                stale.append(path)
        except OSError:
            continue
    return stale


def remove_stale(root: str | os.PathLike[str] | None = None, prefix: str = PREFIX) -> list[Path]:
    """Remove the directories left by owners that died without cleaning up; return them."""
    removed = stale_dirs(root, prefix)
    for path in removed:
        shutil.rmtree(path, ignore_errors=True)
    return removed


@contextmanager
def runner_tempdir(root: str | os.PathLike[str] | None = None) -> Iterator[Path]:
    """A fresh directory named for this process, removed when the block ends in any way."""
    remove_stale(root)
    with tempfile.TemporaryDirectory(prefix=f"{PREFIX}{os.getpid()}-", dir=root) as tmp:
        yield Path(tmp)


def sweep_dir() -> Path | None:
    """The folder of the sweep this case runs in (``$PARABENCH_SWEEP_DIR``), if it exists."""
    named = os.environ.get(SWEEP_DIR_ENV, "")
    return Path(named) if named and Path(named).is_dir() else None
