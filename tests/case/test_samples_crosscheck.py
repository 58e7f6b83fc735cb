"""The samples a window or epoch claims are checked against the loaders' own count.

The torch loop counts the samples it serves as it hands each batch over (``served``); a
distributed epoch sums every rank's count apart from the ranks' claims; the lifecycle fails a
case whose claim differs, naming both figures. The planted bug ``ddp_globalcount``
(``tests/plugins/torch_bugs.py``: every rank reports its samples x the world size, which
doubled ddp's samples/s at 2 workers) must fail the case through ``parabench run`` and its
row in the table must say why.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from parabench.case.lifecycle import checked_samples
from parabench.config import RunConfig
from parabench.method import EpochStats
from parabench.registry import methods, workloads
from parabench.torch.session import fold_epochs

pytestmark = [pytest.mark.cpu, pytest.mark.torch]
PLUGINS = Path(__file__).parents[1] / "plugins"


def _stats(samples: int, served: int | None) -> EpochStats:
    return EpochStats(seconds=1.0, loss=0.5, samples=samples, served=served)


@pytest.mark.parametrize("options", [{}, {"num_workers": 1, "pin_memory": False}])
def test_the_loop_counts_what_it_serves(options: dict) -> None:
    config = RunConfig(workload="mlp", method="serial", profile="tiny", epochs=1,
                       threads_per_worker=1, options=options)
    session = methods.get("serial").session(workloads.get("mlp"), config)
    session.start()
    try:
        stats = session.train_epoch(0)
        window = session.train_window(0, 3)
    finally:
        session.close()
    assert stats.served == stats.samples == 2048
    assert window.served == window.samples == 3 * session.batch_size


@pytest.mark.parametrize(("method", "workers", "options"), [
    ("ddp", 2, {}), ("pipeline", 2, {}), ("hybrid", 4, {"stages": 2})])
def test_every_rank_program_counts_what_it_serves(method: str, workers: int,
                                                  options: dict) -> None:
    config = RunConfig(workload="mlp", method=method, workers=workers, profile="tiny",
                       epochs=1, threads_per_worker=1, options=options)
    session = methods.get(method).session(workloads.get("mlp"), config)
    session.start()
    try:
        window = session.train_window(0, 3)
    finally:
        session.close()
    assert window.served == window.samples == 3 * session.batch_size


def test_ranks_served_counts_are_summed_apart_from_their_claims() -> None:
    folded = fold_epochs([_stats(256, 128), _stats(256, 128)])  # each claims the global count
    assert (folded.samples, folded.served) == (512, 256)
    assert fold_epochs([_stats(128, 128), _stats(0, None)]).served is None  # not every rank


def test_a_claim_the_loaders_did_not_serve_fails_with_both_figures() -> None:
    assert checked_samples(_stats(256, 256), "epoch 0").samples == 256
    assert checked_samples(_stats(256, None), "epoch 0").samples == 256  # nothing to check
    with pytest.raises(RuntimeError, match=r"speed window 3: .*claims 512 .*served 256"):
        checked_samples(_stats(512, 256), "speed window 3")


@pytest.mark.slow
def test_a_rank_reporting_the_global_count_fails_the_case_in_the_cli(tmp_path: Path) -> None:
    out = tmp_path / "results.jsonl"
    path = os.pathsep.join(p for p in (str(PLUGINS), os.environ.get("PYTHONPATH")) if p)
    env = os.environ | {"PYTHONPATH": path, "PARABENCH_PLUGINS": "torch_bugs"}
    cmd = [sys.executable, "-m", "parabench", "run", "--workload", "mlp",
           "--method", "serial,ddp,ddp_globalcount", "--workers", "2", "--profile", "tiny",
           "--epochs", "1", "--threads", "1", "--out", str(out)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900,
                          cwd=tmp_path)
    rows = {r["method"]: r for r in map(json.loads, out.read_text().splitlines())
            if r["workers"] == 2}
    assert rows["ddp"]["status"] == "ok", rows["ddp"]["reason"]
    bug = rows["ddp_globalcount"]
    assert bug["status"] == "failed", bug
    assert "claims 4096 samples" in bug["reason"] and "served 2048" in bug["reason"], bug
    line = [ln for ln in proc.stdout.splitlines() if ln.split()[:1] == ["ddp_globalcount"]]
    assert len(line) == 1 and "failed" in line[0], proc.stdout
    # the row's reason is cut to fit 120 columns; the whole one follows the table
    assert "claims 4096 samples but its data loaders served 2048" in " ".join(
        proc.stdout.split()), proc.stdout
