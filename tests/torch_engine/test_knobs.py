"""--activation-checkpointing and --compile (parabench.torch.knobs): parsed as grid axes, part of
the case identity, refused where they cannot apply, checkpointing exact and lighter, and
compilation inside start-up, before any measured window."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from parabench.cli import build_parser, main, option_axes
from parabench.config import RunConfig

pytestmark = [pytest.mark.torch]


def _tiny(method: str, workers: int = 1, **options: Any) -> RunConfig:
    return RunConfig(workload="mlp", method=method, workers=workers, threads_per_worker=1,
                     profile="tiny", epochs=1, options=options, windows=2)


def _cnn() -> Any:
    import torch
    from torch import nn

    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(1, 8, 3), nn.BatchNorm2d(8), nn.ReLU(), nn.Conv2d(8, 16, 3),
                         nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Dropout(0.2),
                         nn.Linear(16 * 5 * 5, 32), nn.ReLU(), nn.Linear(32, 4))


def _train(model: Any, steps: int = 4) -> tuple[list[float], dict[str, Any]]:
    import torch

    torch.manual_seed(1)
    x, y = torch.randn(32, 1, 14, 14), torch.randint(0, 4, (32,))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    losses = []
    for _ in range(steps):
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    return losses, {k: v.clone() for k, v in model.state_dict().items()}


# -- the command line ----------------------------------------------------------------------------

@pytest.mark.cpu
def test_flags_parse_as_on_off_grid_axes() -> None:
    args = build_parser().parse_args(
        ["run", "--activation-checkpointing", "on,off", "--compile", "off"])
    axes = option_axes(args)
    assert axes["activation_checkpointing"] == [True, False]
    assert axes["compile"] == [False]


@pytest.mark.cpu
def test_a_grid_of_both_flags_plans_four_cases(tmp_path: Path, capsys: Any) -> None:
    code = main(["run", "--workload", "mlp", "--method", "ddp", "--workers", "2", "--threads",
                 "1", "--profile", "tiny", "--activation-checkpointing", "on,off", "--compile",
                 "on,off", "--out", str(tmp_path / "r.jsonl"), "--dry-run"])
    out = capsys.readouterr().out
    assert code == 0
    for ac in ("True", "False"):
        for c in ("True", "False"):
            assert f"activation_checkpointing={ac} compile={c}" in out


@pytest.mark.cpu
def test_bad_value_is_a_usage_error_saying_what_is_valid(tmp_path: Path, capsys: Any) -> None:
    code = main(["run", "--workload", "mlp", "--method", "serial", "--compile", "maybe",
                 "--out", str(tmp_path / "r.jsonl")])
    assert code == 2
    assert "--compile" in (err := capsys.readouterr().err) and "on/off" in err


@pytest.mark.cpu
@pytest.mark.parametrize("argv", [
    ["--workload", "random_forest", "--method", "serial", "--activation-checkpointing", "on"],
    ["--workload", "random_forest", "--method", "rf_dask", "--compile", "on"],
    ["--workload", "mlp", "--method", "tf_serial", "--compile", "on"],
], ids=["forest-serial", "forest-dask", "tf"])
def test_methods_that_cannot_apply_them_refuse_with_exit_2(argv: list[str], tmp_path: Path,
                                                           capsys: Any) -> None:
    code = main(["run", *argv, "--profile", "tiny", "--out", str(tmp_path / "r.jsonl")])
    err = capsys.readouterr().err
    assert code == 2, err
    assert ("compile" in err or "activation" in err) and "error" in err


@pytest.mark.cpu
def test_identity_and_label_include_them() -> None:
    plain, ac, compiled = _tiny("serial"), _tiny("serial", activation_checkpointing=True), \
        _tiny("serial", compile=True)
    assert len({plain.key(), ac.key(), compiled.key()}) == 3
    assert "activation_checkpointing=True" in ac.label() and "compile=True" in compiled.label()
    # neither changes the math (parity's baseline may be eager and checkpoint-free) ...
    assert ac.key().parity_slot == plain.key().parity_slot == compiled.key().parity_slot
    # ... but both change the work timed: a speed ratio's baseline shares them
    assert not ac.key().group.same_work(plain.key().group)
    assert not compiled.key().group.same_work(plain.key().group)


@pytest.mark.cpu
@pytest.mark.parametrize("method", ["serial", "ddp", "fsdp", "fedavg", "pipeline", "hybrid",
                                    "model_parallel"])
def test_every_torch_method_declares_them(method: str) -> None:
    from parabench.registry import methods

    assert {"activation_checkpointing", "compile"} <= set(methods.get(method).options)


# -- activation checkpointing -------------------------------------------------------------------

@pytest.mark.cpu
def test_segments_keep_blocks_alone_and_cut_leaf_runs_by_sqrt() -> None:
    from torch import nn

    from parabench.torch.knobs import segments

    leaves = [nn.ReLU() for _ in range(9)]
    assert [len(s) for s in segments(leaves)] == [3, 3, 3]
    block = nn.Sequential(nn.Linear(2, 2), nn.ReLU())
    assert [len(s) for s in segments([leaves[0], block, leaves[1], leaves[2]])] == [1, 1, 1, 1]


@pytest.mark.cpu
def test_checkpointing_recomputes_the_same_numbers_buffers_and_dropout_included() -> None:
    from parabench.torch.knobs import apply_checkpointing

    plain_losses, plain_state = _train(_cnn())
    model = _cnn()
    assert apply_checkpointing(model) > 1
    losses, state = _train(model)
    assert losses == plain_losses
    for name, value in plain_state.items():  # BatchNorm's running stats updated once, not twice
        assert (state[name] == value).all(), name


@pytest.mark.cpu
def test_checkpointing_keeps_fewer_activation_bytes() -> None:
    import torch

    from parabench.torch.build import activation_bytes_per_sample
    from parabench.torch.knobs import apply_checkpointing

    x, y = torch.randn(16, 1, 14, 14), torch.randint(0, 4, (16,))
    loss = torch.nn.functional.cross_entropy
    plain = activation_bytes_per_sample(_cnn(), loss, x, y)
    model = _cnn()
    apply_checkpointing(model)
    assert activation_bytes_per_sample(model, loss, x, y) < 0.6 * plain


@pytest.mark.cpu
@pytest.mark.slow
def test_ddp_with_checkpointing_matches_serials_trajectory() -> None:
    from parabench.analysis.trajectory import compare_traces
    from parabench.case.execute import execute

    serial = execute(_tiny("serial"))
    ddp = execute(_tiny("ddp", workers=2, activation_checkpointing=True))
    assert serial.status == ddp.status == "ok", ddp.reason
    assert ddp.extra["checkpoint_segments"] == [3]
    verdict = compare_traces(ddp.trace, serial.trace)
    assert verdict["ok"], verdict
    assert ddp.quality.value == pytest.approx(serial.quality.value, abs=1e-6)


# -- compile ------------------------------------------------------------------------------------

@pytest.mark.cpu
@pytest.mark.slow
def test_compilation_happens_in_start_up_not_in_a_measured_window() -> None:
    """Structural, on TorchDynamo's own counter: every graph the training steps run was
    compiled inside the timed start-up; epochs may add graphs for other shapes (the short last
    batch, evaluation), the steady windows none."""
    from parabench.case.lifecycle import CaseLifecycle
    from parabench.registry import methods, workloads
    from parabench.torch.knobs import graphs_compiled

    config = _tiny("serial", compile=True)
    lifecycle = CaseLifecycle(config=config, workload=workloads.get("mlp"),
                              method=methods.get("serial"))
    before = graphs_compiled()
    with lifecycle:
        assert graphs_compiled() > before  # compiled while start-up was timed
        notes = lifecycle.session.notes
        assert 0 < notes["compile_warmup_s"] < lifecycle.startup_s
        lifecycle.train(1)
        lifecycle.evaluate()
        lifecycle.warm_up_window()
        at_first_window = graphs_compiled()
        lifecycle.window()
        lifecycle.window()
        assert graphs_compiled() == at_first_window


@pytest.mark.cpu
@pytest.mark.slow
def test_compile_warm_up_leaves_the_training_unchanged() -> None:
    """The undone warm-up step changes no weight, buffer or RNG draw: the first losses are
    eager's to float precision (compiled kernels, same math)."""
    import torch

    from parabench.registry import methods, workloads

    losses = {}
    for compiled in (False, True):
        config = _tiny("serial", compile=compiled)
        with methods.get("serial").session(workloads.get("mlp"), config) as session:
            session.start()
            session.train_epoch(0)
            losses[compiled] = session.trace["losses"]
    assert torch.allclose(torch.tensor(losses[True]), torch.tensor(losses[False]), rtol=1e-5)


@pytest.mark.cpu
@pytest.mark.slow
def test_a_compiler_failure_fails_the_case_with_its_message(monkeypatch: Any,
                                                            tmp_path: Path) -> None:
    """No working C++ compiler (a fresh cache, so nothing compiled earlier is reused): the
    case fails in start-up with the compiler's error, it does not hang or run eagerly."""
    import torch
    import torch._inductor.config as inductor

    from parabench.case.execute import execute

    monkeypatch.setattr(inductor.cpp, "cxx", (None, str(tmp_path / "no-such-c++")))
    monkeypatch.setattr(inductor, "fx_graph_cache", False)
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "cache"))
    torch._dynamo.reset()
    try:
        result = execute(_tiny("serial", compile=True))
    finally:
        torch._dynamo.reset()
    assert result.status == "failed", result.status
    assert "no-such-c++" in result.reason or "compil" in result.reason.lower(), result.reason
