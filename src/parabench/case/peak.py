"""The measured matmul peak of a device in an arithmetic: the denominator of MFU.

Usage::

    peak = matmul_peak_flops("cpu", threads=2)                 # FLOP/s, fp32
    peak = matmul_peak_flops("cpu", threads=2, n=256, arithmetic="bf16")  # "cuda" on a GPU
    record = sweep_peak("cpu", "fp32", threads=2, devices=1)   # a Peak record: measured once
                                                               #   per sweep, then read
    mfu(flops_per_sample=3e9, samples_per_s=20.0, peak=record)  # achieved / (peak x devices)
    arithmetic("cuda", "fp32", convolutions=True)              # "tf32" where torch allows it
    case_peak(RunConfig(workload="cnn", method="ddp", workers=2))  # a case's, from its config

The peak is *measured*, not read from a datasheet: the best of ``repeats`` timed square
matmuls (2·n³ FLOPs each) in the case's arithmetic, at the thread count the case used, after
a warm-up, with a CUDA synchronise before every clock read (a GPU times ``inner`` products
between two reads, so launch gaps do not count). A training step can approach it only where
its work is large matmuls or convolutions; small layers, element-wise ops and data movement
keep real MFU well below 1.

**The arithmetic** of a row is the one its matmuls and convolutions run in: ``bf16`` /
``fp16`` under autocast; on CUDA in fp32, ``tf32`` where torch allows TF32 for the ops the
model has (cuDNN convolutions allow it by default, matmuls only when
``torch.backends.cuda.matmul.allow_tf32`` or a ``float32_matmul_precision`` below "highest"
says so), else ``fp32``. A TF32 peak is measured with TF32 enabled for the product alone.
Dividing a bf16 row by the fp32 peak would read over 100 %; dividing an fp32 row by the bf16
peak would hide a fast fp32 run: each row is held to the peak of its own arithmetic.

**Once per sweep**: the cases of one ``parabench run`` share the sweep's folder
(:func:`parabench.core.tempdirs.sweep_dir`); the first case that needs a (device, arithmetic,
threads) peak measures it and writes it there, the others read it (``source`` says which).
Outside a sweep each case measures its own.
"""

from __future__ import annotations

import json
import os
from typing import Any

from parabench.config import RunConfig, available_cores
from parabench.core.clock import Clock
from parabench.core.records import Peak
from parabench.core.tempdirs import sweep_dir
from parabench.envinfo import cpu_model
from parabench.registry import workloads

#: the torch dtype name of each arithmetic's operands
DTYPES = {"fp32": "float32", "tf32": "float32", "bf16": "bfloat16", "fp16": "float16"}
#: square matmul size: a GPU needs a bigger problem than a CPU to reach its peak
SIZES = {"cpu": 1024, "cuda": 8192}
PEAKS_FILE = "peaks.json"


def matmul_peak_flops(device: str = "cpu", threads: int | None = None, n: int | None = None,
                      repeats: int = 5, arithmetic: str = "fp32") -> float:
    """FLOP/s of the best of ``repeats`` timed ``n`` x ``n`` products (see the module doc)."""
    import torch

    previous = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    tf32 = torch.backends.cuda.matmul.allow_tf32
    try:
        dev = torch.device("cuda:0" if device == "cuda" else "cpu")
        n = n or SIZES[dev.type]
        inner = 10 if dev.type == "cuda" else 1
        dtype = getattr(torch, DTYPES[arithmetic])
        if dev.type == "cuda":
            torch.backends.cuda.matmul.allow_tf32 = arithmetic == "tf32"
        gen = torch.Generator(device=dev).manual_seed(0)
        a = torch.randn(n, n, device=dev, generator=gen).to(dtype)
        b = torch.randn(n, n, device=dev, generator=gen).to(dtype)

        def sync() -> None:
            if dev.type == "cuda":
                torch.cuda.synchronize(dev)

        def products() -> None:
            for _ in range(inner):
                a @ b

        products()  # warm-up: thread pool, kernels, caches, clocks
        clock = Clock(sync=sync)  # sync; t0; products; sync; t1
        best = min(clock.time(products)[1] for _ in range(repeats))
        return 2 * n**3 * inner / best
    finally:
        torch.set_num_threads(previous)
        torch.backends.cuda.matmul.allow_tf32 = tf32


def arithmetic(device: str, precision: str, *, convolutions: bool, matmuls: bool = True
               ) -> str:
    """The arithmetic a case's matmuls and convolutions run in (see the module doc)."""
    if precision in ("bf16", "fp16"):
        return precision
    if device != "cuda":
        return "fp32"
    import torch

    matmul_tf32 = (torch.backends.cuda.matmul.allow_tf32
                   or torch.get_float32_matmul_precision() != "highest")
    conv_tf32 = torch.backends.cudnn.allow_tf32
    tf32 = (convolutions and conv_tf32) or (matmuls and matmul_tf32)
    return "tf32" if tf32 else "fp32"


def device_name(device: str) -> str:
    """The device's model: the GPU's name, else the CPU's (``platform``'s best guess)."""
    if device == "cuda":
        import torch

        return torch.cuda.get_device_name(0)
    return cpu_model()


def _key(name: str, arith: str, threads: int | None) -> str:
    return f"{name}|{arith}|{threads}"


def _read(path: os.PathLike[str]) -> dict[str, Any]:
    try:
        with open(path) as f:
            data = json.load(f)
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def sweep_peak(device: str, arith: str, *, threads: int | None, devices: int = 1) -> Peak:
    """The peak for (device, arithmetic, threads): the sweep's, measured here if it has none
    yet (and written for the sweep's other cases, atomically); outside a sweep, measured."""
    import dataclasses

    name = device_name(device)
    threads = threads if device == "cpu" else None
    folder = sweep_dir()
    key = _key(name, arith, threads)
    if folder is not None and isinstance(known := _read(folder / PEAKS_FILE).get(key), dict):
        found = Peak.from_dict(known)
        if found is not None:
            return dataclasses.replace(found, devices=devices, source="this sweep")
    n = SIZES["cuda" if device == "cuda" else "cpu"]
    peak = Peak(flops=matmul_peak_flops(device, threads=threads, n=n, arithmetic=arith),
                arithmetic=arith, device=name, devices=devices, threads=threads, n=n,
                source="this sweep" if folder is not None else "this case",
                load_1m=round(os.getloadavg()[0], 2))
    if folder is not None:
        table = {**_read(folder / PEAKS_FILE), key: peak.to_dict()}
        tmp = folder / f"{PEAKS_FILE}.{os.getpid()}.tmp"
        tmp.write_text(json.dumps(table))
        tmp.replace(folder / PEAKS_FILE)
    return peak


def case_peak(config: RunConfig, *, threads_per_worker: int | None = None,
              gpus: int | None = None) -> Peak:
    """The peak a case's MFU is against: its device, its arithmetic (the convolutional
    workloads are those that declare ``channels_last``), the cores it used (CPU) or its GPUs
    (``gpus``, default one per worker); :func:`sweep_peak` measures or reads it."""
    workload = workloads.get(config.workload)
    try:
        precision = config.option("precision")
    except KeyError:  # a method that declares no precision trains in fp32
        precision = "fp32"
    arith = arithmetic(config.device, precision,
                       convolutions="channels_last" in workload.options)
    threads = min(available_cores(), config.workers * (threads_per_worker or config.threads))
    return sweep_peak(config.device, arith, threads=threads,
                      devices=(gpus or config.workers) if config.device == "cuda" else 1)


def mfu(*, flops_per_sample: float | None, samples_per_s: float | None,
        peak: Peak | None) -> float | None:
    """Model FLOPs utilisation: FLOPs per sample x samples/s over the peak x devices."""
    if not flops_per_sample or not samples_per_s or peak is None or peak.flops <= 0:
        return None
    return flops_per_sample * samples_per_s / (peak.flops * max(1, peak.devices))
