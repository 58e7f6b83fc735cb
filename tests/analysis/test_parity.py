"""Run-level parity: a parallel result is checked against the serial one of the same sweep."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest

from parabench.analysis import parity as parity_module
from parabench.analysis.parity import EXACT_TOLERANCE, FALLBACK_SPREAD, assess
from parabench.analysis.ratios import MIN_STATISTICAL_TOLERANCE, SPREAD_FACTOR
from parabench.case.result import Facts, Grading, QualityValue, Result, read_results
from parabench.sweep.table import format_table, summarize
from parabench.workloads import spread


def _result(method: str, quality: float, *, higher: bool = True, device: str = "cpu",
            options: dict | None = None, batch: int | None = 64, workload: str = "mlp",
            profile: str = "tiny", facts: Facts | None = None,
            grading: Grading | None = None, trace: dict | None = None) -> Result:
    return Result(
        workload=workload, method=method, device=device, workers=1 if method == "serial" else 2,
        threads_per_worker=1, batch_size=batch, epochs=3, profile=profile, seed=0, repeat=0,
        status="ok", epoch_s=[1.0, 1.0, 1.0],
        quality=QualityValue(name="accuracy", value=quality, higher_is_better=higher),
        config={"options": options or {}}, facts=facts or Facts(), grading=grading,
        trace=trace,
    )


def test_a_wrong_exact_method_fails_parity_and_a_close_one_passes() -> None:
    serial = _result("serial", 0.80)
    close = assess(_result("wide_serial", 0.80 - EXACT_TOLERANCE / 2), [serial])
    stuck = assess(_result("wide_serial", 0.10), [serial])  # seed 004's DDP stuck at chance
    assert close is not None and close.status == "ok"
    assert stuck is not None and stuck.status == "failed"
    assert stuck.gap == pytest.approx(-0.70) and stuck.baseline == "serial/cpu"


def test_better_than_serial_is_not_a_parity_failure() -> None:
    parity = assess(_result("wide_serial", 0.95), [_result("serial", 0.80)])
    assert parity is not None and parity.status == "ok" and parity.gap > 0


def test_lower_is_better_quality_flips_the_gap() -> None:
    serial = _result("serial", 0.020, higher=False)
    worse = assess(_result("wide_serial", 0.030, higher=False), [serial])
    assert worse is not None and worse.status == "failed" and worse.gap < 0


def test_baseline_must_share_batch_and_precision() -> None:
    serial = _result("serial", 0.80, options={"precision": "bf16"})
    other = assess(_result("wide_serial", 0.10), [serial])
    assert other is not None and other.status == "not-applicable"
    assert "add --method serial" in other.reason
    assert assess(_result("serial", 0.8), []).status == "not-applicable"


def test_a_cuda_run_falls_back_to_the_cpu_baseline() -> None:
    parity = assess(_result("wide_serial", 0.79, device="cuda"), [_result("serial", 0.80)])
    assert parity is not None and parity.baseline == "serial/cpu"


def test_the_summary_table_shows_a_parity_failure() -> None:
    serial = _result("serial", 0.80)
    serial = dataclasses.replace(serial, parity=assess(serial, []))
    bad = _result("wide_serial", 0.10)
    bad = dataclasses.replace(bad, parity=assess(bad, [serial]))
    table = format_table(summarize([serial, bad]))
    assert "FAILED -0.700" in table and "base" in table


@pytest.mark.slow
@pytest.mark.torch
def test_parabench_run_records_parity_against_the_serial_case_of_the_sweep(
    fault_plugin: Path, tmp_path: Path
) -> None:
    out = tmp_path / "r.jsonl"
    proc = subprocess.run(
        [sys.executable, "-m", "parabench", "run", "--workload", "mlp",
         "--method", "wide_serial,serial", "--workers", "1", "--profile", "tiny",
         "--epochs", "1", "--out", str(out), "--precision", "fp32"],
        capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    results = {r.method: r for r in read_results(out)}
    assert [r.method for r in read_results(out)] == ["serial", "wide_serial"]  # baseline first
    assert results["serial"].parity.status == "not-applicable"
    assert results["wide_serial"].parity.status == "ok"
    assert results["wide_serial"].parity.gap == pytest.approx(0, abs=1e-9)
    assert "precision=fp32" in proc.stdout


# -- every verdict path, on crafted results ------------------------------------------------


def _trace(scale: float = 1.0) -> dict:
    return {"steps": 3, "losses": [2.0 * scale, 1.5, 1.2],
            "digest": {"w": {"sum": 3.0 * scale, "norm": 4.0, "proj": [1.0, -2.0]}}}


def test_exact_parity_follows_the_trajectory_and_still_checks_the_evaluation() -> None:
    from parabench.analysis.recommend import parity_text

    serial = _result("serial", 0.80, trace=_trace())
    same = assess(_result("wide_serial", 0.795, trace=_trace()), [serial])  # a flipped sample
    drift = assess(_result("wide_serial", 0.80, trace=_trace(1.01)), [serial])  # accuracy on
    assert same.status == "ok" and same.basis == "trajectory"
    assert drift.status == "failed" and drift.basis == "trajectory"
    assert drift.loss_rel_max > same.loss_rel_max
    assert parity_text(drift).startswith("FAILED loss")
    # trained exactly like serial, but the held-out evaluation lands elsewhere (e.g. a rank
    # scoring its shard of the test set): the trajectory cannot see it, the quality check does
    misjudged = assess(_result("wide_serial", 0.70, trace=_trace()), [serial])
    assert misjudged.status == "failed" and misjudged.trajectory_ok
    assert misjudged.quality_tolerance == EXACT_TOLERANCE and "evaluation" in misjudged.reason
    assert parity_text(misjudged) == "FAILED quality -0.100"


def _whole(method: str, quality: float, *, loss: tuple[float, ...] = (1.0, 0.8, 0.7),
           final: float = 1.0, higher: bool = True, workload: str = "mlp",
           samples: int = 640, device: str = "cpu", first_loss: float = 1.0) -> Result:
    """A result whose trace also has the final weights' digest (and its coverage);
    ``first_loss`` scales its first traced step's loss."""
    size = {"tensors": 1, "elements": 2}
    first = {"w": {"sum": 3.0, "norm": 4.0, "proj": [1.0, -2.0], "numel": 2}}
    last = {"w": {"sum": 3.0, "norm": 4.0, "proj": [1.0 * final, -2.0], "numel": 2}}
    trace = {**_trace(), "digest": first, "covered": size, "model": size,
             "final_digest": last, "final_covered": size}
    trace["losses"] = [trace["losses"][0] * first_loss, *trace["losses"][1:]]
    result = _result(method, quality, trace=trace, higher=higher, workload=workload,
                     device=device)
    return dataclasses.replace(result, loss=list(loss), samples_per_epoch=samples)


def test_exact_parity_grades_the_whole_run_two_sided() -> None:
    """Issue 28: the first steps match in every case below; what differs later is named."""
    from parabench.analysis.recommend import parity_text
    from parabench.analysis.trajectory import EVAL_TOLERANCE

    serial = _whole("serial", 0.582)
    same = assess(_whole("wide_serial", 0.582 + EVAL_TOLERANCE / 2), [serial])
    assert same.status == "ok" and same.final_weight_rel_l2 == 0.0, same
    assert same.quality_tolerance == EVAL_TOLERANCE
    # better than serial at the same weights: an evaluation of another held-out set
    better = assess(_whole("wide_serial", 0.598), [serial])
    assert better.status == "failed" and better.differs == "evaluation +0.016", better
    assert "evaluation differs from serial's at the same weights" in better.reason
    assert parity_text(better) == "FAILED evaluation +0.016"
    # epoch 0's order reused: epoch 2's loss moves (20 steps: drift allows 5e-5)
    stale = assess(_whole("wide_serial", 0.571, loss=(1.0, 0.8001, 0.72)), [serial])
    assert stale.status == "failed" and stale.differs == "epoch 2 loss", stale
    assert stale.trajectory_ok and parity_text(stale) == "FAILED epoch 2 loss"
    drift = assess(_whole("wide_serial", 0.582, loss=(1.0, 0.8 * (1 + 1e-6), 0.7)), [serial])
    assert drift.status == "ok", drift
    moved = assess(_whole("wide_serial", 0.582, final=1.01), [serial])
    assert moved.status == "failed" and moved.differs == "final weights", moved
    assert parity_text(moved).startswith("FAILED final w")
    # a lower-is-better loss: the same weights give the same MSE within 1e-5 of it
    mse = _whole("serial", 0.038, higher=False)
    assert assess(_whole("wide_serial", 0.038 * (1 + 5e-6), higher=False), [mse]).status == "ok"
    assert assess(_whole("wide_serial", 0.0381, higher=False), [mse]).status == "failed"


def test_whole_run_figures_past_the_measured_drift_horizon_are_not_graded() -> None:
    """cnn at 10 tiny epochs: serial against serial drifts by the size of a bug past 45
    steps (trajectory.py's measurement), so epochs and final weights there are not graded."""
    from parabench.analysis.trajectory import drift_horizon

    assert drift_horizon("cnn") == 45 < drift_horizon("mlp")
    kw = {"workload": "cnn", "samples": 64 * 30}  # 30 steps an epoch
    serial = _whole("serial", 0.98, **kw)
    drifted = assess(_whole("wide_serial", 0.98, loss=(1.0, 0.81, 0.72), final=1.3, **kw),
                     [serial])
    assert drifted.status == "ok" and "not graded" in drifted.whole_run_note, drifted
    early = assess(_whole("wide_serial", 0.98, loss=(1.1, 0.8, 0.7), **kw), [serial])
    assert early.status == "failed" and early.differs == "epoch 1 loss", early


def test_on_cuda_the_first_steps_allow_gpu_drift_and_later_figures_are_not_graded() -> None:
    """The first GPU run: correct cnn runs on one H200 drifted 1.1e-4 in the first steps'
    loss (pipeline) and 1.6e-3 in epoch 3's (ddp), past the CPU allowances; on CUDA the
    first steps get trajectory.py's CUDA allowance and the whole run is only recorded."""
    from parabench.analysis.trajectory import CUDA_LOSS_RTOL, LOSS_RTOL

    kw = {"workload": "cnn", "samples": 64 * 15}  # 15 steps an epoch: 45 in 3 epochs
    for device in ("cpu", "cuda"):
        serial = _whole("serial", 0.98, device=device, **kw)
        early = assess(_whole("pipeline", 0.98, first_loss=1 + 1.1e-4, device=device, **kw),
                       [serial])
        late = assess(_whole("ddp", 0.98, loss=(1.0, 0.8, 0.7 * (1 + 1.6e-3)), final=1.0003,
                             device=device, **kw), [serial])
        if device == "cpu":
            assert early.status == "failed" and early.differs == "first steps", early
            assert late.status == "failed" and late.differs == "epoch 3 loss", late
            continue
        assert early.status == "ok" and early.tolerance["loss_rel"] == CUDA_LOSS_RTOL > LOSS_RTOL
        assert late.status == "ok" and "on cuda not graded" in late.whole_run_note, late
        assert late.final_graded is False
        # still caught on CUDA: first steps off by more than the allowance, a quality loss
        off = assess(_whole("ddp", 0.98, first_loss=1 + 2 * CUDA_LOSS_RTOL, device=device,
                            **kw), [serial])
        assert off.status == "failed" and off.differs == "first steps", off
        worse = assess(_whole("ddp", 0.98 - 2 * EXACT_TOLERANCE, device=device, **kw), [serial])
        assert worse.status == "failed" and worse.differs.startswith("quality"), worse
        # a cuda result judged against a CPU serial (no GPU serial in the sweep): cuda's rules
        mixed = assess(_whole("ddp", 0.98, first_loss=1 + 1.1e-4, device="cuda", **kw),
                       [_whole("serial", 0.98, **kw)])
        assert mixed.status == "ok" and mixed.baseline == "serial/cpu", mixed


def _forest(method: str, quality: float, sha: str) -> Result:
    return _result(method, quality, workload="random_forest",
                   facts=Facts(predictions_sha=sha))


def test_seed_exact_forests_need_identical_predictions_and_a_zero_gap() -> None:
    serial = _forest("serial", 0.86, "abc")
    same = assess(_forest("rf_threads", 0.86, "abc"), [serial])
    other = assess(_forest("rf_threads", 0.86, "abd"), [serial])  # same accuracy, other trees
    assert same.status == "ok" and same.basis == "predictions" and same.identical
    assert same.tolerance == 0.0 and same.gap == 0.0
    assert other.status == "failed" and not other.identical
    assert other.baseline_predictions_sha == "abc"


TABLE = {"mlp": {"tiny": {"3": {"std": 0.02, "command": "python scripts/seed_spread.py "
                                                         "--profile tiny", "date": "2026-11-23"}}}}


def test_statistical_margin_is_three_measured_spreads(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(spread, "table", lambda: TABLE)
    serial = _result("serial", 0.80)
    tol = SPREAD_FACTOR * 0.02
    inside = assess(_result("fedavg", 0.80 - tol + 1e-9), [serial])
    outside = assess(_result("fedavg", 0.80 - tol - 1e-9), [serial])
    assert inside.status == "ok" and outside.status == "failed"
    assert inside.tolerance == pytest.approx(0.06) and inside.spread == 0.02
    assert "seed_spread.json" in inside.spread_source and "2026-11-23" in inside.spread_source
    assert inside.reason is None


def test_a_missing_spread_is_named_not_silent(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(spread, "table", lambda: TABLE)
    serial = _result("serial", 0.80, profile="full")
    parity = assess(_result("fedavg", 0.75, profile="full"), [serial])
    assert parity.spread_source == "fallback" and parity.spread == FALLBACK_SPREAD
    assert parity.reason == ("no measured seed spread for mlp at full: "
                                "run scripts/seed_spread.py")
    fallback_tol = max(SPREAD_FACTOR * FALLBACK_SPREAD, MIN_STATISTICAL_TOLERANCE)
    assert parity.tolerance == pytest.approx(fallback_tol) and parity.status == "failed"


def test_a_result_can_declare_itself_statistical(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(spread, "table", lambda: TABLE)
    serial = _result("serial", 0.80, trace=_trace())
    why = "BatchNorm statistics are per rank under data parallelism"
    bn = _result("wide_serial", 0.79, trace=_trace(1.5),
                 grading=Grading(kind="statistical", reason=why))
    parity = assess(bn, [serial])
    assert parity.kind == "statistical" and parity.kind_reason == why
    assert parity.basis == "quality" and parity.status == "ok"  # the trace is not used
    assert parity_module.parity_kind(_result("wide_serial", 0.8)) == ("exact", None)



def test_a_loss_spread_is_relative_to_its_mean(monkeypatch: pytest.MonkeyPatch) -> None:
    table = {"mlp": {"tiny": {"3": {"std": 0.002, "mean": 0.04, "command": "c", "date": "d"}}}}
    monkeypatch.setattr(spread, "table", lambda: table)
    serial = _result("serial", 0.040, higher=False)
    parity = assess(_result("fedavg", 0.045, higher=False), [serial])  # 12.5 % worse
    assert parity.spread == pytest.approx(0.05)  # std / mean
    assert parity.tolerance == pytest.approx(3 * 0.05 * 0.040)
    assert parity.status == "ok" and parity.gap == pytest.approx(-0.005)


def test_shipped_table_covers_every_shipped_workload_at_tiny() -> None:
    """The default run is tiny: no shipped workload may fall back to a guessed spread there."""
    from parabench.registry import workloads

    shipped = spread.table()
    names = [n for n in workloads.names()  # not the plugin workloads other tests register
             if type(workloads.get(n)).__module__.startswith("parabench.")]
    assert len(names) >= 8
    for name in names:
        for epochs in ("1", "3"):  # the default run's, and the CLI's default
            entry = shipped[name]["tiny"][epochs]
            assert entry["std"] > 0 and len(entry["values"]) >= 3, (name, epochs)
            assert entry["epochs"] == int(epochs), (name, epochs)
            assert entry["command"].startswith("python scripts/seed_spread.py") and entry["date"]


def test_the_spread_is_the_one_measured_at_the_runs_epochs(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """After 1 tiny epoch densenet121 is at 0.09-0.28 over seeds, after 3 at 0.99-1.0: a
    3-epoch spread would flag a sound 1-epoch run."""
    entry = {"command": "c", "date": "d", "mean": 0.5}
    table = {"mlp": {"tiny": {"1": {**entry, "std": 0.1}, "3": {**entry, "std": 0.01}}}}
    monkeypatch.setattr(spread, "table", lambda: table)
    serial = dataclasses.replace(_result("serial", 0.60), epochs=1)
    one = assess(dataclasses.replace(_result("fedavg", 0.45), epochs=1), [serial])
    assert one.status == "ok" and one.spread == pytest.approx(0.1)
    assert "1 epoch(s)" in one.spread_source and "nearest" not in one.spread_source
    assert spread.seed_spread("mlp", "tiny", 3).std == pytest.approx(0.01)
    assert spread.seed_spread("mlp", "tiny").std == pytest.approx(0.01)  # the most epochs
    near = spread.seed_spread("mlp", "tiny", 5)  # none at 5: the nearest, said so
    assert near.std == pytest.approx(0.01) and "nearest" in near.source


def test_a_serial_run_with_work_options_is_graded_on_plain_serial() -> None:
    """#26: serial with compile or activation checkpointing is not a second baseline: it is
    graded exactly on serial without them (ok when it trains the same, FAILED when not), and
    the other methods are graded on the plain one whichever was recorded last."""
    from parabench.analysis.recommend import candidates

    plain = _result("serial", 0.80, trace=_trace())
    knobs = {"compile": True, "activation_checkpointing": True}
    same = _result("serial", 0.80, trace=_trace(), options=knobs)
    moved = _result("serial", 0.80, trace=_trace(1.01), options={"compile": True})
    graded = assess(same, [same, plain])
    assert graded.status == "ok" and graded.basis == "trajectory", graded
    assert graded.kind == "exact"
    assert graded.kind_reason == "the same baseline without activation_checkpointing, compile"
    failed = assess(moved, [moved, plain])
    assert failed.status == "failed" and failed.basis == "trajectory", failed
    # without the plain run it stays the baseline; the plain run is always the baseline
    assert assess(same, [same]).status == "not-applicable"
    assert assess(plain, [same, plain]).status == "not-applicable"
    # ddp is graded on plain serial even when serial with compile is the newest baseline
    ddp = _result("ddp", 0.80, trace=_trace())
    assert assess(ddp, [moved, plain]).status == "ok"
    assert assess(ddp, [moved]).status == "failed"  # (and would be, on that one alone)
    # the failed serial run is not a qualifying candidate; the graded ok one is
    rows = [dataclasses.replace(r, parity=assess(r, [r, plain]), samples_per_s=100.0,
                                window_s=[1.0, 1.0], window_samples=[100, 100])
            for r in (same, moved)]
    status = {c.options: c.parity for c in candidates([*rows, plain])}
    assert status["activation_checkpointing=True compile=True"] == "ok"
    assert status["compile=True"] == "failed"


def test_the_plan_runs_plain_options_before_work_options() -> None:
    from parabench.sweep.plan import Grid, plan

    grid = Grid(workloads=["mlp"], methods=["serial"], threads_per_worker=1, options={
        "compile": [True, False], "activation_checkpointing": [True, False]})
    combos = [(c.config.option("activation_checkpointing"), c.config.option("compile"))
              for c in plan(grid)]
    assert len(combos) == 4 and combos[0] == (False, False)
    assert combos[-1] == (True, True)


def test_a_statistical_verdict_states_its_power_and_has_it(monkeypatch: pytest.MonkeyPatch
                                                           ) -> None:
    """The stated detectable loss is what the gate really flags 95 % of the time, and a sound
    method passes far more often than 95 %: both directions, by drawing one-run-a-side gaps
    with the seed spread the verdict assumed (two seeds' worth of it)."""
    import random

    from parabench.analysis.parity_text import parity_text
    from parabench.analysis.ratios import detectable_loss, parity_holds

    monkeypatch.setattr(spread, "table", lambda: TABLE)
    parity = assess(_result("fedavg", 0.79), [_result("serial", 0.80)])
    assert parity.status == "ok" and parity.detectable_loss == pytest.approx(
        0.06 + 1.645 * 2**0.5 * 0.02)
    assert parity_text(parity) == f"ok, blind <{parity.detectable_loss:.2f}"
    rng = random.Random(5)

    def fails(loss: float) -> float:
        gaps = [rng.gauss(-loss, 2**0.5 * parity.spread) for _ in range(20000)]
        return sum(not parity_holds(g, parity.tolerance) for g in gaps) / len(gaps)

    assert fails(parity.detectable_loss) == pytest.approx(0.95, abs=0.01)
    assert fails(0.0) < 0.05 and fails(0.5 * parity.detectable_loss) < 0.95
    # lower-is-better (reconstruction MSE): the same in units of the baseline
    mse = detectable_loss(0.06 * 2.0, 0.02, 2.0, higher_is_better=False)
    assert mse == pytest.approx(2.0 * (0.06 + 1.645 * 2**0.5 * 0.02))
    exact = assess(_result("wide_serial", 0.80), [_result("serial", 0.80)])
    assert exact.detectable_loss is None and parity_text(exact) == "ok"
