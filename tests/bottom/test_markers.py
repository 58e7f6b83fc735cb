"""Requirement markers come from one table (parabench.hardware.REQUIREMENTS).

``pytest --markers`` lists every one, and ``pytest -m cuda`` on a machine without a GPU skips
with the probe's reason instead of passing.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from parabench import hardware

pytestmark = pytest.mark.cpu

ROOT = Path(__file__).resolve().parents[2]


def _pytest(*args: str) -> str:
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    return proc.stdout + proc.stderr


def test_markers_lists_every_requirement_marker_and_the_others() -> None:
    listed = _pytest("--markers")
    for marker in [*hardware.markers(), "cpu", "slow"]:
        assert f"@pytest.mark.{marker}:" in listed, marker


@pytest.mark.cuda
def test_needs_a_gpu() -> None:
    """Selected by the next test through ``-m cuda``."""
    assert hardware.probe("cuda") is None


def test_dash_m_cuda_skips_with_the_probes_reason() -> None:
    out = _pytest(str(Path(__file__).relative_to(ROOT)), "-m", "cuda", "-rs", "-q",
                  "--rootdir", str(ROOT), "-o", "addopts=")
    if (reason := hardware.probe("cuda")) is None:
        assert "1 passed" in out, out
    else:
        assert "1 skipped" in out and f"[cuda] {reason}" in out, out
