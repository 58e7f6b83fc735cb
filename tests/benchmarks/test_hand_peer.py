"""parabench's serial speed against a hand-written loop of the same configuration (its peer).

    pytest tests/benchmarks/test_hand_peer.py -m cpu --benchmark-only    # cnn, mlp at quick
    pytest tests/benchmarks/test_hand_peer.py -m cuda --benchmark-only   # vgg11 full bf16, bs 64
    pytest tests/benchmarks/test_hand_peer.py                            # smoke: tiny, 3 steps

Each case runs :func:`parabench.case.peer.compare`: parabench's own serial case (started, one
epoch and the warm-up window untimed) and the hand loop of :mod:`parabench.case.peer` (the
workload's own model and data, nothing of parabench's in its steps), both in this process, in
interleaved rounds of one window each, the first of the two alternating. ``extra_info`` holds
parabench's ratio to the hand loop (median of the per-round ratios; the target is >= 0.98,
reported here, never asserted), both loops' samples/s, the rounds, the steps per window and
the load average around the comparison. pytest-benchmark's own time is the whole
comparison's: its cost, not a speed. ``PARABENCH_BENCH_PROFILE`` overrides the profile
(quick on CPU, full on CUDA); a window is about 2 s (:data:`parabench.case.peer.WINDOW_S`).

Smoke mode (plain ``pytest``) runs each case at tiny with windows of 3 steps and 2 rounds and
asserts only what a bug would break: both loops trained the same samples in every round, and
the hand loop's first losses are parabench's first epoch's (same seed, same batches): exactly
on CPU, within CUDA_LOSS_RTOL on a GPU (cuDNN's reductions are not bit-reproducible).
"""

from __future__ import annotations

import os
from typing import Any

import pytest

from parabench.case.peer import Peer, compare

pytestmark = [pytest.mark.torch]

#: on CPU both loops run the same kernels in the same order: bit-identical losses (measured)
CPU_LOSS_RTOL = 0.0
#: on a GPU the two loops' kernels may reduce in another order (bf16 autocast; channels_last
#: where parabench does not apply it): the first steps' losses then drift apart slightly
CUDA_LOSS_RTOL = 2e-2

CASES = [
    pytest.param({"workload": "cnn"}, id="cnn-cpu", marks=pytest.mark.cpu),
    pytest.param({"workload": "mlp"}, id="mlp-cpu", marks=pytest.mark.cpu),
    pytest.param({"workload": "vgg11", "device": "cuda", "precision": "bf16", "batch_size": 64,
                  "channels_last": False}, id="vgg11-cuda-bf16-nchw", marks=pytest.mark.cuda),
    pytest.param({"workload": "vgg11", "device": "cuda", "precision": "bf16", "batch_size": 64,
                  "channels_last": True}, id="vgg11-cuda-bf16-channels_last",
                 marks=pytest.mark.cuda),
]


@pytest.mark.parametrize("spec", CASES)
def test_parabench_serial_against_the_hand_loop(benchmark: Any, spec: dict[str, Any]) -> None:
    smoke = benchmark.disabled
    measured = "full" if spec.get("device") == "cuda" else "quick"
    profile = "tiny" if smoke else os.environ.get("PARABENCH_BENCH_PROFILE") or measured
    peer = Peer(profile=profile, **spec)
    rounds, steps = (2, 3) if smoke else (9, None)
    result = benchmark.pedantic(lambda: compare(peer, rounds=rounds, steps=steps),
                                rounds=1, iterations=1)
    benchmark.extra_info.update(result.to_dict())
    print(f"\n{spec}: {result.summary()}")

    window = result.steps * result.batch_size
    assert [(r["parabench_samples"], r["hand_samples"]) for r in result.rounds] == [
        (window, window)] * rounds
    assert result.hand_losses and len(result.hand_losses) == len(result.parabench_losses)
    rtol = CUDA_LOSS_RTOL if peer.device == "cuda" else CPU_LOSS_RTOL
    assert result.loss_gap <= rtol, (result.parabench_losses, result.hand_losses)
