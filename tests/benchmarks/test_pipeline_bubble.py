"""``pipeline`` bubble: ``gpipe`` vs ``1f1b`` at 2 stages x 4 micro-batches on ``cnn``, one run.

    pytest tests/benchmarks/test_pipeline_bubble.py --benchmark-only -s     # measure (quick)
    pytest tests/benchmarks/test_pipeline_bubble.py                         # smoke: tiny, once

Both schedules are started once (2 rank processes x 1 thread each) and train the same
workload, global batch and seeded order; every round runs one epoch of each, interleaved, so
both see the same machine noise, and the first round (stage metadata inference, warm-up) is
dropped. The timed target is the ``1f1b`` epoch; ``gpipe``'s runs in the round's set-up.

Measured bubble fraction = mean over stages of (epoch - the stage's data + forward +
backward + optimizer time) / epoch (see :mod:`parabench.torch.pipeline`), median
over the steady rounds, next to the ideal pipeline's (p - 1) / (m + p - 1) = 0.2. The two
schedules have the same ideal bubble (1F1B saves activation memory, not idle time); the
measured one also holds the stages' imbalance (``cnn``'s FLOP-balanced cut is about 90 / 10:
its second convolution is most of the work: ``bubble_theory_flops`` puts the same fill-drain
model on those FLOP shares, about 0.46) and the P2P waits, so it is expected above 0.2.
Nothing about the figures is asserted beyond their being fractions.
"""

from __future__ import annotations

import os
import statistics
from typing import Any

import pytest

from parabench.config import RunConfig
from parabench.registry import methods, workloads

pytestmark = [pytest.mark.cpu, pytest.mark.torch]

STAGES, MICROBATCHES = 2, 4
ROUNDS = 6  # the first is warm-up


def _session(schedule: str, profile: str) -> Any:
    config = RunConfig(workload="cnn", method="pipeline", workers=STAGES, threads_per_worker=1,
                       profile=profile, epochs=1,
                       options={"schedule": schedule, "microbatches": MICROBATCHES})
    method = methods.get("pipeline")
    if (reason := method.check(workloads.get("cnn"), config)) is not None:
        pytest.skip(reason)
    return method.session(workloads.get("cnn"), config)


@pytest.mark.slow
def test_pipeline_bubble_gpipe_vs_1f1b(benchmark: Any) -> None:
    profile = os.environ.get("PARABENCH_BENCH_PROFILE") or (
        "tiny" if benchmark.disabled else "quick")
    sessions = {s: _session(s, profile) for s in ("gpipe", "1f1b")}
    epochs: dict[str, list[Any]] = {s: [] for s in sessions}
    try:
        for session in sessions.values():
            session.start()

        def others() -> None:
            epochs["gpipe"].append(sessions["gpipe"].train_epoch(len(epochs["gpipe"])))

        def target() -> None:
            epochs["1f1b"].append(sessions["1f1b"].train_epoch(len(epochs["1f1b"])))

        rounds = 1 if benchmark.disabled else ROUNDS
        benchmark.pedantic(target, setup=others, rounds=rounds, iterations=1, warmup_rounds=0)
        notes = {s: dict(session.notes) for s, session in sessions.items()}
    finally:
        for session in sessions.values():
            session.close()
    figures: dict[str, Any] = {
        "workload": "cnn", "profile": profile, "stages": STAGES, "microbatches": MICROBATCHES,
        "rounds": rounds, "bubble_theory": notes["gpipe"]["bubble_theory"],
        "bubble_theory_flops": notes["gpipe"]["bubble_theory_flops"],
        "stage_cost_shares": notes["gpipe"]["stage_cost_shares"],
        "load_avg_1min": os.getloadavg()[0],
    }
    for schedule, stats in epochs.items():
        steady = stats[1:] if len(stats) > 1 else stats
        bubbles = notes[schedule]["bubble_fraction"]
        bubbles = bubbles[1:] if len(bubbles) > 1 else bubbles
        figures[f"{schedule}_bubble"] = statistics.median(bubbles)
        figures[f"{schedule}_bubble_per_round"] = bubbles
        figures[f"{schedule}_idle_fraction_per_rank"] = notes[schedule]["idle_fraction_per_rank"]
        figures[f"{schedule}_epoch_s"] = statistics.median(s.seconds for s in steady)
        figures[f"{schedule}_communication_s"] = statistics.median(
            s.components["communication"] for s in steady)
    benchmark.extra_info.update(figures)
    print(f"\n{figures}")
    for schedule in epochs:
        assert 0.0 < figures[f"{schedule}_bubble"] < 1.0, figures
