"""Shared fixtures: the fault plugin made visible to this process and to runner workers;
short speed windows for every test outside tests/benchmarks; one cache for the session.
Every run keeps each test's duration in .pytest-durations.tsv (:mod:`durations`)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import durations

PLUGIN_DIR = Path(__file__).parent / "plugins"
BENCHMARKS = Path(__file__).parent / "benchmarks"


def pytest_configure(config: pytest.Config) -> None:
    durations.start(config)


def pytest_unconfigure(config: pytest.Config) -> None:
    durations.stop(config)


@pytest.fixture(autouse=True, scope="session")
def session_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The tests' own :mod:`parabench.cache` (never the user's ~/.cache), shared by the session
    and the worker processes it starts: the first case of a workload fills it."""
    path = tmp_path_factory.mktemp("parabench-cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PARABENCH_CACHE_DIR", str(path))
        yield path


@pytest.fixture(autouse=True)
def short_windows(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests check results, they do not measure: 2 steady windows of about 0.05 s per case
    (in this process and the CLI / worker processes it starts). Benchmarks keep the real ones.
    """
    if BENCHMARKS in Path(str(request.node.path)).parents:
        return
    monkeypatch.setenv("PARABENCH_WINDOWS", "2")
    monkeypatch.setenv("PARABENCH_WINDOW_S", "0.05")


@pytest.fixture
def fault_plugin(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """Register the ``faulty`` test workloads here and in workers; return the helpers' pid file."""
    pidfile = tmp_path / "pids.txt"
    pidfile.touch()
    monkeypatch.syspath_prepend(str(PLUGIN_DIR))
    # prepended: a checkout run through PYTHONPATH (not the installed one) stays the CLI's
    monkeypatch.setenv("PYTHONPATH", str(PLUGIN_DIR), prepend=os.pathsep)
    monkeypatch.setenv("PARABENCH_PLUGINS", "faulty")
    monkeypatch.setenv("PARABENCH_TEST_PIDFILE", str(pidfile))
    import faulty  # noqa: F401  - registers into this process's registries

    assert "faulty" in sys.modules
    return pidfile
