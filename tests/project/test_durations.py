"""Every pytest run keeps its tests' durations (tests/durations.py): a real pytest run of a
small crafted module writes every test with its outcome, slowest first, setup and teardown
counted; a second run merges into the file; a run inside a test keeps none. No wall-clock
bound but "at least the sleep"."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import durations

pytestmark = pytest.mark.cpu
TESTS = Path(__file__).resolve().parents[1]

SAMPLE = """
import time

import pytest


@pytest.fixture
def slow_teardown():
    yield
    time.sleep(0.1)


@pytest.fixture
def broken():
    raise RuntimeError("setup fails")


def test_sleeps():
    time.sleep(0.2)


def test_teardown_counts(slow_teardown):
    time.sleep(0.1)


def test_fails():
    assert False


def test_errors(broken):
    pass


@pytest.mark.skip(reason="not here")
def test_skipped():
    pass


@pytest.mark.xfail(reason="known")
def test_known_bug():
    assert False
"""


def _run(tmp_path: Path, *args: str, **env: str | None) -> subprocess.CompletedProcess[str]:
    (tmp_path / "pytest.ini").write_text("[pytest]\n")  # the rootdir, whatever is above it
    (tmp_path / "test_sample.py").write_text(textwrap.dedent(SAMPLE))
    environ = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(TESTS), os.environ.get("PYTHONPATH", "")])}
    for key, value in env.items():
        if value is None:
            environ.pop(key, None)
        else:
            environ[key] = value
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "durations", "-p", "no:cacheprovider", "-q",
         *args, "test_sample.py"],
        cwd=tmp_path, env=environ, capture_output=True, text=True, timeout=120)


def _rows(path: Path) -> list[tuple[float, str, str]]:
    lines = path.read_text().splitlines()
    assert lines[0].startswith("# seconds\toutcome\ttest")
    return [(float(s), outcome, test) for s, outcome, test in
            (line.split("\t") for line in lines[1:])]


def test_a_run_writes_every_test_with_its_outcome_slowest_first(tmp_path: Path) -> None:
    out = tmp_path / "kept" / "durations.tsv"
    proc = _run(tmp_path, **{durations.ENV: str(out)})
    assert proc.returncode == 1, proc.stdout[-2000:]  # a test failed: the file is still written
    rows = _rows(out)
    seconds = {test.split("::")[1]: s for s, _, test in rows}
    outcome = {test.split("::")[1]: o for _, o, test in rows}
    assert outcome == {"test_sleeps": "passed", "test_teardown_counts": "passed",
                       "test_fails": "failed", "test_errors": "error",
                       "test_skipped": "skipped", "test_known_bug": "xfailed"}
    assert all(test.startswith("test_sample.py::") for _, _, test in rows)
    assert [s for s, _, _ in rows] == sorted((s for s, _, _ in rows), reverse=True)
    assert seconds["test_sleeps"] >= 0.2
    assert seconds["test_teardown_counts"] >= 0.2  # 0.1 s in the call, 0.1 s in teardown
    assert not (tmp_path / durations.FILE).exists()  # only where it was asked to go


def test_by_default_the_file_is_the_rootdirs_and_collecting_keeps_the_last(
    tmp_path: Path
) -> None:
    proc = _run(tmp_path, "-k", "sleeps", **{durations.ENV: None})
    assert proc.returncode == 0, proc.stdout[-2000:]
    [(seconds, outcome, test)] = _rows(tmp_path / durations.FILE)
    assert (outcome, test) == ("passed", "test_sample.py::test_sleeps") and seconds >= 0.2
    before = (tmp_path / durations.FILE).read_text()
    assert _run(tmp_path, "--collect-only", **{durations.ENV: None}).returncode == 0
    assert (tmp_path / durations.FILE).read_text() == before


def test_a_run_inside_a_test_keeps_none(tmp_path: Path) -> None:
    """This suite's own run set the switch (tests/conftest.py): the nested run inherits it."""
    assert os.environ.get(durations.ENV) == durations.OFF
    proc = _run(tmp_path, "-k", "sleeps")
    assert proc.returncode == 0, proc.stdout[-2000:]
    assert not list(tmp_path.glob("*.tsv"))


def test_a_second_run_merges_its_tests_into_the_file(tmp_path: Path) -> None:
    """The two tiers leave one file: the second run's tests join, a test run again is replaced."""
    out = tmp_path / "durations.tsv"
    assert _run(tmp_path, "-k", "sleeps", **{durations.ENV: str(out)}).returncode == 0
    [(first, _, _)] = _rows(out)
    assert _run(tmp_path, "-k", "teardown", **{durations.ENV: str(out)}).returncode == 0
    assert {test.split("::")[1] for _, _, test in _rows(out)} == {
        "test_sleeps", "test_teardown_counts"}
    assert _run(tmp_path, "-k", "sleeps", **{durations.ENV: str(out)}).returncode == 0
    rows = _rows(out)
    assert sorted(test.split("::")[1] for _, _, test in rows) == [
        "test_sleeps", "test_teardown_counts"]  # replaced, not listed twice
    assert [s for s, _, _ in rows] == sorted((s for s, _, _ in rows), reverse=True)
    assert durations.read(out) == rows and durations.read(tmp_path / "missing.tsv") == []
    assert first >= 0.2
