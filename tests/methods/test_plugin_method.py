"""A new data-parallel method is one file: ``tests/plugins/ddp_static.py``, run by the real CLI.

The plugin (DDP with ``static_graph=True``, ddp's arithmetic) is loaded through
``PARABENCH_PLUGINS`` in the CLI and in its rank processes, trains next to ``serial`` and is
judged against it: the case is ok and its exact parity holds.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.cpu, pytest.mark.torch]
PLUGIN = Path(__file__).parents[1] / "plugins" / "ddp_static.py"
#: the family's promise: a new data-parallel method costs at most this many lines
MAX_LINES = 60


def test_plugin_method_is_one_short_file() -> None:
    lines = PLUGIN.read_text().splitlines()
    assert len(lines) <= MAX_LINES, f"{PLUGIN.name}: {len(lines)} lines > {MAX_LINES}"


@pytest.mark.slow
def test_plugin_method_runs_through_the_cli_with_exact_parity(tmp_path: Path) -> None:
    out = tmp_path / "results.jsonl"
    path = os.pathsep.join(p for p in (str(PLUGIN.parent), os.environ.get("PYTHONPATH")) if p)
    env = os.environ | {"PYTHONPATH": path, "PARABENCH_PLUGINS": "ddp_static"}
    cmd = [sys.executable, "-m", "parabench", "run", "--workload", "mlp",
           "--method", "serial,ddp_static", "--workers", "2", "--profile", "tiny",
           "--epochs", "1", "--threads", "1", "--out", str(out)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600,
                          cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    [plugin] = [r for r in rows if r["method"] == "ddp_static"]
    assert plugin["status"] == "ok", plugin["reason"]
    assert plugin["workers"] == 2
    parity = plugin["parity"]
    assert parity["kind"] == "exact" and parity["baseline"] == "serial/cpu", parity
    assert parity["status"] == "ok", parity
