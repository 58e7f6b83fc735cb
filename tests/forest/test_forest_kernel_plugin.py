"""A new histogram kernel is one file: ``tests/plugins/numpy_addat.py``, run by the real CLI.

The plugin's kernel must grow NumPy's reference forest exactly: the CLI's held-out quality and
training loss equal the reference's, and both kernels predict identically. The plugin is only
ever loaded in subprocesses, so this process's registries stay as shipped.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from parabench.case.result import read_results

pytestmark = pytest.mark.cpu
PLUGIN_DIR = Path(__file__).parents[1] / "plugins"
ENV = os.environ | {"PYTHONPATH": str(PLUGIN_DIR), "PARABENCH_PLUGINS": "numpy_addat"}

REFERENCE = """
import json
from parabench.config import RunConfig
from parabench.forest import Prepared, grow_trees, make_kernel
from parabench.forest.hist import forest_params
from parabench.forest.session import predictions_sha
from parabench.registry import methods, workloads
methods.names()  # loads PARABENCH_PLUGINS: registers the numpy_addat kernel
workload = workloads.get("random_forest")
config = RunConfig(workload="random_forest", method="numpy_addat", profile="tiny")
data, params = workload.dataset(config), forest_params(workload, config)
prepared = Prepared.from_data(data.x_train, data.y_train, params.n_bins)
forests = {k: grow_trees(make_kernel(k), prepared, params, range(params.n_estimators))
           for k in ("numpy", "numpy_addat")}
ref = forests["numpy"]
print(json.dumps({"sha": {k: predictions_sha(f.predict(data.x_test)) for k, f in forests.items()},
                  "quality": workload.score(ref, data.x_test, data.y_test),
                  "loss": workload.train_loss(ref, data)}))
"""


def _run(args: list[str], cwd: Path) -> str:
    proc = subprocess.run([sys.executable, *args], env=ENV, capture_output=True, text=True,
                          timeout=600, cwd=cwd)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


@pytest.mark.slow
def test_plugin_kernel_runs_through_the_cli_and_matches_numpy(tmp_path: Path) -> None:
    out = tmp_path / "results.jsonl"
    _run(["-m", "parabench.cli", "run", "--workload", "random_forest", "--method",
          "numpy_addat", "--profile", "tiny", "--workers", "1", "--epochs", "2", "--device",
          "cpu", "--out", str(out)], tmp_path)
    [result] = read_results(out)
    assert result.status == "ok", (result.reason, result.extra.get("traceback"))

    ref = json.loads(_run(["-c", REFERENCE], tmp_path).strip().splitlines()[-1])
    assert ref["sha"]["numpy_addat"] == ref["sha"]["numpy"]
    assert result.quality.value == ref["quality"]
    assert result.loss == [ref["loss"]] * 2  # every epoch grows the same forest again
