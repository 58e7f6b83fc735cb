"""The hand-written peer loop (parabench.case.peer) and its command line (scripts/hand_loop.py).

Its speed ratio and its loss parity with parabench's serial case are checked by
``tests/benchmarks/test_hand_peer.py``; here: the script runs as its usage says, the loop's
sample stream is parabench's epoch order, channels_last really is applied, and configurations
the loop cannot train are refused.
"""

from __future__ import annotations

import ast
import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.cpu, pytest.mark.torch]

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "hand_loop.py"


def _first_usage_line() -> list[str]:
    doc = ast.get_docstring(ast.parse(SCRIPT.read_text())) or ""
    line = next(line.strip() for line in doc.splitlines()
                if line.strip().startswith("python scripts/hand_loop.py"))
    return shlex.split(line.split("  #")[0])[1:]


def test_the_script_runs_as_its_usage_says_and_prints_one_json_object() -> None:
    args = _first_usage_line()
    proc = subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)  # exactly one object: a second line would not parse
    repeats, steps = int(args[args.index("--repeats") + 1]), int(args[args.index("--steps") + 1])
    assert out["repeats"] == len(out["samples_per_s_windows"]) == repeats
    assert out["steps"] == steps and out["samples_per_s"] > 0
    assert out["spread"]["min"] <= out["samples_per_s"] <= out["spread"]["max"]
    assert out["peak_gpu_mb"] is None  # CPU
    assert "samples/s" in proc.stderr.strip().splitlines()[-1]


def test_the_stream_is_parabenchs_epoch_order_in_full_batches() -> None:
    from parabench.case.peer import HandLoop, Peer
    from parabench.torch.loop import epoch_order

    loop = HandLoop(Peer(workload="mlp", profile="tiny", seed=3))
    n = loop.n
    first = loop._indices(n - 5)
    rest = loop._indices(10)  # crosses into the second permutation
    assert first.tolist() == epoch_order(n, 3, 0)[: n - 5].tolist()
    assert rest.tolist() == (epoch_order(n, 3, 0)[n - 5:].tolist()
                             + epoch_order(n, 3, 1)[:5].tolist())


def test_channels_last_puts_the_model_and_each_batch_in_nhwc() -> None:
    import torch

    from parabench.case.peer import HandLoop, Peer

    loop = HandLoop(Peer(workload="vgg11", profile="tiny", channels_last=True))
    conv = next(p for p in loop.model.parameters() if p.dim() == 4)  # 3 input channels
    batch = loop.x[loop._indices(loop.batch_size)]
    for t in (conv, batch):
        assert t.is_contiguous(memory_format=torch.channels_last)
        assert not t.is_contiguous()
    window = loop.window(2)
    assert window.samples == 2 * loop.batch_size and len(window.losses) == 2


@pytest.mark.parametrize("spec, message", [
    ({"workload": "mlp", "channels_last": True}, "no channels_last option"),
    ({"workload": "cnn", "precision": "fp16"}, "fp16 autocast needs CUDA"),
    ({"workload": "cnn", "precision": "fp8"}, "precision 'fp8'"),
])
def test_configurations_the_loop_cannot_train_are_refused(spec: dict, message: str) -> None:
    from parabench.case.peer import Peer

    with pytest.raises(ValueError, match=message):
        Peer(**spec)
