"""MFU in every torch row: the peak of the row's own arithmetic, measured once per sweep and
recorded in the machine record, the MFU in the JSON, the wide table and the report."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from parabench.case import peak as peak_mod
from parabench.case.peak import arithmetic, matmul_peak_flops, mfu, sweep_peak
from parabench.core.records import Peak
from parabench.core.tempdirs import SWEEP_DIR_ENV

pytestmark = [pytest.mark.torch, pytest.mark.cpu]


def test_each_precision_is_held_to_its_own_arithmetic() -> None:
    import torch

    assert arithmetic("cuda", "bf16", convolutions=True) == "bf16"
    assert arithmetic("cuda", "fp16", convolutions=False) == "fp16"
    assert arithmetic("cpu", "fp32", convolutions=True) == "fp32"
    assert arithmetic("cpu", "bf16", convolutions=False) == "bf16"
    # cuDNN allows TF32 convolutions by default; matmuls only when asked (cuBLAS's flag is
    # a property of a module object: set and restored by hand, not by monkeypatch)
    matmul, conv = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    try:
        torch.backends.cudnn.allow_tf32 = True
        torch.backends.cuda.matmul.allow_tf32 = False
        assert arithmetic("cuda", "fp32", convolutions=True) == "tf32"
        assert arithmetic("cuda", "fp32", convolutions=False) == "fp32"
        torch.backends.cuda.matmul.allow_tf32 = True
        assert arithmetic("cuda", "fp32", convolutions=False) == "tf32"
    finally:
        torch.backends.cuda.matmul.allow_tf32 = matmul
        torch.backends.cudnn.allow_tf32 = conv


def test_the_peak_is_a_real_product_in_the_asked_dtype(monkeypatch: Any) -> None:
    import torch

    seen: list[torch.dtype] = []
    real = torch.Tensor.__matmul__

    def spy(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        seen.append(a.dtype)
        return real(a, b)

    monkeypatch.setattr(torch.Tensor, "__matmul__", spy)
    flops = matmul_peak_flops("cpu", threads=1, n=128, repeats=2, arithmetic="bf16")
    assert flops > 0 and seen and set(seen) == {torch.bfloat16}


def test_a_sweep_measures_each_peak_once_and_shares_it(tmp_path: Path,
                                                      monkeypatch: Any) -> None:
    calls: list[tuple[str, int | None, str]] = []

    def fake(device: str, threads: int | None = None, n: int | None = None, repeats: int = 5,
             arithmetic: str = "fp32") -> float:
        calls.append((device, threads, arithmetic))
        return 1e11 * len(calls)

    monkeypatch.setattr(peak_mod, "matmul_peak_flops", fake)
    monkeypatch.setenv(SWEEP_DIR_ENV, str(tmp_path))
    first = sweep_peak("cpu", "fp32", threads=2)
    again = sweep_peak("cpu", "fp32", threads=2, devices=1)
    other = sweep_peak("cpu", "fp32", threads=1)
    assert calls == [("cpu", 2, "fp32"), ("cpu", 1, "fp32")]
    assert first.flops == again.flops == 1e11 and other.flops == 2e11
    assert again.source == "this sweep" and first.threads == 2
    stored = json.loads((tmp_path / peak_mod.PEAKS_FILE).read_text())
    assert len(stored) == 2
    monkeypatch.delenv(SWEEP_DIR_ENV)
    alone = sweep_peak("cpu", "fp32", threads=2)
    assert alone.source == "this case" and len(calls) == 3  # outside a sweep: measured


def test_mfu_is_achieved_over_peak_times_devices() -> None:
    peak = Peak(flops=1e12, arithmetic="bf16", device="gpu", devices=4)
    assert mfu(flops_per_sample=2e9, samples_per_s=1000.0, peak=peak) == pytest.approx(0.5)
    assert mfu(flops_per_sample=None, samples_per_s=1000.0, peak=peak) is None
    assert mfu(flops_per_sample=2e9, samples_per_s=1000.0, peak=None) is None


@pytest.mark.slow
def test_a_run_records_the_peak_and_mfu_and_the_wide_table_shows_it(tmp_path: Path,
                                                                    monkeypatch: Any) -> None:
    from parabench.case.result import read_results
    from parabench.cli import main
    from parabench.sweep.table import format_table, summarize

    shared = tmp_path / "shared"  # a folder named for several runs: the cases write there
    shared.mkdir()
    monkeypatch.setenv(SWEEP_DIR_ENV, str(shared))
    out = tmp_path / "r.jsonl"
    code = main(["run", "--workload", "mlp", "--method", "serial", "--profile", "tiny",
                 "--epochs", "1", "--threads", "1", "--out", str(out)])
    assert code == 0
    (r,) = read_results(out)
    assert r.status == "ok" and r.machine is not None and r.machine.peak is not None
    p = r.machine.peak
    assert p.arithmetic == "fp32" and p.threads == 1 and p.flops > 1e8
    assert p.source == "this sweep"
    assert Peak.from_dict(next(iter(json.loads((shared / peak_mod.PEAKS_FILE).read_text())
                                    .values()))) == p
    # the figure is what its parts say, recomputed here from the JSON's own fields
    raw = json.loads(out.read_text().splitlines()[0])
    assert raw["mfu"] == pytest.approx(
        raw["flops_per_sample"] * raw["samples_per_s"] / raw["machine"]["peak"]["flops"])
    assert 0 < r.mfu < 1.5  # above the peak would mean a bad count or a bad peak
    wide = format_table(summarize([r]), wide=True)
    assert "MFU" in wide and f"{r.mfu:.1%} fp32" in wide
    compact = format_table(summarize([r])).splitlines()
    header = next(line for line in compact if line.startswith("method"))
    assert "MFU" not in header  # compact: --wide only, and it says so
    assert any("--wide shows" in line and "MFU" in line for line in compact)
