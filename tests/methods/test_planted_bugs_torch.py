"""Broken torch methods are caught at run level: ``parabench run`` says parity FAILED.

One CLI run (``tests/plugins/torch_bugs.py`` loaded through ``PARABENCH_PLUGINS`` in the CLI
and its rank processes) trains serial, the real ddp and five planted bugs - DDP summing
gradients, DDP with no gradient all-reduce, an unsharded sampler, pipeline micro-batch losses
not scaled, FSDP without gradient synchronisation - on mlp at tiny. Final accuracy cannot
tell them apart (a summed gradient is a doubled learning rate); the trajectory does: every
bug's result fails exact parity on the trajectory and its row in the printed table says
FAILED, while the real ddp passes. Three more train their first steps like serial (issue 28)
and fail on the whole run, the table saying what differed: a digest that leaves the biases
out ("digest coverage"), a sampler reusing epoch 0's order ("epoch 2 loss"), an evaluation
of half the held-out set ("evaluation", at the same weights), and a stale model evaluated.
Tensor parallelism's two (a row-parallel layer not all-reduced, a tensor rank fed its samples
one place off) fail on gpt, where the real tp passes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.cpu, pytest.mark.torch]
PLUGINS = Path(__file__).parents[1] / "plugins"
BUGS = ("ddp_sum", "ddp_noreduce", "ddp_unsharded", "pipeline_unscaled", "fsdp_nosync")
#: bugs the first steps cannot see (issue 28): (method, what the parity says differed)
WHOLE_RUN_BUGS = {"ddp_nobiasdigest": "digest coverage", "ddp_staleorder": "epoch 2 loss",
                  "ddp_halfeval": "evaluation"}


def _row(table: str, method: str, workload: str = "mlp") -> str:
    """The printed table's row of ``method``: the compact table names the one workload in its
    title line and the method in each row's first column."""
    assert table.splitlines()[0].startswith(f"{workload} · "), table
    rows = [line for line in table.splitlines() if line.split()[:1] == [method]]
    assert len(rows) == 1, f"no single row for {method} in:\n{table}"
    return rows[0]


@pytest.mark.slow
def test_every_planted_bug_fails_parity_in_the_cli(tmp_path: Path) -> None:
    out = tmp_path / "results.jsonl"
    path = os.pathsep.join(p for p in (str(PLUGINS), os.environ.get("PYTHONPATH")) if p)
    env = os.environ | {"PYTHONPATH": path, "PARABENCH_PLUGINS": "torch_bugs"}
    cmd = [sys.executable, "-m", "parabench", "run", "--workload", "mlp",
           "--method", ",".join(("serial", "ddp", *BUGS, *WHOLE_RUN_BUGS, "ddp_staleeval")),
           "--workers", "2", "--profile", "tiny", "--epochs", "2", "--threads", "1",
           "--out", str(out)]
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

    assert real["parity"]["final_weight_rel_l2"] is not None  # the whole run was compared
    assert real["parity"]["epoch_loss_rel_max"] is not None

    stale = rows["ddp_staleeval"]["parity"]  # trained like serial, evaluated the wrong model
    assert stale["basis"] == "trajectory" and stale["trajectory_ok"], stale
    assert stale["status"] == "failed" and "evaluation" in stale["reason"], stale
    assert "FAILED evaluation" in _row(proc.stdout, "ddp_staleeval")

    for bug, differs in WHOLE_RUN_BUGS.items():
        parity = rows[bug]["parity"]
        assert parity["status"] == "failed", (bug, parity)
        assert parity["differs"].startswith(differs), (bug, parity)
        assert f"FAILED {differs}" in _row(proc.stdout, bug), bug
    assert "at the same weights" in rows["ddp_halfeval"]["parity"]["reason"]
    assert rows["ddp_staleorder"]["parity"]["trajectory_ok"]  # the first steps match


TP_BUGS = ("tp_noreduce", "tp_wrongshard")


@pytest.mark.slow
def test_tensor_parallel_planted_bugs_fail_parity_in_the_cli(tmp_path: Path) -> None:
    out = tmp_path / "results.jsonl"
    path = os.pathsep.join(p for p in (str(PLUGINS), os.environ.get("PYTHONPATH")) if p)
    env = os.environ | {"PYTHONPATH": path, "PARABENCH_PLUGINS": "torch_bugs"}
    cmd = [sys.executable, "-m", "parabench", "run", "--workload", "gpt",
           "--method", ",".join(("serial", "tp", *TP_BUGS)), "--workers", "2",
           "--profile", "tiny", "--epochs", "1", "--steps", "0", "--threads", "1",
           "--out", str(out)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1200,
                          cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    rows = {r["method"]: r for r in map(json.loads, out.read_text().splitlines())
            if r["workers"] == 2}
    real = rows["tp"]["parity"]
    assert real["basis"] == "trajectory" and real["status"] == "ok", real
    assert "FAILED" not in _row(proc.stdout, "tp", "gpt")
    for bug in TP_BUGS:
        assert rows[bug]["status"] == "ok", f"{bug}: {rows[bug]['reason']}"
        parity = rows[bug]["parity"]
        assert parity["basis"] == "trajectory" and parity["status"] == "failed", (bug, parity)
        assert parity["differs"] == "first steps", (bug, parity)
        assert "FAILED" in _row(proc.stdout, bug, "gpt"), bug
