"""Every usage example runs: each ``Usage::`` block of a src module docstring and each
```python block of docs/*.md is executed (Python), or parsed by the CLI (``parabench ...``).

A Python example runs in a namespace made of its module's globals plus :func:`_common` (tiny
crafted results written to ``results.jsonl`` in a temporary working directory, a tiny
RunConfig, tiny tabular data, ...) and its entry in :data:`SETUP` (a few lines that make the
names the example takes as given). An example that starts processes or trains is marked
``slow`` (:data:`SLOW`). A console line (``parabench ...``) must parse with the CLI's own
parser; a synopsis (``[--flag]``) must name only options the subcommand has. Other console
lines (pip, torchrun, tensorboard) are not run. Only examples that need hardware or a launcher
this machine lacks are skipped, each with its reason (:data:`NEEDS`).
"""

from __future__ import annotations

import ast
import importlib
import os
import re
import shlex
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from parabench.registry import methods, workloads

pytestmark = pytest.mark.cpu
ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src"
CONSOLE = ("parabench ", "pip ", "torchrun ", "tensorboard ", "python ", "pytest ", "asv ",
           "mpiexec ", "bash ", "sbatch ")


def usage_block(doc: str) -> str | None:
    """The indented block after ``Usage::`` (or ``Usage (where)::``), dedented; None without."""
    lines = doc.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("Usage"):  # "Usage::", or "Usage (where ...)::" over a few lines
            i = next(j for j in range(i, len(lines)) if lines[j].rstrip().endswith("::"))
            body = []
            for nxt in lines[i + 1:]:
                if nxt.strip() and not nxt.startswith((" ", "\t")):
                    break
                body.append(nxt)
            return textwrap.dedent("\n".join(body)).strip("\n")
    return None


def module_examples() -> list[tuple[str, str]]:
    """(module name, usage block) for every src module whose docstring has one."""
    found = []
    for path in sorted(SRC.rglob("*.py")):
        doc = ast.get_docstring(ast.parse(path.read_text()))
        block = usage_block(doc or "")
        if block:
            name = ".".join(path.relative_to(SRC).with_suffix("").parts)
            found.append((name.removesuffix(".__init__"), block))
    return found


def docs_examples() -> list[tuple[str, str]]:
    """(docs page #n, code) for every ```python block of docs/*.md and README.md."""
    found = []
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        blocks = re.findall(r"^```python\n(.*?)^```", page.read_text(), re.S | re.M)
        found += [(f"{page.name}#{i}", code) for i, code in enumerate(blocks, 1)]
    return found


def split(block: str) -> tuple[list[str], str]:
    """Console commands (continuations joined, comments cut) and the Python rest."""
    commands, python, pending = [], [], ""
    for line in block.splitlines():
        text = pending + line.strip()
        if commands and not python and text.startswith("["):  # a synopsis goes on
            commands[-1] += " " + text
            continue
        if pending or text.startswith(CONSOLE) or re.match(r"[A-Z_]+=\S* ", text):
            if text.endswith("\\"):
                pending = text[:-1] + " "
                continue
            pending = ""
            commands.append(text.split("  #")[0].split(" # ")[0].strip())
        elif line.strip().startswith("#") and not python:
            continue
        else:
            python.append(line)
    return commands, textwrap.dedent("\n".join(python)).strip("\n")


# --- what each example takes as given --------------------------------------------------------

#: examples that need what this machine (and CI) lacks, by example id: the reason
NEEDS: dict[str, str] = {
    "parabench.forest.numba_cuda_kernel": "needs a CUDA GPU (numba.cuda kernels compiled for it)",
    "parabench.forest.numba_cuda_loops": "needs a CUDA GPU (launches numba.cuda kernels)",
}

#: examples that import TensorFlow: run in a fresh interpreter, since TensorFlow and torch's
#: TorchDynamo (which later examples import) crash when loaded into one process
SUBPROCESS = {"parabench.forest.tf_kernel", "parabench.tf.models", "parabench.tf.program"}

#: examples that start processes or train (marked slow)
SLOW = {
    "parabench.case.energy", "parabench.core.launcher", "parabench.case.stopping",
    "parabench.forest.tf_kernel", "parabench.tf.models", "parabench.case.execute",
    "parabench.case.isolate", "parabench.case.lifecycle", "parabench.core.pool",
    "parabench.core.prestart",
    "parabench.method", "parabench.sweep.run", "parabench.sweep.rerun",
    "parabench.torch.parallelize", "parabench.case",
    "parabench.engines", "parabench.tf.program", "parabench.torch.pipeline",
    "parabench.torch.pipeline_tp",
    "parabench.torch.session", "parabench.torch.build", "parabench.forest.hybrid_worker",
    "parabench.case.parts", "parabench.sweep.executor", "parabench.sweep.slurm_job",
}

_FOREST = """
import numpy as np
from parabench.forest import ForestParams, HistForestClassifier, make_kernel
from parabench.forest.grow import Prepared
workload = workloads.get("random_forest")
data = workload.make_data("tiny", 0)
x, y, x_test, y_test = data.x_train[:300], data.y_train[:300], data.x_test[:100], data.y_test[:100]
x_train = x
sklearn_forest = workload.build_estimator("tiny", 0, n_jobs=1).set_params(n_estimators=4)
params = ForestParams.from_sklearn(sklearn_forest, max_depth=6)
"""
_WORKLOADS = "from parabench.registry import methods, workloads\n"

#: per example: lines run before it, making the names it takes as given
SETUP: dict[str, str] = {
    "parabench.case.bootstrap": "from statistics import median\nrates = [10.0, 11.0, 9.5, 10.2]",
    "parabench.core.records": "window = Window(unit='steps', steps=5, warmup=1)",
    "parabench.identity": "result = results[0]\nother = CaseId.recorded(results[1]).group",
    "parabench.torch.options": "from parabench.method import Method\n"
                               "from parabench.config import OptionSpec",
    "parabench.analysis.compare": "from parabench.case.result import read_results\nimport sys\n"
                                  "sys = type('S', (), {'exit': staticmethod(lambda code: None)})",
    "parabench.analysis.ratios": "from parabench.analysis.figures import median_times\n"
                                 "times = median_times(results)\n"
                                 "key = next(k for k in times if k.method == 'ddp')",
    "parabench.analysis.stats": "ddp = [r for r in results if r.method == 'ddp' and "
                                "r.workers == 2]\n"
                                "base = throughput_samples(earlier_serial_results)\n"
                                "results = ddp",
    "parabench.analysis.target_parity": (
        "import dataclasses\nfrom parabench.core.records import TimeToTarget\n"
        "ttt = TimeToTarget(target=0.98, reached=True, samples_to_target=1408, "
        "converged_epochs=8, converged_quality=0.99)\n"
        "result = dataclasses.replace(result, method='fedavg', profile='tiny', "
        "time_to_target=ttt)\n"
        "serial_result = dataclasses.replace(serial, profile='tiny', time_to_target=ttt)"),
    "parabench.analysis.parity_text": "repeats = [r for r in results if r.method == 'ddp']\n"
                                      "result = repeats[0]",
    "parabench.analysis.time_to_target": (
        "import dataclasses\n"
        "from parabench.core.records import TimeToTarget\n"
        "results = [dataclasses.replace(r, time_to_target=TimeToTarget(\n"
        "    reached=True, samples_to_target=1408, startup_s=2.0, epochs_run=3))\n"
        "    for r in results]"),
    "parabench.analysis.trajectory": (
        "import dataclasses\n"
        "trace = {'steps': 2, 'losses': [2.3, 2.1], 'digest': {'w': {'sum': 1.0, 'norm': 2.0,"
        " 'proj': [0.5, -0.25]}}}\n"
        "result = dataclasses.replace(result, trace=trace)\n"
        "serial = dataclasses.replace(serial, trace=trace)"),
    "parabench.cache": "import numpy as np\n"
                       "make = lambda: {'x': np.zeros(3)}\n"
                       "model, model_file = 'Linear(3, 2)', __import__('parabench').__file__\n"
                       "count = lambda: {'flops': 12}\n"
                       "Ellipsis = model_file",
    "parabench.core.clock": "work = lambda: sum(range(1000))\n"
                            "ctx = type('Ctx', (), {'synchronize': staticmethod(lambda: None),"
                            " 'barrier': staticmethod(lambda: None)})",
    "parabench.case.energy": _WORKLOADS + (
        "from parabench.case.lifecycle import CaseLifecycle\n"
        "import contextlib\n"
        "session = methods.get('serial').session(workloads.get('mlp'), config)\n"
        "session.start()\n__teardown__ = session.close\n"
        "epoch, samples_per_epoch = 0, 1024\n"),
    "parabench.core.launcher": _WORKLOADS,
    "parabench.case.parts": _WORKLOADS + (
        "session = methods.get('serial').session(workloads.get('mlp'), config)\n"
        "session.start()\n__teardown__ = session.close\n"
        "epoch, meter = 0, None\n"
        "between = lambda stats, epoch, part, parts: part == 2  # stop after the third part"),
    "parabench.torch.split_batch": (
        "workload = workloads.get('vgg11')\n"
        "model = workload.build_model(workload.make_data('tiny', 0), 0)"),
    "parabench.forest.hybrid": "workload = workloads.get('random_forest')\n"
                               "config = config.__class__(workload='random_forest', "
                               "method='rf_threads+torch', profile='tiny', workers=2)",
    "parabench.forest.hybrid_worker": _FOREST + (
        "from parabench.forest.torch_kernel import TorchKernel\n"
        "prepared = Prepared.from_data(x, y, params.n_bins)"),
    "parabench.torch.fedavg": "import numpy as np\n"
                              "labels = np.repeat(np.arange(4), 25); k, t = 1, 0",
    "parabench.torch.stages": (
        "import torch\nworkload = workloads.get('cnn'); data = workload.make_data('tiny', 0)\n"
        "model = workload.build_model(data, 0)\n"
        "x_probe = torch.as_tensor(data.x_train[:4]).float()\n"
        "config = config.__class__(workload='cnn', method='pipeline', profile='tiny', "
        "workers=2)"),
    "parabench.torch.pipeline": "config = config.__class__(workload='mlp', method='pipeline', "
                                "profile='tiny', workers=2, epochs=1)",
    "parabench.torch.pipeline_tp": "config = config.__class__(workload='gpt', "
                                   "method='pipeline_tp', profile='tiny', workers=4, epochs=1)",
    "parabench.torch.tensor_parallel": (
        "import socket, torch, torch.distributed as dist\n"
        "from torch.distributed.device_mesh import init_device_mesh\n"
        "with socket.socket() as s:\n    s.bind(('127.0.0.1', 0)); port = s.getsockname()[1]\n"
        "dist.init_process_group('gloo', init_method=f'tcp://127.0.0.1:{port}',"
        " rank=0, world_size=1)\n"
        "__teardown__ = dist.destroy_process_group\n"
        "mesh = init_device_mesh('cpu', (1, 1), mesh_dim_names=('dp', 'tp'))\n"
        "workload = workloads.get('gpt'); data = workload.make_data('tiny', 0)\n"
        "model = workload.build_model(data, 0)"),
    "parabench.case.lifecycle": _WORKLOADS + (
        "from parabench.sweep.plan import bench_cases\n"
        "case = next(c for c in bench_cases() if c.id == 'mlp-serial-cpu-w1')"),
    "parabench.case.machine": "import os\nfrom parabench.core.sampler import TreeSampler\n"
                              "sampler = TreeSampler(os.getpid())\nsampler.sample()\n"
                              "env = dict(os.environ)\n"
                              "import dataclasses\n"
                              "result = type('R', (), {})()",
    "parabench.core.measure": "import subprocess, sys\n"
                              "proc = subprocess.Popen([sys.executable, '-c', 'pass'])\n"
                              "pid = proc.pid\n"
                              "start, end = 0.0, 1.0",
    "parabench.sweep.costref": "from parabench.sweep.costplan import Plan\n"
                               "own_rows = []\n"
                               "plan = Plan(workload='mlp', method='ddp', workers=2)",
    "parabench.core.sampler": "import subprocess, sys\n"
                              "proc = subprocess.Popen([sys.executable, '-c', 'pass'])\n"
                              "pid = proc.pid\n"
                              "start, end = 0.0, 1.0",
    "parabench.case.peak": "import dataclasses\n"
                           "result = dataclasses.replace(result, flops_per_sample=1e6)",
    "parabench.case.result": "import json\n"
                             "line = open('results.jsonl').readline()",
    "parabench.case.stopping": _WORKLOADS + (
        "session = methods.get('serial').session(workloads.get('mlp'), config)\n"
        "session.start()\n__teardown__ = session.close\n"
        "epoch_s, startup_s, max_epochs = [0.1], 1.0, 3"),
    "parabench.cli.types": "import argparse\np = argparse.ArgumentParser()",
    "parabench.engines": "config = config.__class__(workload='random_forest', method='rf_dask', "
                         "profile='tiny', workers=1)",
    "parabench.forest": _FOREST,
    "parabench.forest.binning": _FOREST + "feature, bin = np.array([0]), np.array([3])",
    "parabench.forest.grow": _FOREST + "profile, seed = 'tiny', 0",
    "parabench.forest.kernel": _FOREST + (
        "import torch\nfrom parabench.forest.binning import Binner\n"
        "from parabench.forest.torch_kernel import TorchKernel\n"
        "n_bins, n_classes, k = 8, int(y.max()) + 1, 1    # one node: the root, every row\n"
        "xbin = Binner.fit(x, n_bins=n_bins).transform(x)\n"
        "rows, node = torch.arange(len(y)), torch.zeros(len(y), dtype=torch.int64)\n"
        "feats = np.array([[0, 1, 2]])\n"
        "feature = torch.tensor([0])\n"
        "left_next, right_next = torch.tensor([0]), torch.tensor([1])"),
    "parabench.forest.numba_kernel": _FOREST,
    "parabench.forest.numba_loops": _FOREST + (
        "from parabench.forest.binning import Binner\n"
        "xbin = Binner.fit(x, n_bins=8).transform(x)\n"
        "rows = np.arange(len(y), dtype=np.int64); node = np.zeros(len(y), dtype=np.int64)\n"
        "feats = np.array([[0, 1]], dtype=np.int64); lo, hi = 0, 1\n"
        "out = np.zeros((1, 2, 8, int(y.max()) + 1), dtype=np.float64)"),
    "parabench.forest.split": _FOREST + "profile, seed, n_trees = 'tiny', 0, 20",
    "parabench.forest.threaded": _FOREST + (
        "from parabench.forest.torch_kernel import TorchKernel\n"
        "from concurrent.futures import ThreadPoolExecutor\n"
        "prepared = Prepared.from_data(x, y, params.n_bins)\n"
        "pool = ThreadPoolExecutor(2)"),
    "parabench.forest.tf_kernel": _FOREST,
    "parabench.forest.torch_kernel": _FOREST,
    "parabench.forest.trees": _FOREST + (
        "model = HistForestClassifier(params, make_kernel('numpy')).fit(x, y)\n"
        "forest = model.forest\n"
        "from parabench.forest.grow import grow_trees\n"
        "prepared = Prepared.from_data(x, y, params.n_bins); i = 0\n"
        "part_a = grow_trees(make_kernel('numpy'), prepared, params, range(0, 2))\n"
        "part_b = grow_trees(make_kernel('numpy'), prepared, params, range(2, 4))"),
    "parabench.sweep.rerun": f"CHECKOUT = {str(ROOT)!r}\n"
                             "from parabench.analysis.compare import compare",
    "parabench.sweep.dryrun": "from parabench.sweep.plan import plan\n"
                              "from parabench.case.result import read_results",
    "parabench.sweep.preflight": "from parabench.sweep.plan import plan\n"
                                 "args = type('A', (), {'timeout': 600.0})",
    "parabench.sweep.progress": "from parabench.sweep.plan import plan\n"
                                "cases = list(plan(grid)); n_to_run = len(cases)\n"
                                "label = 'mlp/serial cpu w=1'",
    "parabench.sweep.site.html": "from pathlib import Path\n"
                                 "from parabench.sweep.site.build import build\n"
                                 "Path('report').mkdir()\n"
                                 "data = build(results, baselines=earlier_serial, "
                                 "out_dir=Path('report'))",
    "parabench.sweep.site.markdown": "from pathlib import Path\n"
                                     "from parabench.sweep.site.build import build\n"
                                     "Path('report').mkdir()\n"
                                     "data = build(results, baselines=earlier_serial, "
                                     "out_dir=Path('report'))",
    "parabench.sweep.site.build": "import os\nos.makedirs('report', exist_ok=True)",
    "parabench.sweep.site.plots": (
        "from pathlib import Path\nfrom parabench.analysis.recommend import candidates\n"
        "scope_results = results\nscope_candidates = candidates(results)\n"
        "out_dir = Path('report'); out_dir.mkdir()"),
    "parabench.tf.models": _WORKLOADS + (
        "import numpy as np\nworkload = workloads.get('cnn')\n"
        "x_numpy = np.zeros((4, 1, 28, 28), dtype=np.float32)"),
    "parabench.torch.loop": (
        "import torch\nfrom parabench.core.clock import Clock\n"
        "model = torch.nn.Linear(4, 3); optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "loss_fn = torch.nn.CrossEntropyLoss(); dev = torch.device('cpu')\n"
        "x = torch.randn(256, 4); y = torch.randint(0, 3, (256,)); x_test = x[:32]\n"
        "epoch, n, w, steps, bs = 0, 256, 0, 2, 64\nindices = torch.arange(128)"),
    "parabench.torch.knobs": _WORKLOADS + (
        "import torch\nfrom parabench.torch.loop import TorchLoop\n"
        "from parabench.torch.knobs import warm_up_compiled\n"
        "from parabench.torch.parallelize import shard_units\n"
        "workload = workloads.get('mlp'); data = workload.make_data('tiny', 0); seed = 0\n"
        "stage = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())\n"
        "m = torch.nn.Linear(4, 2)\n"
        "loop = TorchLoop(m, torch.optim.SGD(m.parameters(), lr=0.1),"
        " torch.nn.functional.cross_entropy, torch.randn(8, 4), torch.randint(0, 2, (8,)),"
        " batch_size=4, device=torch.device('cpu'), seed=0)"),
    "parabench.torch.parallelize": (
        "import socket, torch, torch.distributed as dist\n"
        "with socket.socket() as s:\n    s.bind(('127.0.0.1', 0)); port = s.getsockname()[1]\n"
        "dist.init_process_group('gloo', init_method=f'tcp://127.0.0.1:{port}',"
        " rank=0, world_size=1)\n"
        "__teardown__ = dist.destroy_process_group\n"
        "workload = workloads.get('cnn'); data = workload.make_data('tiny', 0)\n"
        "x = torch.as_tensor(data.x_train[:8]).float(); seed = 0\n"
        "device = torch.device('cpu')\n"
        "from torch.distributed.device_mesh import init_device_mesh\n"
        "mesh = init_device_mesh('cpu', (1, 1), mesh_dim_names=('dp', 'tp'))"),
    "parabench.core.prestart": (
        "import json, os\nfrom parabench.config import RunConfig\n"
        "config_json = json.dumps(RunConfig(workload='mlp', method='serial', profile='tiny',"
        " epochs=1).to_dict())\nresult_path = str(tmp / 'result.json')\nenv = dict(os.environ)\n"
        "out_path, err_path = tmp / 'out', tmp / 'err'"),
    "parabench.core.pool": (
        "(tmp / 'echo_program.py').write_text(__example__.split('# the parent')[0])"),
    "parabench.workloads.datasets.vision": (
        "from datafiles import write_cifar10, write_image_folder, write_mnist\n"
        "write_mnist(tmp / 'data', 40); write_cifar10(tmp / 'data', 20)\n"
        "write_image_folder(tmp / 'imagenette2-160', 2, 4, 32, split=True)"),
    "parabench.workloads.datasets._torchvision": (
        "from datafiles import write_mnist\n"
        "write_mnist(tmp, 40); raw_dir = str(tmp / 'MNIST' / 'raw')"),
    "parabench.workloads.datasets.common": (
        "import numpy as np\nlabels = np.repeat(np.arange(4), 25); path = 'labels.txt'"),
    "parabench.workloads.datasets.chars": (
        "open('input.txt', 'w').write('the quick brown fox jumps over the lazy dog. ' * 60)"),
    "parabench.workloads.datasets.text": (
        "open('reviews.tsv', 'w').write(''.join(f'{i % 2}\\tword{i} other{i % 5}\\n' "
        "for i in range(40)))\n"
        "open('pairs.tsv', 'w').write(''.join(f'a{i} b\\tb a{i}\\n' for i in range(40)))"),
}


def _common(tmp_path: Path) -> dict[str, Any]:
    """Names most examples take as given: tiny, cheap, in ``tmp_path`` (the cwd)."""
    import sweepdata
    from parabench.config import RunConfig
    from parabench.registry import methods, workloads
    from parabench.sweep.plan import Grid

    results = sweepdata.sweep(workloads=("cnn",), methods=("serial", "ddp"), workers=(1, 2),
                              repeats=2)
    for name in ("results.jsonl", "base.jsonl", "new.jsonl"):
        sweepdata.write(tmp_path / name, results)
    serial_results = [r for r in results if r.method == "serial"]
    config = RunConfig(workload="mlp", method="serial", profile="tiny", epochs=1, workers=1,
                       threads_per_worker=1, steps=2, windows=2)
    return {
        "workloads": workloads, "methods": methods, "results": results,
        "earlier_serial_results": serial_results,
        "earlier_serial": serial_results, "baselines": serial_results,
        "result": next(r for r in results if r.method == "ddp"), "serial": serial_results[0],
        "config": config, "workload": workloads.get("mlp"), "method": methods.get("serial"),
        "grid": Grid(workloads=["mlp"], methods=["serial"], profile="tiny"),
        "out": "results.jsonl", "tmp": tmp_path, "profile": "tiny", "seed": 0,
    }


def _run_python(name: str, code: str, tmp_path: Path) -> None:
    namespace: dict[str, Any] = {"__name__": f"usage_example_{name}"}
    if not name.endswith(tuple(f"#{i}" for i in range(100))):
        namespace.update(vars(importlib.import_module(name)))
    namespace.update(_common(tmp_path))
    namespace["__example__"] = code
    exec(compile(SETUP.get(name, ""), f"<setup {name}>", "exec"), namespace)  # noqa: S102
    try:
        exec(compile(code, f"<usage {name}>", "exec"), namespace)  # noqa: S102
    finally:
        if "__teardown__" in namespace:
            namespace["__teardown__"]()


def _check_command(command: str) -> None:
    """A ``parabench`` command parses with the CLI's parser; a synopsis names real options."""
    from parabench.cli import build_parser

    parser = build_parser()
    words = shlex.split(command.replace("~", "/home/user"))
    if words[0] != "parabench":
        return
    sub = parser._subparsers._group_actions[0].choices
    if "[" in command or "|" in command:  # a synopsis: each option exists
        text = (sub[words[1]] if words[1] in sub else parser).format_help()
        for flag in re.findall(r"--[a-z-]+", command):
            assert flag in text, f"{command!r}: {flag} is not an option"
        return
    parser.parse_args(words[1:])


EXAMPLES = module_examples() + docs_examples()


def _param(name: str, block: str) -> Any:
    marks = [pytest.mark.slow] if name in SLOW else []
    if name in NEEDS:
        marks.append(pytest.mark.skip(reason=NEEDS[name]))
    return pytest.param(name, block, id=name, marks=marks)


@pytest.mark.parametrize(("name", "block"), [_param(n, b) for n, b in EXAMPLES])
def test_usage_example_runs(name: str, block: str, tmp_path: Path,
                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    for registry in (workloads, methods):  # an example may register a plugin: not for long
        registry._load()
        for attr in ("_factories", "_instances"):
            monkeypatch.setattr(registry, attr, dict(getattr(registry, attr)))
    monkeypatch.setenv("HOME", str(tmp_path))  # "~/data" is the example's own
    monkeypatch.syspath_prepend(str(Path(__file__).parents[1]))  # tests/: the shared helpers
    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    monkeypatch.syspath_prepend(str(tmp_path))  # modules an example writes (its rank programs)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        [str(tmp_path), str(SRC), os.environ.get("PYTHONPATH", "")]))
    commands, code = split(block)
    for command in commands:
        _check_command(command)
    if code and name in SUBPROCESS:
        here = Path(__file__).parent
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            [str(SRC), str(here), str(here.parent), os.environ.get("PYTHONPATH", "")])}
        script = ("import sys, test_usage_examples as t; from pathlib import Path; "
                  "t._run_python(sys.argv[1], sys.argv[2], Path(sys.argv[3]))")
        done = subprocess.run([sys.executable, "-c", script, name, code, str(tmp_path)],
                              env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
    elif code:
        _run_python(name, code, tmp_path)


def test_examples_are_found() -> None:
    names = {n for n, _ in EXAMPLES}
    assert {"parabench.case.lifecycle", "parabench.case.result", "results-schema.md#1"} <= names
    assert len(EXAMPLES) > 80
