"""Every test's duration, kept by every pytest run: a file of all of them, slowest first.

Usage::

    pytest ...                     # writes <rootdir>/.pytest-durations.tsv (git-ignored)
    pytest -m 'slow and not long'  # the second tier: its tests join the file (merged)
    PARABENCH_TEST_DURATIONS=/tmp/d.tsv pytest ...         # elsewhere; "-": keep none
    grep -v '^#' .pytest-durations.tsv | head -15          # the slowest 15 (.ci/run prints them)
    pytest -p durations ...        # the plugin alone (tests/ on the path), as its own test runs it

tests/conftest.py turns it on for the suite. A test's duration is its setup + call + teardown
(a module fixture's setup counts to the first test that asks for it); its outcome is
``passed``, ``failed``, ``error`` (in setup or teardown), ``skipped``, ``xfailed`` or
``xpassed``. One line per test: ``seconds<TAB>outcome<TAB>test id``, after a ``#`` header. The
file is written once, at the session's end, and only by a session that ran tests (a
``--collect-only`` leaves the last run's file). A run merges into the file it finds: its tests
replace their own earlier lines and the others stay, so the two tiers (plain ``pytest``, then
``-m 'slow and not long'``) leave one file of the whole suite; remove the file to start afresh
(.ci/run does). A pytest run started inside a test (the
markers test runs one) keeps no file: the outer run's would be overwritten by a fragment.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ENV = "PARABENCH_TEST_DURATIONS"
FILE = ".pytest-durations.tsv"
OFF = "-"
NAME = "parabench-durations"


class Durations:
    """Sums each test's phases as their reports arrive; writes them at the session's end."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.seconds: dict[str, float] = {}
        self.outcome: dict[str, str] = {}

    @pytest.hookimpl
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.seconds[report.nodeid] = self.seconds.get(report.nodeid, 0.0) + report.duration
        if self.outcome.get(report.nodeid, "passed") != "passed":
            return  # the first phase that did not pass names the outcome
        xfail = hasattr(report, "wasxfail")
        if report.failed:
            outcome = "failed" if report.when == "call" else "error"
        elif report.skipped:
            outcome = "xfailed" if xfail else "skipped"
        else:
            outcome = "xpassed" if xfail and report.when == "call" else "passed"
        self.outcome[report.nodeid] = outcome

    @pytest.hookimpl
    def pytest_sessionfinish(self) -> None:
        if not self.seconds:
            return
        kept = {test: (s, outcome) for s, outcome, test in read(self.path)
                if test not in self.seconds}  # an earlier run's (the other tier's) tests
        kept |= {test: (s, self.outcome[test]) for test, s in self.seconds.items()}
        rows = sorted(kept.items(), key=lambda kv: (-kv[1][0], kv[0]))
        lines = ["# seconds\toutcome\ttest (setup + call + teardown, slowest first)"]
        lines += [f"{s:.3f}\t{outcome}\t{test}" for test, (s, outcome) in rows]
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        tmp.write_text("\n".join(lines) + "\n")
        tmp.replace(self.path)  # whole or not at all


def read(path: Path) -> list[tuple[float, str, str]]:
    """``(seconds, outcome, test)`` of each line of a durations file; none if it is missing."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return []
    rows = []
    for line in text.splitlines():
        fields = line.split("\t")
        if line.startswith("#") or len(fields) != 3:
            continue
        try:
            rows.append((float(fields[0]), fields[1], fields[2]))
        except ValueError:
            continue  # not a line this plugin wrote
    return rows


def start(config: pytest.Config) -> None:
    """Keep this run's durations (in ``$PARABENCH_TEST_DURATIONS``, else the rootdir's file)."""
    target = os.environ.get(ENV)
    if target == OFF or config.pluginmanager.has_plugin(NAME):
        return
    if hasattr(config, "workerinput"):
        return  # an xdist worker: the controller sees every report
    path = Path(target) if target else config.rootpath / FILE
    config.pluginmanager.register(Durations(path), NAME)
    config.stash[_SAVED] = target
    os.environ[ENV] = OFF  # pytest runs the tests start keep none


def stop(config: pytest.Config) -> None:
    if _SAVED not in config.stash:
        return
    saved = config.stash[_SAVED]
    if saved is None:
        os.environ.pop(ENV, None)
    else:
        os.environ[ENV] = saved


_SAVED = pytest.StashKey[str | None]()


def pytest_configure(config: pytest.Config) -> None:  # as ``-p durations``
    start(config)


def pytest_unconfigure(config: pytest.Config) -> None:
    stop(config)
