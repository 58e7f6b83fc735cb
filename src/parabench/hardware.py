"""What this machine can run: one probe per requirement a method or workload may declare.

Usage::

    from parabench.hardware import missing
    reason = missing({"torch", "cuda"})   # None when all present, else what to do about it

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

REQUIREMENTS = (
    "sklearn",
    "torch",
    "torchvision",
    "cuda",
    "multigpu",
    "mpi",
    "dask",
    "spark",
    "java",
    "tf",
    "numba",
    "xgboost",
    "lightgbm",
    "cuml",
)


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


_PROBES: dict[str, Callable[[], str | None]] = {
    "sklearn": lambda: _module("sklearn", "all"),
    "torch": lambda: _module("torch", "torch"),
    "torchvision": lambda: _module("torchvision", "torch"),
    "cuda": lambda: _cuda(1),
    "multigpu": lambda: _cuda(2),
    "mpi": _mpi,
    "dask": lambda: _module("distributed", "dask"),
    "spark": _spark,
    "java": _java,
    "tf": lambda: _module("tensorflow", "tf"),
    "numba": lambda: _module("numba", "numba"),
    "xgboost": lambda: _module("xgboost", "xgboost"),
    "lightgbm": lambda: _module("lightgbm", "lightgbm"),
    "cuml": _cuml,
}


@functools.cache
def probe(requirement: str) -> str | None:
    """None if ``requirement`` is met here, else a one-line reason saying what to do."""
    if requirement not in _PROBES:
        raise ValueError(f"unknown requirement {requirement!r}; valid: {', '.join(REQUIREMENTS)}")
    return _PROBES[requirement]()


def missing(requirements: Iterable[str]) -> str | None:
    """The reasons for every unmet requirement, joined; None when all are met."""
    reasons = [r for req in sorted(set(requirements)) if (r := probe(req)) is not None]
    return "; ".join(reasons) if reasons else None
