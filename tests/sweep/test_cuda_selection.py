"""The cuda selection: what ``pytest -m cuda --benchmark-only`` measures by default.

    pytest tests/sweep/test_cuda_selection.py

One case per method family, every one on cuda, at a GPU-meaningful size, within 10 minutes on
one H200 by the estimator (:func:`parabench.sweep.bench.selection_estimate_s`); asking for
every cuda case keeps them all; smoke mode keeps what it kept. The cases are planned for a
16-core GPU machine (``bench_cases(cores=16)``), the one the budget is for.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from parabench.registry import workloads
from parabench.sweep.bench import (
    GPU_PRECISION,
    bench_cases,
    cuda_selection,
    kept_cases,
    method_family,
    selection_estimate_s,
    smoke_cases,
)
from parabench.sweep.plan import BenchCase

pytestmark = [pytest.mark.cpu, pytest.mark.torch]
ROOT = Path(__file__).resolve().parents[2]
BUDGET_S = 600.0
GPU_CORES = 16
#: what `pip install -e ".[torch,test]"` (the GPU workflow) brings, by requirement name
CI_GPU_ENGINES = {"torch", "torchvision", "sklearn"}


def _shipped(cases: list[BenchCase]) -> list[BenchCase]:
    """parabench's own cases: not those of the plugins other tests of this session registered
    (a fresh pytest process, or a GPU runner, does not have them)."""
    from parabench.registry import methods, workloads

    return [c for c in cases
            if type(methods.get(c.method)).__module__.startswith("parabench.")
            and type(workloads.get(c.workload)).__module__.startswith("parabench.")]


@pytest.fixture(scope="module")
def cases() -> list[BenchCase]:
    return _shipped(bench_cases(cores=GPU_CORES))


@pytest.fixture(scope="module")
def picked(cases: list[BenchCase]) -> dict:
    return cuda_selection(cases)


def _by_id(cases: list[BenchCase]) -> dict[str, BenchCase]:
    return {c.id: c for c in cases}


def test_the_selection_has_one_cuda_case_per_method_family(cases, picked) -> None:
    chosen = [_by_id(cases)[i] for i in picked]
    assert all(c.device == "cuda" for c in chosen)
    families = [method_family(c.method) for c in chosen]
    assert sorted(families) == sorted({method_family(c.method) for c in cases
                                       if c.device == "cuda"})
    assert len(families) == len(set(families)), families
    for name in ("serial", "ddp", "fsdp", "fedavg", "pipeline", "model_parallel", "tp",
                 "hybrid"):  # the families the issue names, each once
        assert sum(c.method == name for c in chosen) == 1, name


def test_the_forest_kernel_under_several_schedulers_is_one_family(picked) -> None:
    torch_kernel = {"rf_torch", "rf_threads+torch", "rf_torch+dask", "rf_dask+threads+torch"}
    assert len({method_family(m) for m in torch_kernel}) == 1
    assert [i for i in picked if i.split("-")[1] in torch_kernel] == [
        "random_forest-rf_torch-cuda-w1"]  # the one quickest to start


def test_selected_cases_train_gpu_sized_workloads_on_one_gpu(cases, picked) -> None:
    transformer = "gpt2" if "gpt2" in workloads else "gpt"  # gpt stands in until gpt2 is
    for method in ("serial", "ddp", "fsdp", "fedavg", "pipeline"):
        run = picked[f"vgg11-{method}-cuda-w1"]
        assert run.profile == "full" and dict(run.options) == {"precision": GPU_PRECISION}
    run = picked[f"{transformer}-tp-cuda-w1"]
    assert run.profile == "full" and run.options["precision"] == GPU_PRECISION
    # methods that need more than one GPU keep their fewest workers, marked multigpu
    assert picked.get("vgg11-hybrid-cuda-w2") and picked.get(f"{transformer}-fsdp_tp-cuda-w2")
    multi = [i for i in picked if "multigpu" in _by_id(cases)[i].markers]
    assert all(_by_id(cases)[i].workers > 1 for i in multi)


def test_tensorflow_cases_take_no_torch_option_and_epoch_windows_no_warmup_epoch(
        picked) -> None:
    run = picked["cnn-tf_serial-cuda-w1"]
    assert dict(run.options) == {} and run.warmup_epochs == 0  # a window is one epoch
    assert picked["random_forest-rf_numba-cuda-w1"].warmup_epochs == 0  # a window is one fit
    assert picked["vgg11-ddp-cuda-w1"].warmup_epochs == 1  # its steps are calibrated from it


def test_the_selection_fits_ten_minutes_on_one_h200(cases, picked) -> None:
    every_engine = selection_estimate_s(cases, picked)  # the upper bound
    ci_job = selection_estimate_s(cases, picked, engines=CI_GPU_ENGINES)
    assert sum(every_engine.values()) <= BUDGET_S, every_engine
    assert 0 < sum(ci_job.values()) < sum(every_engine.values())
    assert every_engine["vgg11-hybrid-cuda-w2"] == 0.0  # needs two GPUs: skips on one
    assert every_engine["vgg11-model_parallel-cuda-w1"] == 0.0  # two stages, two GPUs
    assert ci_job["cnn-tf_serial-cuda-w1"] == 0.0  # no TensorFlow in that job
    assert sum(selection_estimate_s(cases, picked, gpus=4).values()) > sum(
        every_engine.values())  # more GPUs: the multigpu cases run too


def test_measuring_keeps_every_cpu_case_and_the_selection(cases, picked) -> None:
    kept = kept_cases(cases, smoke=False)
    assert {i for i, c in _by_id(cases).items() if c.device == "cpu"} <= set(kept)
    assert {i for i in kept if _by_id(cases)[i].device == "cuda"} == set(picked)
    assert all(kept[i] == picked[i] for i in picked)


def test_every_cuda_case_is_kept_when_asked(cases) -> None:
    kept = kept_cases(cases, smoke=False, every_cuda=True)
    assert set(kept) == {c.id for c in cases}
    assert all(run is None for run in kept.values())  # at the session's profile, as before


def test_smoke_mode_is_unchanged(cases) -> None:
    kept = kept_cases(cases, smoke=True)
    assert list(kept) == [c.id for c in smoke_cases(cases)]
    assert all(run is None for run in kept.values())


@pytest.mark.slow
def test_pytest_collects_the_selection_and_every_case_when_asked() -> None:
    """The wiring in tests/benchmarks/conftest.py, on this machine's planned cases."""
    def collected(*args: str, **env: str) -> set[str]:
        out = subprocess.run(
            [sys.executable, "-m", "pytest", "-m", "cuda", "--benchmark-only", "--co", "-q",
             "-p", "no:cacheprovider", "tests/benchmarks/test_methods.py", *args],
            cwd=ROOT, capture_output=True, text=True, timeout=300,
            env={**os.environ, "PARABENCH_BENCH_ALL": "", "PARABENCH_WORKLOADS": "",
                 "PARABENCH_METHODS": "", **env})
        assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
        return {line.split("[", 1)[1].rstrip("]") for line in out.stdout.splitlines()
                if line.startswith("tests/benchmarks/test_methods.py::")}

    here = _shipped(bench_cases())
    assert collected() == set(cuda_selection(here))
    every = {c.id for c in here if c.device == "cuda"}
    assert collected("--cuda-all") == every
    assert collected(PARABENCH_BENCH_ALL="1") == every
