"""Speed windows (parabench.case.lifecycle): calibration, warm-up, budget, the samples check,
the window order, and one real case end to end.

The lifecycle tests run a fake step session on a scripted clock (no wall time): a step takes
``STEP_S`` fake seconds, so the calibrated window length and every recorded figure are exact.
"""

from __future__ import annotations

import statistics
from typing import ClassVar

import pytest
import torch

from parabench.case import windows as lc
from parabench.case.execute import execute
from parabench.case.lifecycle import CaseLifecycle
from parabench.case.windows import steps_for
from parabench.config import RunConfig
from parabench.core.clock import Clock
from parabench.core.records import Window
from parabench.method import EpochStats, Method, Session
from parabench.torch.loop import epoch_order, window_order
from parabench.workload import Workload


class Timer:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


class StepSession(Session):
    """Global batch 10, 8 steps an epoch; a step takes STEP_S (the first epoch's 2x: warm-up)."""

    window_unit: ClassVar[str] = "steps"
    STEP_S = 0.01

    def __init__(self, workload: Workload, config: RunConfig, timer: Timer,
                 share: int = 1) -> None:
        super().__init__(workload, config)
        self.timer, self.share = timer, share
        self.asked: list[tuple[int, int]] = []

    def start(self) -> None:
        self.batch_size, self.samples_per_epoch = 10, 80

    def _steps(self, steps: int, slow: float = 1.0) -> EpochStats:
        def work() -> None:
            self.timer.t += steps * self.STEP_S * slow

        _, seconds = self.clock.time(work)
        return EpochStats(seconds=seconds, loss=1.0, samples=steps * 10 * self.share)

    def train_epoch(self, epoch: int) -> EpochStats:
        return self._steps(8, slow=2.0 if epoch == 0 else 1.0)

    def train_window(self, window: int, steps: int) -> EpochStats:
        self.asked.append((window, steps))
        return self._steps(steps)

    def evaluate(self) -> float:
        return 0.5


class StepMethod(Method):
    name: ClassVar[str] = "steps_fake"
    families: ClassVar[frozenset[str]] = frozenset({"torch"})

    def __init__(self, timer: Timer, share: int = 1) -> None:
        self.timer, self.share = timer, share

    def check(self, workload: Workload, config: RunConfig) -> str | None:
        return None

    def session(self, workload: Workload, config: RunConfig) -> Session:
        return StepSession(workload, config, self.timer, self.share)


def _run(share: int = 1, **config: object) -> CaseLifecycle:
    from parabench.registry import workloads

    timer = Timer()
    lifecycle = CaseLifecycle(config=RunConfig(workload="mlp", method="steps_fake", epochs=1,
                                               **config),  # type: ignore[arg-type]
                              workload=workloads.get("mlp"), method=StepMethod(timer, share),
                              clock=Clock(timer=timer))
    with lifecycle:
        lifecycle.train(1)
        lifecycle.measure_windows()
    return lifecycle


def test_the_warm_up_window_calibrates_steps_to_the_target_and_stays_out(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PARABENCH_WINDOW_S", raising=False)
    monkeypatch.setattr(lc, "WINDOW_TARGET_S", 0.5)
    lifecycle = _run(windows=4)
    session = lifecycle.session
    assert isinstance(session, StepSession)
    # first guess from the warm-up epoch (0.02 s/step: 25 steps), then 0.5 s / 0.01 s
    assert session.asked == [(0, 25), (1, 50), (2, 50), (3, 50), (4, 50)]
    assert lifecycle.window_steps == 50 and lifecycle.warmup_windows == 1
    assert [round(w.seconds, 9) for w in lifecycle.windows] == [0.25] + [0.5] * 4


def test_fixed_steps_and_no_windows(monkeypatch: pytest.MonkeyPatch) -> None:
    lifecycle = _run(steps=7, windows=2)
    session = lifecycle.session
    assert isinstance(session, StepSession) and session.asked == [(0, 7), (1, 7), (2, 7)]
    assert _run(steps=0).windows == []


def test_windows_stop_at_the_budget_after_the_minimum(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lc, "WINDOW_BUDGET_S", 1.0)
    lifecycle = _run(steps=100, windows=8)  # 1 s a window: the budget is spent after one
    assert len(lifecycle.windows) == 1 + lc.MIN_WINDOWS


def test_a_window_with_the_wrong_sample_count_fails_the_case() -> None:
    # e.g. every rank of two training the whole window instead of its share
    with pytest.raises(RuntimeError, match="trained 200 samples, not 10 steps"):
        _run(share=2, steps=10)


def test_steps_for() -> None:
    stats = EpochStats(seconds=2.0, loss=0.0, samples=1000)  # 16 steps of 64: 0.125 s each
    assert steps_for(stats, 64, target_s=0.5) == 4
    assert steps_for(stats, 64, target_s=0.01) == 1  # never below one step
    assert steps_for(stats, None) == 1


def test_window_order_is_seeded_whole_permutations() -> None:
    order = window_order(10, seed=3, window=2, samples=25)
    assert len(order) == 25
    assert torch.equal(order, window_order(10, seed=3, window=2, samples=25))
    assert not torch.equal(order, window_order(10, seed=3, window=3, samples=25))
    for start in (0, 10):  # each whole pseudo-epoch is a permutation of the samples
        assert sorted(order[start:start + 10].tolist()) == list(range(10))
    # never the epochs trained for quality: those are 0, 1, 2, ...
    assert not any(torch.equal(order[:10], epoch_order(10, 3, e)) for e in range(50))


@pytest.mark.cpu
@pytest.mark.torch
def test_a_real_case_reports_the_median_of_its_windows_with_a_ci() -> None:
    result = execute(RunConfig(workload="mlp", method="serial", profile="tiny", epochs=1,
                               threads_per_worker=1, windows=3, steps=5))
    assert result.status == "ok", result.reason
    assert result.window == Window(unit="steps", steps=5, steps_source="--steps",
                                   target_s=result.window.target_s, warmup=1,
                                   asked=3, ci_target=None)
    assert result.window_samples == [5 * 64] * 4 and len(result.window_s) == 4
    rates = [n / s for n, s in zip(result.window_samples[1:], result.window_s[1:],
                                   strict=True)]
    assert result.samples_per_s == pytest.approx(statistics.median(rates))
    lo, hi = result.samples_per_s_ci or (None, None)
    assert lo is not None and hi is not None
    assert min(rates) <= lo <= result.samples_per_s <= hi <= max(rates)
    # ratios read a steady epoch: the epoch's samples at the windows' median rate
    assert result.median_epoch_s == pytest.approx(result.samples_per_epoch / result.samples_per_s)


class NoisySession(StepSession):
    """Every other window 30 % slower: the median's CI stays wide however many windows."""

    def train_window(self, window: int, steps: int) -> EpochStats:
        self.asked.append((window, steps))
        return self._steps(steps, slow=1.3 if window % 2 else 1.0)


class NoisyMethod(StepMethod):
    def session(self, workload: Workload, config: RunConfig) -> Session:
        return NoisySession(workload, config, self.timer, self.share)


def test_without_a_count_windows_go_on_while_the_ci_is_wide(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from parabench.registry import workloads

    monkeypatch.delenv("PARABENCH_WINDOWS", raising=False)
    steady = _run(steps=10)  # identical windows: the CI is a point after WINDOWS of them
    assert len(steady.windows) == 1 + lc.WINDOWS

    def noisy(**config: object) -> CaseLifecycle:
        timer = Timer()
        lifecycle = CaseLifecycle(
            config=RunConfig(workload="mlp", method="steps_fake", epochs=1,
                             **config),  # type: ignore[arg-type]
            workload=workloads.get("mlp"), method=NoisyMethod(timer), clock=Clock(timer=timer))
        with lifecycle:
            lifecycle.train(1)
            lifecycle.measure_windows()
        return lifecycle

    assert len(noisy(steps=10).windows) == 1 + lc.MAX_WINDOWS
    assert len(noisy(steps=10, windows=4).windows) == 1 + 4  # a count asked for is kept
    monkeypatch.setattr(lc, "WINDOW_BUDGET_S", 0.5)  # 0.1-0.13 s windows: spent after 5
    assert len(noisy(steps=10).windows) == 1 + 5


def test_the_window_rule_stops_on_a_narrow_ci_and_goes_on_while_wide() -> None:
    rule = lc.WindowRule(wanted=4, most=16, ci_target=0.05, budget_s=100.0, least=3)
    steady = [100.0, 101.0, 99.0, 100.5]
    assert rule.stop(steady[:3], 3.0) is None  # fewer than wanted: take another
    assert rule.stop(steady, 4.0) == "ci narrow"
    wide = [100.0, 130.0, 100.0, 130.0]  # the median's CI spans 100-130: far above 5 %
    assert rule.stop(wide, 4.0) is None
    assert rule.stop(wide * 4, 16.0) == "most"
    assert rule.stop(wide, 100.0) == "budget"  # the budget spent, past the least
    assert rule.stop(wide[:2], 100.0) is None  # ... but never before the least


def test_a_count_asked_for_ignores_the_ci() -> None:
    rule = lc.window_rule(asked=4)
    wide = [100.0, 130.0, 100.0, 130.0]
    assert rule.stop(wide[:3], 3.0) is None and rule.stop(wide, 4.0) == "asked"
    assert lc.window_rule(asked=None) == lc.WindowRule()  # the module's constants
