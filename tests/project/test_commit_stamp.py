"""A non-editable install still knows its commit: the build stamps it (``setup.py``).

asv installs every commit it benchmarks with ``pip install .`` into its own environment, where
no ``.git`` sits beside the package; before the stamp, ``git_commit`` was null in every such
result. The test builds the real wheel, installs it into a scratch directory and asks the
installed copy.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.cpu
ROOT = Path(__file__).resolve().parents[2]


def _head() -> str:
    out = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True,
                         text=True, timeout=30)
    if out.returncode != 0:
        pytest.skip("not a git checkout: nothing to stamp")
    return out.stdout.strip()


def test_installed_wheel_reports_the_commit_it_was_built_from(tmp_path: Path) -> None:
    head = _head()
    wheels, target = tmp_path / "wheels", tmp_path / "site"
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run([*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(wheels),
                    str(ROOT)], check=True, timeout=300, cwd=tmp_path)
    [wheel] = wheels.glob("parabench-*.whl")
    subprocess.run([*pip, "install", "--no-deps", "--target", str(target), str(wheel)],
                   check=True, timeout=300)
    probe = ("import parabench.envinfo as e, pathlib; "
             "print(pathlib.Path(e.__file__).parent); print(e.git_commit())")
    env = {"PYTHONPATH": str(target), "PATH": "/usr/bin:/bin"}  # no ASV_COMMIT
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         env=env, cwd=tmp_path, timeout=120)
    assert out.returncode == 0, out.stderr
    where, commit = out.stdout.split()
    assert Path(where).is_relative_to(target), f"imported {where}, not the installed copy"
    assert commit == head
