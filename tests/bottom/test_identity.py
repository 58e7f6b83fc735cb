"""One case identity (parabench.identity) and the options and cost guesses methods declare.

Every reader keys a case by :class:`~parabench.identity.CaseId` or one of its named views;
which options a baseline must share derives from the options' declarations; defaults are read
from the declaring method; a method or workload without a cost guess is named in the dry run.
"""

from __future__ import annotations

from typing import Any, ClassVar

import pytest

from parabench import config as config_module
from parabench import registry
from parabench.case.result import QualityValue, Result
from parabench.config import ConfigError, OptionSpec, RunConfig
from parabench.identity import CaseId, CaseKey, math_options, options_label, shared_options
from parabench.methods.serial import Serial
from parabench.registry import methods, option_specs, workloads

pytestmark = pytest.mark.cpu


def _result(config: RunConfig, **overrides: Any) -> Result:
    fields: dict[str, Any] = dict(
        workload=config.workload, method=config.method, device=config.device,
        workers=config.workers, threads_per_worker=config.threads,
        batch_size=config.batch_size, epochs=config.epochs, profile=config.profile,
        seed=config.seed, repeat=config.repeat, status="ok",
        quality=QualityValue(name="accuracy", value=0.9, higher_is_better=True),
        config=config.to_dict())
    return Result(**(fields | overrides))


def test_the_resume_key_is_the_case_id_and_a_result_recovers_it() -> None:
    cfg = RunConfig(workload="mlp", method="ddp", workers=2, threads_per_worker=1,
                    profile="tiny", options={"precision": "bf16"})
    assert cfg.key() == CaseId.of(cfg)
    assert _result(cfg).case_key() == cfg.key()
    assert CaseId.recorded(_result(cfg)) == cfg.key()  # recorded as asked: the same case


def test_repeats_share_a_group_and_their_work_but_are_distinct_cases() -> None:
    a = RunConfig(workload="mlp", method="serial", threads_per_worker=1, repeat=0)
    b = a.replace(repeat=1)
    assert a.key() != b.key()
    assert a.key().group == b.key().group
    assert a.key().work == b.key().work
    assert a.key().work != a.replace(seed=1).key().work


def test_a_group_records_what_ran_and_labels_options_but_not_paths() -> None:
    cfg = RunConfig(workload="mlp", method="serial", threads_per_worker=2,
                    options={"data_dir": "/data/mnist", "precision": "bf16"})
    group = CaseId.recorded(_result(cfg, batch_size=64, threads_per_worker=1)).group
    assert group == CaseKey("mlp", "serial", "cpu", 1, "64", "quick", "precision=bf16", 1)
    assert options_label({}) == "-"
    assert "data_dir" not in cfg.label() and "precision=bf16" in cfg.label()


def test_the_benchmark_key_is_a_config_s_group() -> None:
    """asv's VersusSerial (benchmarks/bench_methods.py) spells a case's key out (it runs against
    old commits too): the default batch, no options."""
    cfg = RunConfig(workload="mlp", method="ddp", workers=2, threads_per_worker=1,
                    profile="tiny", epochs=1)
    assert CaseKey("mlp", "ddp", "cpu", 2, "-", "tiny", "-", 1) == cfg.key().group


def test_options_a_baseline_shares_derive_from_the_declarations() -> None:
    assert math_options() == ("data_dir", "precision")
    assert shared_options("num_workers=2 pin_memory=True precision=bf16 stages=2") == (
        "num_workers=2 pin_memory=True precision=bf16")
    key = CaseKey("mlp", "fedavg", "cpu", 2, "-", "tiny", "clients=4 precision=bf16", 1)
    base = key.baseline_at(2)
    assert (base.method, base.workers, base.threads) == ("serial", 1, 2)
    serial = CaseKey("mlp", "serial", "cpu", 1, "-", "tiny", "precision=bf16", 2)
    assert serial.same_work(base)  # fedavg's own clients= is not shared
    assert not serial._replace(options="-").same_work(base)
    assert not serial._replace(threads=1).same_work(base)


def test_parity_s_baseline_shares_the_math_options_only() -> None:
    cfg = RunConfig(workload="mlp", method="fedavg", workers=2, options={"clients": 4})
    serial = RunConfig(workload="mlp", method="serial", threads_per_worker=1)
    assert CaseId.of(cfg).parity_slot == CaseId.of(serial).parity_slot
    assert CaseId.of(cfg).parity_slot != CaseId.of(
        serial.replace(options={"precision": "bf16"})).parity_slot


def test_config_holds_no_option_table_the_owners_declare_them() -> None:
    assert not hasattr(config_module, "OPTIONS")
    declared = {name for owner in (*methods, *workloads) for name in owner.options}
    assert set(option_specs()) == declared


def test_an_unset_option_reads_the_default_its_method_declares() -> None:
    def option(method: str, name: str) -> Any:
        return RunConfig(workload="mlp", method=method).option(name)

    assert option("model_parallel", "stages") == 2
    assert option("hybrid", "stages") == 2
    assert option("pipeline", "stages") is None  # one stage per worker
    assert option("fedavg", "local_epochs") == 1 and option("fedavg", "split") == "iid"
    assert option("serial", "pin_memory") is False and option("ddp", "precision") == "fp32"
    assert RunConfig(workload="mlp", method="pipeline", options={"stages": 3}).option(
        "stages") == 3
    with pytest.raises(KeyError):
        RunConfig(workload="mlp", method="serial").option("no_such_knob")


class _KnobSerial(Serial):
    name: ClassVar[str] = "knob_serial"
    options: ClassVar[dict[str, OptionSpec]] = {
        **Serial.options, "test_knob": OptionSpec(int, "a plugin's knob", minimum=1, default=3)}


def test_a_plugin_method_s_option_is_known_once_it_registers(
        monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigError, match="unknown option 'test_knob'"):
        RunConfig(workload="mlp", method="knob_serial", options={"test_knob": 2})
    monkeypatch.setitem(methods._factories, "knob_serial", _KnobSerial)
    assert RunConfig(workload="mlp", method="knob_serial").option("test_knob") == 3
    with pytest.raises(ConfigError, match="test_knob must be >= 1"):
        RunConfig(workload="mlp", method="knob_serial", options={"test_knob": 0})


def test_two_owners_declaring_one_option_differently_is_an_error(
        monkeypatch: pytest.MonkeyPatch) -> None:
    class Clash(Serial):
        name: ClassVar[str] = "clash"
        options: ClassVar[dict[str, OptionSpec]] = {"stages": OptionSpec(str, "not a count")}

    monkeypatch.setitem(methods._factories, "clash", Clash)
    with pytest.raises(ValueError, match="option 'stages' is declared differently"):
        registry.option_specs()


def test_every_builtin_declares_its_cost_guess() -> None:
    def builtin(owner: object) -> bool:  # a test plugin may be registered by now
        return type(owner).__module__.startswith("parabench.")

    assert [m.name for m in methods if builtin(m) and m.startup_guess_s is None] == []
    assert [w.name for w in workloads if builtin(w) and w.tiny_epoch_guess_s is None] == []


def test_the_dry_run_names_a_guess_nobody_declared(monkeypatch: pytest.MonkeyPatch) -> None:
    from parabench.sweep.dryrun import FALLBACK_STARTUP_S, describe_plan, guess_s, undeclared
    from parabench.sweep.plan import Case

    class Unguessed(Serial):
        name: ClassVar[str] = "unguessed"
        startup_guess_s: ClassVar[float | None] = None

    monkeypatch.setitem(methods._factories, "unguessed", Unguessed)
    cfg = RunConfig(workload="mlp", method="unguessed", profile="tiny", epochs=1,
                    threads_per_worker=2)
    assert guess_s(cfg) == FALLBACK_STARTUP_S + 0.5
    assert undeclared(cfg) == "unguessed declares no startup_guess_s: 8 s assumed"
    assert undeclared(cfg.replace(method="serial")) is None
    # nothing recorded, no reference table: the declared guesses alone
    text = describe_plan([Case(config=cfg)], previous=[], history=[], reference=[])
    assert "(unguessed declares no startup_guess_s: 8 s assumed)" in text
    # the shipped table holds no such method: its start-up is still the named fallback
    text = describe_plan([Case(config=cfg)], previous=[], history=[])
    assert "guessed: start-up" in text
    assert "; unguessed declares no startup_guess_s: 8 s assumed)" in text
