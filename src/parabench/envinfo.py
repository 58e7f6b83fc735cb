"""The system / runtime summary (``parabench env``) and the fingerprint stored in each result.

Usage::

    info = environment()          # full report: OS, CPU, RAM, disk, torch/CUDA, GPUs, engines
    fp = fingerprint()            # the short part that identifies the machine in a result
    print(format_environment(info))

Nothing here imports an optional engine that is not installed; versions of engines come from
package metadata, so ``parabench env`` is quick even with TensorFlow installed.
"""

from __future__ import annotations

import importlib.util
import os
import platform
import shutil
import subprocess
import sys
from functools import cache
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import psutil

from parabench import hardware
from parabench.config import available_cores

ENGINES = (
    "parabench", "numpy", "scikit-learn", "torch", "torchvision", "tensorflow", "dask",
    "distributed", "mpi4py", "mpich", "pyspark", "numba", "matplotlib", "psutil",
)
THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMEXPR_NUM_THREADS")


def _version(dist: str) -> str | None:
    try:
        return version(dist)
    except PackageNotFoundError:
        return None


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


@cache
def git_commit() -> str | None:
    """The project's commit: from the checkout this runs from (src layout: two levels up);
    else asv's ``ASV_COMMIT`` (set while asv benchmarks a commit); else the commit the build
    stamped into the installed package (``setup.py``: a non-editable ``pip install .``)."""
    root = Path(__file__).resolve().parents[2]
    if not (root / ".git").exists():
        stamp = Path(__file__).with_name("_commit.txt")
        text = stamp.read_text().strip() if stamp.is_file() else ""
        return os.environ.get("ASV_COMMIT") or text or None
    try:
        out = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"],
            capture_output=True, text=True, timeout=10,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def torch_info() -> dict[str, Any]:
    if importlib.util.find_spec("torch") is None:
        return {"installed": False}
    import torch

    info: dict[str, Any] = {
        "installed": True,
        "version": torch.__version__,
        "cuda_build": torch.version.cuda,
        "cuda_available": torch.cuda.is_available(),
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "threads": torch.get_num_threads(),
        "interop_threads": torch.get_num_interop_threads(),
        "gpus": [],
    }
    for i in range(hardware.cuda_device_count()):
        props = torch.cuda.get_device_properties(i)
        info["gpus"].append({"name": props.name, "memory_mb": round(props.total_memory / 2**20)})
    return info


def fingerprint() -> dict[str, Any]:
    """What identifies the machine and software a result was measured on."""
    mem = psutil.virtual_memory()
    torch = torch_info()
    return {
        "host": platform.node(),
        "os": platform.platform(),
        "python": platform.python_version(),
        "cpu": cpu_model(),
        "cores": available_cores(),
        "ram_gb": round(mem.total / 2**30, 1),
        "torch": torch.get("version"),
        "cuda": torch.get("cuda_build") if torch.get("cuda_available") else None,
        "gpus": [g["name"] for g in torch.get("gpus", [])],
        "parabench": _version("parabench"),
    }


def environment() -> dict[str, Any]:
    """The full system / runtime summary."""
    mem = psutil.virtual_memory()
    disk = shutil.disk_usage("/")
    freq = psutil.cpu_freq()
    return {
        "python": {"version": platform.python_version(), "executable": sys.executable},
        "os": platform.platform(),
        "machine": platform.machine(),
        "cpu": {
            "model": cpu_model(),
            "logical_cores": os.cpu_count(),
            "usable_cores": available_cores(),
            "physical_cores": psutil.cpu_count(logical=False),
            "freq_mhz": round(freq.current) if freq else None,
        },
        "ram_gb": {
            "total": round(mem.total / 2**30, 2),
            "available": round(mem.available / 2**30, 2),
        },
        "disk_gb": {"total": round(disk.total / 2**30, 1), "free": round(disk.free / 2**30, 1)},
        "torch": torch_info(),
        "mpi": {"launcher": hardware.mpi_launcher(), "library": _mpi_library()},
        "java": hardware.java_version(),
        "engines": {name: _version(name) for name in ENGINES},
        # OMP_WAIT_POLICY too: busy-waiting OpenMP threads on a shared machine can slow a
        # torch case by 10x, so results must say which policy they ran under
        "threads": {var: os.environ.get(var) for var in (*THREAD_VARS, "OMP_WAIT_POLICY")},
        "git_commit": git_commit(),
    }


def _mpi_library() -> str | None:
    if importlib.util.find_spec("mpi4py") is None:
        return None
    try:
        from mpi4py import MPI

        return MPI.Get_library_version().strip().splitlines()[0]
    except Exception as exc:  # a broken MPI install is worth reporting, not crashing on
        return f"mpi4py present but MPI failed to load: {exc}"


def format_environment(info: dict[str, Any], indent: str = "") -> str:
    """Nested dict -> aligned ``key: value`` lines, the way seed 004's summary printed."""
    lines: list[str] = []
    width = max((len(k) for k in info), default=0)
    for key, value in info.items():
        if isinstance(value, dict):
            lines.append(f"{indent}{key}:")
            lines.append(format_environment(value, indent + "  "))
        elif isinstance(value, list):
            shown = ", ".join(str(v) for v in value) if value else "none"
            lines.append(f"{indent}{key:<{width}}  {shown}")
        else:
            lines.append(f"{indent}{key:<{width}}  {'-' if value is None else value}")
    return "\n".join(lines)
