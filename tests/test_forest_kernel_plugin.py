"""A new histogram kernel is one file: ``tests/plugins/numpy_addat.py``, run by the real CLI.

The plugin's kernel must grow NumPy's reference forest exactly: the CLI's held-out quality and
training loss equal the reference's, and in process both kernels predict identically.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from parabench.config import RunConfig
from parabench.forest import Prepared, grow_trees, make_kernel
from parabench.forest.hist import forest_params
from parabench.forest.session import predictions_sha
from parabench.registry import workloads
from parabench.sweep.result import read_results

pytestmark = pytest.mark.cpu
PLUGIN_DIR = Path(__file__).parent / "plugins"


def _reference_and_plugin_forests() -> tuple[object, object, object, object]:
    sys.path.insert(0, str(PLUGIN_DIR))
    try:
        import numpy_addat  # noqa: F401 - registers the kernel
    finally:
        sys.path.remove(str(PLUGIN_DIR))
    workload = workloads.get("random_forest")
    config = RunConfig(workload="random_forest", method="numpy_addat", profile="tiny")
    data, params = workload.dataset(config), forest_params(workload, config)
    prepared = Prepared.from_data(data.x_train, data.y_train, params.n_bins)
    trees = range(params.n_estimators)
    ref, new = (grow_trees(make_kernel(k), prepared, params, trees)
                for k in ("numpy", "numpy_addat"))
    return workload, data, ref, new


def test_plugin_kernel_runs_through_the_cli_and_matches_numpy(tmp_path: Path) -> None:
    out = tmp_path / "results.jsonl"
    env = os.environ | {"PYTHONPATH": str(PLUGIN_DIR), "PARABENCH_PLUGINS": "numpy_addat"}
    proc = subprocess.run(
        [sys.executable, "-m", "parabench.cli", "run", "--workload", "random_forest",
         "--method", "numpy_addat", "--profile", "tiny", "--workers", "1", "--epochs", "2",
         "--device", "cpu", "--out", str(out)],
        env=env, capture_output=True, text=True, timeout=600, cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    [result] = read_results(out)
    assert result.status == "ok", (result.reason, result.extra.get("traceback"))

    workload, data, ref, new = _reference_and_plugin_forests()
    assert predictions_sha(new.predict(data.x_test)) == predictions_sha(ref.predict(data.x_test))
    assert result.quality.value == workload.score(ref, data.x_test, data.y_test)
    assert result.loss == [workload.train_loss(ref, data)] * 2  # every epoch grows it again
