"""Harness overhead: ``serial`` on ``mlp`` against a hand-written minimal PyTorch loop.

Both train the same freshly initialised model on the same tensors, batch and thread count,
in one process. Every benchmark round first runs one hand-loop epoch (timed here, in the
untimed ``setup`` of ``benchmark.pedantic``) and then one harness epoch (timed by
pytest-benchmark), so the two are interleaved and see the same machine noise.

    pytest tests/benchmarks/test_overhead.py --benchmark-only

The target is harness median <= 1.02 x hand-loop median; it is asserted only when measuring
(plain ``pytest`` runs the body once as a smoke test).
"""

from __future__ import annotations

import statistics
import time

import pytest

from parabench.case.lifecycle import StartedCase
from parabench.config import RunConfig
from parabench.registry import workloads

pytestmark = [pytest.mark.cpu, pytest.mark.torch]

TARGET_RATIO = 1.02
ROUNDS = 21


def _hand_loop(model, opt, x, y, batch, seed, epoch):  # type: ignore[no-untyped-def]
    import torch

    gen = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
    perm = torch.randperm(len(x), generator=gen)
    model.train()
    for i in range(0, len(x), batch):
        idx = perm[i : i + batch]
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(x[idx]), y[idx])
        loss.backward()
        opt.step()


def test_serial_mlp_epoch_overhead_vs_hand_loop(benchmark) -> None:  # type: ignore[no-untyped-def]
    import torch

    config = RunConfig(workload="mlp", method="serial", profile="quick", epochs=1)
    workload = workloads.get("mlp")
    with StartedCase(config, warmup_epochs=0) as started:  # the harness's own lifecycle
        session = started.session
        assert session is not None
        data = workload.make_data(config.profile, config.seed)
        x, y, _, _ = workload.tensors(data)
        hand_model = workload.build_model(data, config.seed)
        hand_opt = workload.make_optimizer(hand_model.parameters())
        batch = session.batch_size
        assert batch is not None
        hand_times: list[float] = []
        epoch = iter(range(10_000))

        def hand_epoch() -> None:
            t0 = time.perf_counter()
            _hand_loop(hand_model, hand_opt, x, y, batch, config.seed, next(epoch))
            hand_times.append(time.perf_counter() - t0)

        benchmark.pedantic(
            started.step, setup=hand_epoch, rounds=ROUNDS, warmup_rounds=2, iterations=1,
        )
        if benchmark.disabled:
            return  # smoke mode: the body ran once
        harness = benchmark.stats.stats.median
        hand = statistics.median(hand_times[2:])  # the setups of warm-up rounds included
        ratio = harness / hand
        benchmark.extra_info.update(
            hand_loop_median_s=hand, harness_median_s=harness, overhead_ratio=ratio,
            threads=torch.get_num_threads(), batch_size=batch, rounds=ROUNDS,
        )
        print(f"\nharness {harness * 1e3:.2f} ms, hand loop {hand * 1e3:.2f} ms, "
              f"ratio {ratio:.4f}")
        assert ratio <= TARGET_RATIO, f"harness is {ratio:.3f}x the hand loop"
