"""One typed stopping rule: the CLI parses, the planner decides, the case carries it.

The flags become :class:`~parabench.stopping.Epochs` / :class:`~parabench.stopping.ToTarget`
(no string sentinels); :func:`~parabench.sweep.plan.stopping_rule` is the one policy; every
planned case's RunConfig says the same rule back (``config.stop``).
"""

from __future__ import annotations

import dataclasses

import pytest

from parabench.case.stopping import DEFAULT_MAX_EPOCHS, default_max_epochs, default_target
from parabench.cli import build_parser, grid_from, main
from parabench.config import ConfigError, RunConfig
from parabench.registry import workloads
from parabench.stopping import COVERAGE_EPOCHS, DEFAULT_EPOCHS, Epochs, StopError, ToTarget
from parabench.sweep.plan import Grid, plan, stopping_rule
from parabench.workloads.quality_targets import quality_target

pytestmark = pytest.mark.cpu


def _grid(*argv: str) -> Grid:
    return grid_from(build_parser().parse_args(["run", *argv]))


def test_the_flags_parse_into_typed_values() -> None:
    parse = build_parser().parse_args
    assert parse(["run", "--target-quality"]).target_quality == ToTarget()
    assert parse(["run", "--target-quality", "default"]).target_quality == ToTarget()
    assert parse(["run", "--target-quality", "0.9"]).target_quality == ToTarget(0.9)
    assert parse(["run"]).target_quality is None


def test_the_planner_decides_the_rule_from_the_flags() -> None:
    # the coverage grid: a fixed epoch (it holds cheap workloads to target itself)
    assert _grid().stop == Epochs(COVERAGE_EPOCHS)
    assert _grid("--epochs", "2").stop == Epochs(2)
    # a sweep given neither: measured targets where there are, else DEFAULT_EPOCHS
    assert _grid("--workload", "mlp").stop == ToTarget(otherwise=Epochs(DEFAULT_EPOCHS))
    assert _grid("--workload", "mlp", "--profile", "tiny", "--max-epochs", "5").stop == ToTarget(
        max_epochs=5, otherwise=Epochs(DEFAULT_EPOCHS))
    assert _grid("--workload", "mlp", "--epochs", "4").stop == Epochs(4)
    # a target: its cap is the selected workloads' longest budget (at least the default)
    cap = default_max_epochs(["mlp", "cnn"], "tiny")
    assert cap >= DEFAULT_MAX_EPOCHS
    assert _grid("--workload", "mlp,cnn", "--profile", "tiny", "--target-quality", "0.5"
                 ).stop == ToTarget(0.5, max_epochs=cap)
    assert _grid("--workload", "mlp", "--target-quality", "--max-epochs", "7").stop == \
        ToTarget(max_epochs=7)


@pytest.mark.parametrize(("argv", "says"), [
    (["--workload", "mlp", "--epochs", "2", "--target-quality", "0.5"], "--max-epochs N"),
    (["--workload", "mlp", "--epochs", "2", "--max-epochs", "3"], "not both"),
    (["--max-epochs", "3"], "the coverage grid takes --epochs N"),
    (["--workload", "vgg11", "--profile", "quick", "--max-epochs", "3"], "none of vgg11"),
])
def test_contradicting_flags_are_usage_errors(argv: list[str], says: str, capsys) -> None:
    with pytest.raises(ConfigError, match=says):
        _grid(*argv)
    assert main(["run", *argv, "--dry-run"]) == 2
    assert says in capsys.readouterr().err


def test_a_case_carries_its_resolved_rule() -> None:
    mlp = workloads.get("mlp")
    entry = quality_target("mlp", "tiny")
    assert entry is not None  # shipped: quality_targets.json measures mlp at tiny
    auto = Grid(workloads=["mlp"], methods=["serial"], profile="tiny",
                stop=ToTarget(otherwise=Epochs(3)))
    [case] = plan(auto)
    assert case.config.stop == ToTarget(entry.value,
                                        max_epochs=default_max_epochs(["mlp"], "tiny"))
    # no measured target at full, and the user's own data: the fixed epochs instead
    [full] = plan(dataclasses.replace(auto, profile="full"))
    assert full.config.stop == Epochs(3) and full.config.target_quality is None
    own = auto.config(workload="mlp", method="serial", device="cpu", workers=1,
                      options={"data_dir": "/somewhere"})
    assert own.stop == Epochs(3)
    # each workload's own target without 'otherwise': the fallback where none was measured
    [fallback] = plan(dataclasses.replace(auto, profile="full", stop=ToTarget(max_epochs=4)))
    assert fallback.config.stop == ToTarget(default_target(mlp, "full")[0], max_epochs=4)
    assert fallback.config.epochs == 4  # the cap, recorded as the case's most epochs


def test_the_rule_round_trips_through_a_runconfig() -> None:
    config = RunConfig(workload="mlp", method="serial")
    for rule in (Epochs(5), ToTarget(0.7, max_epochs=9)):
        again = config.with_stop(rule)
        assert again.stop == rule
        assert RunConfig.from_dict(again.to_dict()).stop == rule
    assert config.with_stop(Epochs(2)).target_quality is None
    with pytest.raises(ConfigError, match="resolved"):
        config.with_stop(ToTarget())  # a grid's rule, not a case's


@pytest.mark.parametrize("bad", [
    lambda: Epochs(0), lambda: Epochs(True), lambda: ToTarget(float("inf")),
    lambda: ToTarget(max_epochs=0), lambda: ToTarget(0.5, otherwise=Epochs(2)),
])
def test_impossible_rules_are_refused(bad) -> None:
    with pytest.raises(StopError):
        bad()


def test_the_policy_is_callable_without_the_cli() -> None:
    assert stopping_rule(coverage=True) == Epochs(COVERAGE_EPOCHS)
    assert stopping_rule(epochs=2) == Epochs(2)
    assert stopping_rule(names=["mlp"], profile="tiny") == ToTarget(
        otherwise=Epochs(DEFAULT_EPOCHS))
