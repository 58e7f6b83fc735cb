"""Harness overhead: ``serial`` on ``mlp`` against a hand-written minimal PyTorch loop.

    pytest tests/benchmarks/test_overhead.py --benchmark-only

The harness's timed unit is a speed window (:mod:`parabench.case.lifecycle`): N global
mini-batch steps over :func:`parabench.torch.loop.window_order`, N calibrated by the warm-up
window. The hand loop trains the *same samples*: before each harness window it takes that
window's order (the same window number, N x batch indices), outside its timing as the harness
takes it outside the window's clock, and trains N steps of the same batch on its own freshly
initialised copy of the model, same tensors and thread count, in one process. Every benchmark
round first runs the hand window (timed here, in the untimed ``setup`` of
``benchmark.pedantic``) and then the harness window (timed by pytest-benchmark), so the two
are interleaved and see the same machine noise.

The target is harness median <= 1.02 x hand-loop median; it is asserted only when measuring
(plain ``pytest`` runs the body once as a smoke test, at the tiny profile with 0.05 s
windows, and checks the two trained alike).
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import pytest

from parabench.case.lifecycle import StartedCase
from parabench.config import RunConfig
from parabench.registry import workloads

pytestmark = [pytest.mark.cpu, pytest.mark.torch]

TARGET_RATIO = 1.02
ROUNDS = 21


def _hand_window(model, opt, x, y, order, batch) -> None:  # type: ignore[no-untyped-def]
    """Train over ``order`` in batches of ``batch``: what the harness's window does."""
    import torch

    model.train()
    for i in range(0, len(order), batch):
        idx = order[i : i + batch]
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(x[idx]), y[idx])
        loss.backward()
        opt.step()


def _record_orders(loop: Any, monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The sample orders the harness's loop trains from now on (smoke mode only: the wrapper
    would sit inside the timed window)."""
    orders: list[Any] = []
    train_epoch = loop.train_epoch

    def recording(epoch: int, indices: Any = None, *rest: Any) -> Any:
        orders.append(indices)
        return train_epoch(epoch, indices, *rest)

    monkeypatch.setattr(loop, "train_epoch", recording)
    return orders


def test_serial_mlp_window_overhead_vs_hand_loop(benchmark: Any,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    from parabench.torch.loop import window_order

    if benchmark.disabled:  # smoke mode checks the samples, not the speed: tiny and short
        monkeypatch.setenv("PARABENCH_WINDOW_S", "0.05")
    profile = "tiny" if benchmark.disabled else "quick"
    config = RunConfig(workload="mlp", method="serial", profile=profile, epochs=1)
    workload = workloads.get("mlp")
    with StartedCase(config) as started:  # the harness's own lifecycle: epoch + warm-up window
        session, lifecycle, steps = started.session, started.lifecycle, started.window_steps
        assert session is not None and lifecycle is not None and session.batch_size
        assert steps, f"{session.window_unit} windows: not steps"
        batch = session.batch_size
        data = workload.make_data(config.profile, config.seed)
        x, y, _, _ = workload.tensors(data)
        hand_model = workload.build_model(data, config.seed)
        hand_opt = workload.make_optimizer(hand_model.parameters())
        hand_times: list[float] = []
        hand_orders: list[Any] = []
        # smoke mode checks the hand loop trains exactly the harness's samples, in order
        harness_orders = _record_orders(session.loop, monkeypatch) if benchmark.disabled else []

        def hand_window() -> None:
            # the window the harness trains next: same number, steps and batch, same samples
            order = window_order(len(x), config.seed, len(lifecycle.windows), steps * batch)
            t0 = time.perf_counter()
            _hand_window(hand_model, hand_opt, x, y, order, batch)
            hand_times.append(time.perf_counter() - t0)
            hand_orders.append(order)

        benchmark.pedantic(
            started.step, setup=hand_window, rounds=ROUNDS, warmup_rounds=2, iterations=1,
        )
        harness_samples = [s.samples for s in lifecycle.windows[-len(hand_orders):]]
    assert harness_samples == [len(o) for o in hand_orders] == [steps * batch] * len(hand_orders)
    if benchmark.disabled:  # smoke mode: the body ran once
        assert len(harness_orders) == len(hand_orders) == 1, (harness_orders, hand_orders)
        assert torch.equal(harness_orders[0], hand_orders[0]), "hand loop trains other samples"
        return
    harness = benchmark.stats.stats.median
    hand = statistics.median(hand_times[2:])  # the setups of warm-up rounds included
    ratio = harness / hand
    benchmark.extra_info.update(
        hand_loop_median_s=hand, harness_median_s=harness, overhead_ratio=ratio,
        threads=torch.get_num_threads(), batch_size=batch, window_steps=steps, rounds=ROUNDS,
    )
    print(f"\nharness {harness * 1e3:.2f} ms, hand loop {hand * 1e3:.2f} ms "
          f"({steps} steps of {batch}), ratio {ratio:.4f}")
    assert ratio <= TARGET_RATIO, f"harness is {ratio:.3f}x the hand loop"
