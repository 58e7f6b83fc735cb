"""Shared fixtures: the fault plugin made visible to this process and to runner workers."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

PLUGIN_DIR = Path(__file__).parent / "plugins"


@pytest.fixture
def fault_plugin(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """Register the ``faulty`` test workloads here and in workers; return the helpers' pid file."""
    pidfile = tmp_path / "pids.txt"
    pidfile.touch()
    monkeypatch.syspath_prepend(str(PLUGIN_DIR))
    monkeypatch.setenv("PYTHONPATH", str(PLUGIN_DIR))
    monkeypatch.setenv("PARABENCH_PLUGINS", "faulty")
    monkeypatch.setenv("PARABENCH_TEST_PIDFILE", str(pidfile))
    import faulty  # noqa: F401  - registers into this process's registries

    assert "faulty" in sys.modules
    return pidfile
