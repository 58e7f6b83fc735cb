"""Broken torch methods are caught at run level: ``parabench run`` says parity FAILED.

One CLI run (``tests/plugins/torch_bugs.py`` loaded through ``PARABENCH_PLUGINS`` in the CLI
and its rank processes) trains serial, the real ddp and five planted bugs - DDP summing
gradients, DDP with no gradient all-reduce, an unsharded sampler, pipeline micro-batch losses
not scaled, FSDP without gradient synchronisation - on mlp at tiny. Final accuracy cannot
tell them apart (a summed gradient is a doubled learning rate); the trajectory does: every
bug's result fails exact parity on the trajectory and its row in the printed table says
FAILED, while the real ddp passes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.cpu, pytest.mark.torch]
PLUGINS = Path(__file__).parent / "plugins"
BUGS = ("ddp_sum", "ddp_noreduce", "ddp_unsharded", "pipeline_unscaled", "fsdp_nosync")


def _row(table: str, method: str) -> str:
    """The printed table's row of ``method`` on mlp: the compact table names the one workload
    in its title line and the method in each row's first column."""
    assert table.splitlines()[0].startswith("mlp · "), table
    rows = [line for line in table.splitlines() if line.split()[:1] == [method]]
    assert len(rows) == 1, f"no single row for {method} in:\n{table}"
    return rows[0]


def test_every_planted_bug_fails_parity_in_the_cli(tmp_path: Path) -> None:
    out = tmp_path / "results.jsonl"
    path = os.pathsep.join(p for p in (str(PLUGINS), os.environ.get("PYTHONPATH")) if p)
    env = os.environ | {"PYTHONPATH": path, "PARABENCH_PLUGINS": "torch_bugs"}
    cmd = [sys.executable, "-m", "parabench", "run", "--workload", "mlp",
           "--method", ",".join(("serial", "ddp", *BUGS, "ddp_staleeval")), "--workers", "2",
           "--profile", "tiny", "--epochs", "1", "--threads", "1", "--out", str(out)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1500,
                          cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    rows = {r["method"]: r for r in map(json.loads, out.read_text().splitlines())
            if r["workers"] == 2}

    real = rows["ddp"]
    assert real["status"] == "ok", real["reason"]
    assert real["parity"]["basis"] == "trajectory", real["parity"]
    assert real["parity"]["status"] == "ok", real["parity"]
    assert "FAILED" not in _row(proc.stdout, "ddp")

    for bug in BUGS:
        result = rows[bug]
        assert result["status"] == "ok", f"{bug}: {result['reason']}"
        parity = result["parity"]
        assert parity["basis"] == "trajectory", (bug, parity)
        assert parity["status"] == "failed", (bug, parity)
        assert "FAILED" in _row(proc.stdout, bug), bug

    stale = rows["ddp_staleeval"]["parity"]  # trained like serial, evaluated the wrong model
    assert stale["basis"] == "trajectory" and stale["trajectory_ok"], stale
    assert stale["status"] == "failed" and "evaluation" in stale["reason"], stale
    assert "FAILED quality" in _row(proc.stdout, "ddp_staleeval")
