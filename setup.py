"""Build hook: stamp the project's git commit into the package.

A result records the commit it was measured on (``Result.git_commit``). From a checkout that is
``git rev-parse HEAD``; after a non-editable ``pip install .`` (asv installs each commit that
way) the installed copy has no ``.git`` beside it, so the build writes the commit to
``parabench/_commit.txt`` and :func:`parabench.envinfo.git_commit` reads it there. Everything
else about the package is declared in ``pyproject.toml``.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent


def head_commit() -> str | None:
    try:
        out = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"],
                             capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 and out.stdout.strip() else None


class StampCommit(build_py):
    def run(self) -> None:
        super().run()
        stamp = Path(self.build_lib) / "parabench" / "_commit.txt"
        stamp.unlink(missing_ok=True)  # build/ is reused: never ship an older build's commit
        commit = head_commit()
        if commit and not getattr(self, "editable_mode", False):  # editable: the checkout says
            stamp.write_text(commit + "\n")


setup(cmdclass={"build_py": StampCommit})
