"""The one case lifecycle, on an in-process fake session and a scripted clock (no wall time).

The fake session's work advances a fake timer by known amounts, so every figure the
lifecycle records is exact: start-up apart, warm-up left out of the history, each window
timed by the clock the lifecycle hands the session, and the session closed after an error.
"""

from __future__ import annotations

from typing import Any, ClassVar

import pytest

from parabench.case.lifecycle import CaseLifecycle
from parabench.config import RunConfig
from parabench.core.clock import Clock
from parabench.core.launcher import POOL, Launcher, active_launcher
from parabench.method import EpochStats, Method, Session
from parabench.workload import Workload


class FakeTimer:
    """A clock read that moves only when work says it took time."""

    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds


class FakeSession(Session):
    """Start takes 5 s, epoch ``e`` takes ``EPOCH_S[e]`` s, evaluation 0.5 s (fake time)."""

    EPOCH_S: ClassVar[list[float]] = [7.0, 2.0, 3.0, 4.0]

    def __init__(self, workload: Workload, config: RunConfig, timer: FakeTimer,
                 fail_at: int | None = None) -> None:
        super().__init__(workload, config)
        self.timer, self.fail_at = timer, fail_at
        self.closed = 0
        self.clock_at_start: Clock | None = None
        self.launcher_at_start: Launcher | None = None

    def start(self) -> None:
        self.clock_at_start, self.launcher_at_start = self.clock, self.launcher
        self.timer.advance(5.0)
        self.samples_per_epoch = 10

    def train_epoch(self, epoch: int) -> EpochStats:
        if epoch == self.fail_at:
            raise RuntimeError(f"epoch {epoch} failed")

        def work() -> None:
            self.timer.advance(self.EPOCH_S[epoch])

        _, seconds = self.clock.time(work)  # the harness's clock, as every session does
        return EpochStats(seconds=seconds, loss=1.0 / (epoch + 1), samples=10)

    def evaluate(self) -> float:
        self.timer.advance(0.5)
        return 0.75

    def close(self) -> None:
        self.closed += 1


class FakeMethod(Method):
    name: ClassVar[str] = "fake"
    families: ClassVar[frozenset[str]] = frozenset({"torch", "estimator"})

    def __init__(self, timer: FakeTimer, fail_at: int | None = None) -> None:
        self.timer, self.fail_at = timer, fail_at
        self.sessions: list[FakeSession] = []
        self.launcher_in_check: Launcher | None = None

    def check(self, workload: Workload, config: RunConfig) -> str | None:
        self.launcher_in_check = active_launcher()
        return None

    def session(self, workload: Workload, config: RunConfig) -> Session:
        self.sessions.append(FakeSession(workload, config, self.timer, self.fail_at))
        return self.sessions[-1]


class OtherLauncher(Launcher):
    name: ClassVar[str] = "other"

    def group(self, program: str | type, args: dict[str, Any], config: RunConfig) -> Any:
        raise AssertionError("the fake session has no ranks")


def _lifecycle(fail_at: int | None = None, launcher: Launcher = POOL) -> CaseLifecycle:
    from parabench.registry import workloads

    timer = FakeTimer()
    return CaseLifecycle(config=RunConfig(workload="mlp", method="fake", epochs=3),
                         workload=workloads.get("mlp"), method=FakeMethod(timer, fail_at),
                         launcher=launcher, clock=Clock(timer=timer))


def test_startup_is_timed_apart_and_warm_up_stays_out_of_the_history() -> None:
    lifecycle = _lifecycle()
    with lifecycle:
        assert lifecycle.startup_s == 5.0
        assert lifecycle.warm_up(1) == 7.0
        assert lifecycle.history == []
        windows = [lifecycle.epoch().seconds for _ in range(2)]
        quality, eval_s = lifecycle.evaluate()
    assert windows == [2.0, 3.0] == [s.seconds for s in lifecycle.history]
    assert lifecycle.epochs_run == 3
    assert (quality, eval_s) == (0.75, 0.5)
    assert lifecycle.clock is not None and lifecycle.clock.windows == [5.0, 7.0, 2.0, 3.0, 0.5]
    session = lifecycle.session
    assert isinstance(session, FakeSession) and session.closed == 1


def test_the_session_gets_the_lifecycles_clock_and_launcher_before_start() -> None:
    other = OtherLauncher()
    lifecycle = _lifecycle(launcher=other)
    assert lifecycle.reason() is None
    method = lifecycle.method
    assert isinstance(method, FakeMethod) and method.launcher_in_check is other
    assert active_launcher() is POOL  # only while the lifecycle asks check
    with lifecycle:
        session = lifecycle.session
        assert isinstance(session, FakeSession)
        assert session.clock_at_start is lifecycle.clock
        assert session.launcher_at_start is other


def test_train_runs_the_epochs_and_the_session_is_closed_after_an_error() -> None:
    lifecycle = _lifecycle(fail_at=2)
    said: list[str] = []
    with pytest.raises(RuntimeError, match="epoch 2 failed"), lifecycle:
        lifecycle.train(3, say=said.append)
    assert [s.seconds for s in lifecycle.history] == [7.0, 2.0]  # what finished is kept
    assert said == ["epoch 1/3 7.000s loss 1.0000", "epoch 2/3 2.000s loss 0.5000"]
    session = lifecycle.session
    assert isinstance(session, FakeSession) and session.closed == 1


def test_a_failing_start_closes_the_session() -> None:
    lifecycle = _lifecycle()

    def broken() -> None:
        raise OSError("no rendezvous")

    method = lifecycle.method
    assert isinstance(method, FakeMethod)
    original = method.session

    def session(workload: Workload, config: RunConfig) -> Session:
        made = original(workload, config)
        made.start = broken  # type: ignore[method-assign]
        return made

    method.session = session  # type: ignore[method-assign]
    with pytest.raises(OSError, match="no rendezvous"), lifecycle:
        pass
    assert lifecycle.startup_s is None
    assert method.sessions[0].closed == 1


def test_torchrun_launcher_counts_this_nodes_ranks_and_gives_its_in_process_group(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from parabench.torch.launch import TorchrunGroup, TorchrunLauncher

    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "8")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")
    launcher = TorchrunLauncher()
    assert launcher.local_ranks(8) == 4 and POOL.local_ranks(8) == 8
    group = launcher.group(FakeSession, {"x": 1}, RunConfig(workload="mlp", method="ddp"))
    assert isinstance(group, TorchrunGroup) and not group.running
    assert (group.rank, group.world_size, group.program_class) == (1, 8, FakeSession)
