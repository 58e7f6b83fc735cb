"""The workload recipe holds: a new workload is one file, and ``parabench run`` trains it.

The plugin ``tests/plugins/tiny_logreg.py`` is loaded the way a user's would be
(``PARABENCH_PLUGINS`` and ``PYTHONPATH``), in the real CLI and its isolated worker.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from parabench.case.result import read_results

pytestmark = [pytest.mark.cpu, pytest.mark.torch]

PLUGIN_DIR = Path(__file__).parents[1] / "plugins"


@pytest.mark.slow
def test_a_one_file_workload_runs_through_the_cli(tmp_path: Path) -> None:
    out = tmp_path / "results.jsonl"
    paths = [str(PLUGIN_DIR), *filter(None, [os.environ.get("PYTHONPATH")])]
    env = {**os.environ, "PARABENCH_PLUGINS": "tiny_logreg", "PYTHONPATH": os.pathsep.join(paths)}
    proc = subprocess.run(
        [sys.executable, "-m", "parabench", "run", "--workload", "tiny_logreg",
         "--method", "serial", "--profile", "tiny", "--epochs", "1", "--out", str(out)],
        env=env, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (result,) = read_results(out)
    assert result.workload == "tiny_logreg" and result.status == "ok", result.reason
    assert result.quality is not None and result.quality.value is not None
    assert 0.0 <= result.quality.value <= 1.0
    assert "tiny_logreg" in proc.stdout  # the summary table names it
