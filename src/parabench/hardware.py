"""What this machine can run: one probe per requirement a method or workload may declare.

Usage::

    from parabench.hardware import missing
    reason = missing({"torch", "cuda"})   # None when all present, else what to do about it
    markers()                              # {"cuda": "cuda", ...}: pytest marker -> requirement

Probes are cached for the life of the process and never import a heavy library unless it is
installed (``importlib.util.find_spec`` first). The CUDA probe asks torch, so it costs a torch
import; everything else is cheap.
"""

from __future__ import annotations

import functools
import importlib.util
import shutil
import subprocess
from collections.abc import Callable, Iterable
from dataclasses import dataclass


def _module(name: str, extra: str) -> str | None:
    if importlib.util.find_spec(name) is None:
        return f"{name} is not installed; pip install 'parabench[{extra}]'"
    return None


@functools.cache
def cuda_device_count() -> int:
    if importlib.util.find_spec("torch") is None:
        return 0
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def _cuda(minimum: int) -> str | None:
    if (reason := _module("torch", "torch")) is not None:
        return reason
    found = cuda_device_count()
    if found < minimum:
        return f"needs {minimum} CUDA GPU(s), found {found}; run on a machine with a GPU"
    return None


@functools.cache
def mpi_launcher() -> str | None:
    """Path of mpiexec (or mpirun): on PATH, or shipped beside this Python by the mpich wheel."""
    import sys
    from pathlib import Path

    for name in ("mpiexec", "mpirun"):
        local = Path(sys.executable).parent / name
        if local.exists():
            return str(local)
        if found := shutil.which(name):
            return found
    return None


def _mpi() -> str | None:
    if (reason := _module("mpi4py", "mpi")) is not None:
        return reason
    if mpi_launcher() is None:
        return "no MPI launcher (mpiexec) found; pip install 'parabench[mpi]' or install MPICH"
    return None


@functools.cache
def java_version() -> str | None:
    java = shutil.which("java")
    if java is None:
        return None
    try:
        proc = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = (proc.stderr or proc.stdout).strip().splitlines()
    return lines[0] if lines else None


def _java() -> str | None:
    if java_version() is None:
        return "no Java runtime found; install OpenJDK 17 (apt-get install openjdk-17-jre-headless)"
    return None


def _spark() -> str | None:
    return _module("pyspark", "spark") or _java()


def _cuml() -> str | None:
    # RAPIDS publishes cuML per CUDA major version, so there is no one extra to name
    if importlib.util.find_spec("cuml") is None:
        return ("cuml is not installed; pip install cuml-cu13 (or cuml-cu12, matching the "
                "CUDA major version; Linux with an NVIDIA GPU)")
    return None


@dataclass(frozen=True, kw_only=True)
class Requirement:
    """Something a method or workload may need, how to probe it, and its pytest marker."""

    probe: Callable[[], str | None]
    #: the pytest marker of tests (and benchmark cases) that need it; None: no marker
    marker: str | None = None
    #: the marker's help text (``pytest --markers``)
    help: str = ""


#: THE requirements table: probes, pytest markers (registered by the root conftest.py, which
#: also skips a marked test whose requirement is missing) and benchmark case markers all
#: derive from it
REQUIREMENTS: dict[str, Requirement] = {
    "sklearn": Requirement(probe=lambda: _module("sklearn", "all")),
    "torch": Requirement(probe=lambda: _module("torch", "torch"), marker="torch",
                         help="needs PyTorch"),
    "torchvision": Requirement(probe=lambda: _module("torchvision", "torch")),
    "cuda": Requirement(probe=lambda: _cuda(1), marker="cuda",
                        help="needs at least one CUDA GPU"),
    "multigpu": Requirement(probe=lambda: _cuda(2), marker="multigpu",
                            help="needs at least two CUDA GPUs"),
    "mpi": Requirement(probe=_mpi, marker="mpi",
                       help="needs an MPI launcher (mpiexec) and mpi4py"),
    "dask": Requirement(probe=lambda: _module("distributed", "dask"), marker="dask",
                        help="needs dask.distributed"),
    "spark": Requirement(probe=_spark, marker="spark", help="needs pyspark and a Java runtime"),
    "java": Requirement(probe=_java),
    "tf": Requirement(probe=lambda: _module("tensorflow", "tf"), marker="tf",
                      help="needs TensorFlow"),
    "numba": Requirement(probe=lambda: _module("numba", "numba"), marker="numba",
                         help="needs numba"),
    "xgboost": Requirement(probe=lambda: _module("xgboost", "xgboost"), marker="xgboost",
                           help="needs xgboost"),
    "lightgbm": Requirement(probe=lambda: _module("lightgbm", "lightgbm"), marker="lightgbm",
                            help="needs lightgbm"),
    "cuml": Requirement(probe=_cuml, marker="cuml", help="needs RAPIDS cuML"),
}


def markers() -> dict[str, str]:
    """pytest marker -> the requirement it stands for (every requirement that has one)."""
    return {r.marker: name for name, r in REQUIREMENTS.items() if r.marker is not None}


def marker_lines() -> list[str]:
    """The markers as pytest's ``markers`` ini lines ("name: help")."""
    return [f"{r.marker}: {r.help}" for r in REQUIREMENTS.values() if r.marker is not None]


@functools.cache
def probe(requirement: str) -> str | None:
    """None if ``requirement`` is met here, else a one-line reason saying what to do."""
    if requirement not in REQUIREMENTS:
        raise ValueError(f"unknown requirement {requirement!r}; valid: {', '.join(REQUIREMENTS)}")
    return REQUIREMENTS[requirement].probe()


def missing(requirements: Iterable[str]) -> str | None:
    """The reasons for every unmet requirement, joined; None when all are met."""
    reasons = [r for req in sorted(set(requirements)) if (r := probe(req)) is not None]
    return "; ".join(reasons) if reasons else None
