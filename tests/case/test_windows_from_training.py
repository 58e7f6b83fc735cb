"""fedavg's speed windows are the rounds it trained for quality (``Method.windows_from_training``,
:meth:`parabench.case.lifecycle.CaseLifecycle.measure_windows`), not rounds trained again only
to be timed.

Run: ``pytest tests/case/test_windows_from_training.py`` (mlp tiny, a few seconds).
"""

from __future__ import annotations

import time

import pytest

from parabench.case.audit import audit
from parabench.case.execute import execute
from parabench.case.parts import TimedPart, timing_parts
from parabench.config import RunConfig
from parabench.method import EpochStats

pytestmark = pytest.mark.cpu


def test_a_part_s_span_leaves_out_the_evaluation_after_it() -> None:
    """The first epoch's last part and every later one are kept; each one's span ends before
    the (here 50 ms) evaluation after it and the next one starts after it."""
    kept: list[TimedPart] = []
    seen: list[tuple[int, int]] = []

    def between(stats: EpochStats, epoch: int, part: int, parts: int) -> bool:
        seen.append((epoch, part))
        time.sleep(0.05)
        return False

    timed = timing_parts(between, kept)
    for epoch in range(3):
        for part in range(2):
            timed(EpochStats(seconds=0.0, loss=0.0, samples=8), epoch, part, 2)
    assert len(seen) == 6 and len(kept) == 5  # epoch 0's first part is not kept
    for before, after in zip(kept, kept[1:], strict=False):
        assert before.span[1] - before.span[0] < 0.04
        assert after.span[0] - before.span[1] >= 0.05


def test_fedavg_s_windows_are_its_rounds_trained_for_quality() -> None:
    """3 epochs of 2 rounds, an evaluation after each, a target it cannot reach, 6 steady
    windows asked for: the last round of epoch 1 is the warm-up window, the 4 rounds of
    epochs 2 and 3 the first steady ones, and the other 2 are trained after the epochs. Each
    epoch's seconds are its two rounds' (rounds trained again would not add up to the epochs
    trained), the result's ``windows`` part holds only the rounds trained after, and the
    checks at the file hold."""
    config = RunConfig(workload="mlp", method="fedavg", workers=2, threads_per_worker=1,
                       profile="tiny", epochs=3, target_quality=1.5, windows=6)
    result = execute(config)
    assert result.status == "ok", result.reason
    assert result.time_to_target is not None and not result.time_to_target.reached
    assert result.window is not None and result.window.unit == "round"
    assert result.window.from_training == 5 and result.window.warmup == 1
    w, epochs = result.window_s, result.epoch_s
    assert len(w) == 1 + 6
    assert epochs[1] == pytest.approx(w[1] + w[2], rel=1e-9)
    assert epochs[2] == pytest.approx(w[3] + w[4], rel=1e-9)
    assert result.wall_parts["windows"] == pytest.approx(sum(w[5:]), abs=1e-3)
    ev = result.evidence
    assert ev is not None and ev.window_spans is not None
    assert len(ev.window_spans) == 4 + 1  # each trained round, then the block trained after
    for (s0, e0), (s1, _e1) in zip(ev.window_spans, ev.window_spans[1:], strict=False):
        assert s0 < e0 <= s1  # apart: an evaluation between each
    assert ev.windows_span == [ev.window_spans[0][0], ev.window_spans[-1][1]]
    assert result.samples_per_s is not None and audit(result) == []
