"""Training's GPU peak is training's: evaluation's batches (and the probes before the steps)
are counted apart. CUDA's peak counter is simulated here, so the bookkeeping runs without a
GPU; the GPU script checks the real figures (scripts/gpu_check.sh)."""

from __future__ import annotations

from typing import Any

import pytest

pytestmark = [pytest.mark.torch, pytest.mark.cpu]


class FakeAllocator:
    """torch.cuda's peak counter: ``allocate`` moves the current figure, the peak follows it,
    a reset brings the peak down to the current figure (as CUDA's does)."""

    def __init__(self) -> None:
        self.current = 0
        self.peak = 0

    def allocate(self, nbytes: int) -> None:
        self.current += nbytes
        self.peak = max(self.peak, self.current)

    def free(self, nbytes: int) -> None:
        self.current -= nbytes

    def max_memory_allocated(self, device: Any = None) -> int:
        return self.peak

    def reset_peak_memory_stats(self, device: Any = None) -> None:
        self.peak = self.current


def _case(monkeypatch: Any) -> tuple[Any, FakeAllocator]:
    import torch

    from parabench.config import RunConfig
    from parabench.registry import workloads
    from parabench.torch.build import TorchCase, TorchData

    fake = FakeAllocator()
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", fake.max_memory_allocated)
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", fake.reset_peak_memory_stats)
    x = torch.zeros(4, 3)
    data = TorchData(data=None, x=x, y=x, x_test=x, y_test=x)  # type: ignore[arg-type]
    case = TorchCase(workload=workloads.get("mlp"), config=RunConfig(workload="mlp",
                     method="serial", device="cpu"), devices=[torch.device("cuda", 0)],
                     data=data, model=torch.nn.Linear(3, 1), placed=torch.nn.Linear(3, 1),
                     batch_size=2, flops_per_sample=None)
    return case, fake


def test_evaluation_is_counted_apart_from_training(monkeypatch: Any) -> None:
    case, gpu = _case(monkeypatch)
    mb = 2**20
    gpu.allocate(50 * mb)        # data and model: before the steps
    gpu.allocate(700 * mb)       # the FLOP probe / auto batch search...
    gpu.free(700 * mb)
    case.reset_peaks()           # ...which are not training
    gpu.allocate(100 * mb)       # a training step's activations
    gpu.free(100 * mb)
    with case.evaluating():
        gpu.allocate(3000 * mb)  # 1024-sample evaluation batches
        gpu.free(3000 * mb)
    gpu.allocate(120 * mb)       # the next epoch's steps
    gpu.free(120 * mb)
    assert case.peak_gpu_mb() == pytest.approx(170)  # held 50 (not data) + the step 120
    assert case.gpu_memory_notes()["gpu_eval_peak_mb"] == pytest.approx(3050)


def test_data_kept_on_the_gpu_is_not_what_training_needs(monkeypatch: Any) -> None:
    case, gpu = _case(monkeypatch)
    mb = 2**20
    monkeypatch.setattr(type(case), "resident_bytes", lambda self, d: 400 * mb)
    gpu.allocate(400 * mb)  # the dataset, placed on the device before training
    case.reset_peaks()
    gpu.allocate(90 * mb)   # a step
    assert case.peak_gpu_mb() == pytest.approx(90)
    assert case.gpu_memory_notes()["gpu_data_mb"] == pytest.approx(400)


def test_without_an_evaluation_the_peak_is_the_steps(monkeypatch: Any) -> None:
    case, gpu = _case(monkeypatch)
    case.reset_peaks()
    gpu.allocate(2**20 * 64)
    assert case.peak_gpu_mb() == pytest.approx(64)
    assert "gpu_eval_peak_mb" not in case.gpu_memory_notes()


def test_a_cpu_case_has_no_gpu_figures() -> None:

    from parabench.case.execute import execute
    from parabench.config import RunConfig

    result = execute(RunConfig(workload="mlp", method="serial", profile="tiny", epochs=1,
                               threads_per_worker=1, windows=2))
    assert result.status == "ok" and result.peak_gpu_mb is None
    assert "gpu_eval_peak_mb" not in result.extra and "gpu_data_mb" not in result.extra
