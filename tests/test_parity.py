"""Run-level parity: a parallel result is checked against the serial one of the same sweep."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest

from parabench.case.result import QualityValue, Result, read_results
from parabench.sweep.parity import EXACT_TOLERANCE, assess
from parabench.sweep.report import format_table, summarize


def _result(method: str, quality: float, *, higher: bool = True, device: str = "cpu",
            options: dict | None = None, batch: int | None = 64) -> Result:
    return Result(
        workload="mlp", method=method, device=device, workers=1 if method == "serial" else 2,
        threads_per_worker=1, batch_size=batch, epochs=3, profile="tiny", seed=0, repeat=0,
        status="ok", epoch_s=[1.0, 1.0, 1.0],
        quality=QualityValue(name="accuracy", value=quality, higher_is_better=higher),
        config={"options": options or {}},
    )


def test_a_wrong_exact_method_fails_parity_and_a_close_one_passes() -> None:
    serial = _result("serial", 0.80)
    close = assess(_result("wide_serial", 0.80 - EXACT_TOLERANCE / 2), [serial])
    stuck = assess(_result("wide_serial", 0.10), [serial])  # seed 004's DDP stuck at chance
    assert close is not None and close["status"] == "ok"
    assert stuck is not None and stuck["status"] == "failed"
    assert stuck["gap"] == pytest.approx(-0.70) and stuck["baseline"] == "serial/cpu"


def test_better_than_serial_is_not_a_parity_failure() -> None:
    parity = assess(_result("wide_serial", 0.95), [_result("serial", 0.80)])
    assert parity is not None and parity["status"] == "ok" and parity["gap"] > 0


def test_lower_is_better_quality_flips_the_gap() -> None:
    serial = _result("serial", 0.020, higher=False)
    worse = assess(_result("wide_serial", 0.030, higher=False), [serial])
    assert worse is not None and worse["status"] == "failed" and worse["gap"] < 0


def test_baseline_must_share_batch_and_precision() -> None:
    serial = _result("serial", 0.80, options={"precision": "bf16"})
    other = assess(_result("wide_serial", 0.10), [serial])
    assert other is not None and other["status"] == "not-applicable"
    assert "add --method serial" in other["reason"]
    assert assess(_result("serial", 0.8), [])["status"] == "not-applicable"


def test_a_cuda_run_falls_back_to_the_cpu_baseline() -> None:
    parity = assess(_result("wide_serial", 0.79, device="cuda"), [_result("serial", 0.80)])
    assert parity is not None and parity["baseline"] == "serial/cpu"


def test_the_summary_table_shows_a_parity_failure() -> None:
    serial = _result("serial", 0.80)
    serial = dataclasses.replace(serial, parity=assess(serial, []))
    bad = _result("wide_serial", 0.10)
    bad = dataclasses.replace(bad, parity=assess(bad, [serial]))
    table = format_table(summarize([serial, bad]))
    assert "FAILED -0.700" in table and "base" in table


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
    assert results["serial"].parity["status"] == "not-applicable"
    assert results["wide_serial"].parity["status"] == "ok"
    assert results["wide_serial"].parity["gap"] == pytest.approx(0, abs=1e-9)
    assert "precision=fp32" in proc.stdout
