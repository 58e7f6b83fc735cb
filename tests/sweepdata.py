"""Crafted results for report / compare / TensorBoard tests: realistic shape, known answers.

Usage::

    results = sweep(workloads=("cnn",), methods=("serial", "ddp"), workers=(1, 2, 4))
    write(tmp_path / "r.jsonl", results)

Epoch time follows Amdahl's law per method (``SERIAL_FRACTION``), with a deterministic
+-2 % wobble per epoch; ``slow`` multiplies every epoch time (a planted regression);
``broken`` makes a method fail parity.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Iterable, Sequence
from pathlib import Path

from parabench.case.result import QualityValue, Result, append_result

SAMPLES = 6000
SERIAL_S = 10.0
SERIAL_FRACTION = {"serial": 1.0, "ddp": 0.1, "fsdp": 0.15, "pipeline": 0.3, "fedavg": 0.05}
ENV = {"host": "testhost", "os": "Linux", "python": "3.11", "cpu": "Test CPU", "cores": 2,
       "ram_gb": 24.0, "torch": "2.x", "cuda": None, "gpus": []}


def epoch_time(method: str, workers: int) -> float:
    f = SERIAL_FRACTION.get(method, 0.2)
    overhead = 1.0 if method == "serial" else 1.1
    return SERIAL_S * overhead * (f + (1 - f) / workers)


def case(workload: str, method: str, workers: int, *, repeat: int = 0, epochs: int = 6,
         batch: int = 64, slow: float = 1.0, broken: bool = False, profile: str = "tiny",
         device: str = "cpu") -> Result:
    t = epoch_time(method, workers) * slow
    wobble = [1.0 + 0.02 * (((i * 7 + repeat * 3) % 5) - 2) / 2 for i in range(epochs)]
    epoch_s = [t * 2.5] + [t * w for w in wobble[1:]]
    median = statistics.median(epoch_s[1:])
    quality = 0.5 if broken else 0.95
    parity = ({"status": "not-applicable", "kind": "baseline", "reason": "this is the baseline"}
              if method == "serial" else
              {"status": "failed" if broken else "ok", "kind": "exact",
               "gap": quality - 0.95, "tolerance": 0.015, "baseline": "serial/cpu",
               "baseline_quality": 0.95})
    parts = {"data": 0.05, "forward": 0.3, "backward": 0.5, "optimizer": 0.05}
    if method != "serial":
        parts["communication"] = 0.1
    components = {k: [v * e for e in epoch_s] for k, v in parts.items()}
    return Result(
        workload=workload, method=method, device=device, workers=workers,
        threads_per_worker=max(1, 2 // workers), batch_size=batch, epochs=epochs,
        profile=profile, seed=0, repeat=repeat, status="ok", startup_s=1.5, epoch_s=epoch_s,
        eval_s=0.2, samples_per_epoch=SAMPLES, samples_per_s=SAMPLES / median,
        loss=[2.3 * 0.7**i + (0.9 if broken else 0.0) for i in range(epochs)],
        quality=QualityValue(name="accuracy", value=quality, higher_is_better=True),
        peak_rss_mb=400.0 + 350.0 * workers, components=components, parity=parity,
        config={"workload": workload, "method": method, "device": device, "workers": workers,
                "threads_per_worker": None, "batch_size": batch, "epochs": epochs,
                "profile": profile, "seed": 0, "repeat": repeat, "timeout_s": 600.0,
                "options": {}},
        env=ENV, git_commit="0123456789abcdef", timestamp="2026-11-23T00:00:00+00:00",
    )


def sweep(workloads: Sequence[str] = ("cnn",), methods: Sequence[str] = ("serial", "ddp"),
          workers: Sequence[int] = (1, 2), repeats: int = 1, **kw: object) -> list[Result]:
    out = []
    for w in workloads:
        for m in methods:
            for n in ((1,) if m == "serial" else workers):
                out += [case(w, m, n, repeat=r, **kw) for r in range(repeats)]
    return out


def skipped(workload: str, method: str, reason: str) -> Result:
    base = case(workload, method, 1)
    return dataclasses.replace(base, status="skipped", reason=reason, epoch_s=[], loss=[],
                               samples_per_s=None, quality=None, parity=None, components={},
                               peak_rss_mb=None)


def write(path: Path, results: Iterable[Result]) -> Path:
    for r in results:
        append_result(path, r)
    return path
