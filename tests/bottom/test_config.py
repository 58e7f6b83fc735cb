from __future__ import annotations

import dataclasses

import pytest

from parabench.config import ConfigError, RunConfig, available_cores

pytestmark = pytest.mark.cpu


def test_defaults_are_valid_and_threads_take_the_fair_share() -> None:
    cfg = RunConfig(workload="mlp", method="serial")
    assert cfg.device == "cpu" and cfg.profile == "quick" and cfg.epochs >= 1
    assert cfg.threads == max(1, available_cores() // cfg.workers)
    two = cfg.replace(workers=2)
    assert two.threads == max(1, available_cores() // 2)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"workers": 0}, "workers must be >= 1"),
        ({"workers": 1.5}, "workers must be an integer"),
        ({"workers": True}, "workers must be an integer"),
        ({"epochs": 0}, "epochs must be >= 1"),
        ({"batch_size": 0}, "batch_size must be >= 1"),
        ({"batch_size": "huge"}, "batch_size must be an integer"),
        ({"device": "tpu"}, "unknown device 'tpu'; valid: cpu, cuda"),
        ({"profile": "huge"}, "unknown profile 'huge'; valid: tiny, quick, full"),
        ({"threads_per_worker": 0}, "threads_per_worker must be >= 1"),
        ({"timeout_s": 0}, "timeout_s must be > 0"),
        ({"timeout_s": float("nan")}, "timeout_s must be > 0 and finite"),
        ({"timeout_s": float("inf")}, "timeout_s must be > 0 and finite"),
        ({"workload": ""}, "workload must be a non-empty name"),
    ],
)
def test_bad_values_are_rejected_with_what_is_valid(changes: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        RunConfig(**{"workload": "mlp", "method": "serial", **changes})


def test_auto_batch_size_is_accepted() -> None:
    assert RunConfig(workload="mlp", method="serial", batch_size="auto").batch_size == "auto"


def test_unknown_keys_are_rejected() -> None:
    with pytest.raises(ConfigError, match="unknown config key.*lr.*valid:"):
        RunConfig.from_dict({"workload": "mlp", "method": "serial", "lr": 0.1})


def test_config_is_frozen_and_round_trips() -> None:
    cfg = RunConfig(workload="mlp", method="serial", batch_size=32, options={"stages": 2})
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.workers = 4  # type: ignore[misc]
    again = RunConfig.from_dict(cfg.to_dict())
    assert again == cfg and again.key() == cfg.key()


def test_options_are_copied_so_callers_cannot_mutate_a_case() -> None:
    opts = {"schedule": "gpipe"}
    cfg = RunConfig(workload="mlp", method="serial", options=opts)
    opts["schedule"] = "1f1b"
    assert cfg.options == {"schedule": "gpipe"}


def test_oversubscription_is_detected() -> None:
    cfg = RunConfig(workload="mlp", method="serial", workers=2, threads_per_worker=2)
    assert cfg.oversubscribed(cores=2)
    assert not cfg.oversubscribed(cores=4)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"stagse": 2},
         "unknown option 'stagse'; valid: activation_checkpointing, channels_last, clients"),
        ({"precision": "fp8"}, "valid: fp32, bf16, fp16"),
        ({"num_workers": -1}, "option num_workers must be >= 0"),
        ({"pin_memory": "yes"}, "option pin_memory must be a bool"),
    ],
)
def test_bad_options_are_rejected_with_what_is_valid(options: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        RunConfig(workload="mlp", method="serial", options=options)


def test_unset_options_do_not_change_the_case_identity() -> None:
    a = RunConfig(workload="mlp", method="serial", options={"precision": None})
    b = RunConfig(workload="mlp", method="serial")
    assert a.key() == b.key() and a.options == {}
