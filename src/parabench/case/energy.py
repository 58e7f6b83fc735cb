"""Energy counters read around each training epoch: CPU packages (RAPL) and GPUs (NVML).

Usage::

    meter = open_meter(config)          # probes every source once; never raises
    before = meter.read()
    stats = session.train_epoch(epoch)  # the session's own clock; the reads stay outside it
    meter.add_epoch(before, meter.read())
    meter.summary(samples_per_epoch)    # the result's ``energy`` field
    meter.close()

Sources, each used only when it can really be read (nothing is ever estimated):

* ``rapl``: the package domains ``/sys/class/powercap/intel-rapl:N`` (``name`` =
  ``package-N``; their ``intel-rapl:N:M`` sub-domains are parts of the package and would be
  counted twice). ``energy_uj`` is a microjoule counter that wraps at
  ``max_energy_range_uj``; a delta that went backwards wrapped once. Since Linux 5.10 the
  file is readable by root only. A package counts the whole socket: other processes' work
  on a shared machine is in it too.
* ``nvml``: ``nvmlDeviceGetTotalEnergyConsumption`` (millijoules since the driver loaded,
  Volta or newer) summed over the GPUs a CUDA case uses, ``cuda:0 .. k-1`` with ``k`` the
  larger of workers and ``--stages`` (at most the GPUs present), mapped through
  ``CUDA_VISIBLE_DEVICES``. Needs ``pip install 'parabench[energy]'`` and an NVIDIA driver.

When no source is readable, the summary holds ``null`` joules and the reason for each.
"""

from __future__ import annotations

import os
import statistics
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Protocol

from parabench.config import RunConfig

POWERCAP = Path("/sys/class/powercap")


class Source(Protocol):
    name: str
    domains: list[str]

    def read(self) -> list[int]: ...

    def joules(self, before: list[int], after: list[int]) -> float: ...

    def close(self) -> None: ...


@dataclass(frozen=True, kw_only=True)
class RaplDomain:
    label: str
    energy_file: Path
    max_range_uj: int


class RaplSource:
    """CPU package energy from the powercap sysfs tree."""

    name = "rapl"

    def __init__(self, domains: list[RaplDomain]) -> None:
        self._domains = domains
        self.domains = [d.label for d in domains]

    def read(self) -> list[int]:
        return [int(d.energy_file.read_text()) for d in self._domains]

    def joules(self, before: list[int], after: list[int]) -> float:
        total_uj = 0
        for domain, b, a in zip(self._domains, before, after, strict=True):
            # the counter restarts at 0 after max_energy_range_uj: one wrap per epoch at most
            total_uj += a - b if a >= b else a + domain.max_range_uj - b
        return total_uj / 1e6

    def close(self) -> None:
        pass


def open_rapl(root: Path = POWERCAP) -> tuple[RaplSource | None, str]:
    """The readable package domains under ``root``, or None and why there are none."""
    if not root.is_dir():
        return None, f"no {root} (no powercap/RAPL driver here)"
    domains, problems = [], []
    for path in sorted(root.glob("intel-rapl:*")):
        if path.name.count(":") != 1:  # intel-rapl:0:0 (core, uncore, dram) is inside :0
            continue
        try:
            label = (path / "name").read_text().strip()
            if not label.startswith("package"):
                continue
            max_range = int((path / "max_energy_range_uj").read_text())
            energy = path / "energy_uj"
            int(energy.read_text())
        except (OSError, ValueError) as exc:
            problems.append(f"{path.name}: {type(exc).__name__}")
            continue
        domains.append(RaplDomain(label=f"{path.name} {label}", energy_file=energy,
                                  max_range_uj=max_range))
    if domains:
        return RaplSource(domains), ""
    if problems:
        return None, f"RAPL package domains not readable ({'; '.join(problems)}; root only)"
    return None, f"no readable RAPL package domain under {root}"


class NvmlSource:
    """Total energy of the case's GPUs from NVML."""

    name = "nvml"

    def __init__(self, nvml: ModuleType, indices: list[int]) -> None:
        self._nvml = nvml
        self._handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in indices]
        self.domains = [f"gpu {i}" for i in indices]

    def read(self) -> list[int]:
        return [int(self._nvml.nvmlDeviceGetTotalEnergyConsumption(h)) for h in self._handles]

    def joules(self, before: list[int], after: list[int]) -> float:
        return sum(a - b for b, a in zip(before, after, strict=True)) / 1e3  # millijoules

    def close(self) -> None:
        self._nvml.nvmlShutdown()


def gpu_indices(config: RunConfig, gpus: int) -> list[int]:
    """NVML indices of the GPUs ``config`` trains on (cuda:0..k-1 through the visible list)."""
    if config.device != "cuda" or gpus < 1:
        return []
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    order = list(range(gpus))
    if visible is not None and all(p.strip().isdigit() for p in visible.split(",")):
        order = [int(p) for p in visible.split(",")]
    # the stages given, not a method's declared default: as before the options were declared
    used = min(max(config.workers, config.options.get("stages") or 1), len(order))
    return order[:used]


def open_nvml(config: RunConfig, nvml: ModuleType | None = None) -> tuple[NvmlSource | None, str]:
    """An NVML source over the case's GPUs, or None and why not."""
    if config.device != "cuda":
        return None, "no GPU in this case (device cpu)"
    if nvml is None:
        try:
            import pynvml as nvml
        except ImportError:
            return None, "no NVML bindings (pip install 'parabench[energy]')"
    try:
        nvml.nvmlInit()
    except Exception as exc:  # noqa: BLE001 - NVMLError subclasses are made at run time
        return None, f"no NVML ({exc}; is an NVIDIA driver loaded?)"
    try:
        source = NvmlSource(nvml, gpu_indices(config, nvml.nvmlDeviceGetCount()))
        if not source.domains:
            raise RuntimeError("no GPU visible")
        source.read()  # NotSupported before Volta: find out now, not in epoch 1
    except Exception as exc:  # noqa: BLE001
        nvml.nvmlShutdown()
        return None, f"NVML energy not readable ({exc})"
    return source, ""


class EnergyMeter:
    """The readable sources of one case and the joules each epoch took."""

    def __init__(self, sources: list[Source], reasons: list[str]) -> None:
        self.sources = sources
        self.reasons = reasons
        self.epochs: list[dict[str, float] | None] = []
        #: the last epoch was cut short (time to target stopped it between its parts)
        self.cut_short = False

    def read(self) -> list[list[int]] | None:
        try:
            return [s.read() for s in self.sources]
        except (OSError, ValueError) as exc:  # a counter that stopped being readable
            self.reasons.append(f"read failed: {type(exc).__name__}: {exc}")
            return None

    def add_epoch(self, before: list[list[int]] | None, after: list[list[int]] | None,
                  part: int = 0) -> None:
        """The joules between two reads; ``part`` > 0: a later part of the epoch added last
        (time-to-target mode reads around each part, leaving its evaluations out)."""
        if not self.sources:
            return
        joules = None if before is None or after is None else {
            s.name: s.joules(b, a) for s, b, a in zip(self.sources, before, after, strict=True)}
        if part and self.epochs:
            last = self.epochs[-1]
            self.epochs[-1] = (None if last is None or joules is None
                               else {name: last[name] + joules[name] for name in last})
            return
        self.epochs.append(joules)

    def summary(self, samples_per_epoch: int | None) -> dict[str, Any]:
        """Joules per epoch (all sources summed) and per sample over the steady epochs."""
        reason = "; ".join(self.reasons)
        if not self.sources:
            return {"source": None, "joules_per_epoch": None, "joules_per_sample": None,
                    "reason": reason}
        per_epoch = [None if e is None else sum(e.values()) for e in self.epochs]
        whole = per_epoch[:-1] if self.cut_short and len(per_epoch) > 1 else per_epoch
        steady = whole[1:] if len(whole) > 1 else whole  # warm-up dropped
        known = [j for j in steady if j is not None]
        per_sample = (statistics.median(known) / samples_per_epoch
                      if known and samples_per_epoch else None)
        return {
            "source": "+".join(s.name for s in self.sources),
            "domains": [d for s in self.sources for d in s.domains],
            "joules_per_epoch": per_epoch,
            "by_source": {s.name: [None if e is None else e[s.name] for e in self.epochs]
                          for s in self.sources},
            "joules_per_sample": per_sample,
            "reason": reason,
        }

    def close(self) -> None:
        for source in self.sources:
            try:
                source.close()
            except Exception:  # noqa: BLE001 - shutting a counter down must not fail a case
                pass


def open_meter(config: RunConfig, root: Path = POWERCAP,
               nvml: ModuleType | None = None) -> EnergyMeter:
    """Every source readable for ``config`` here, with the reasons for those that are not."""
    sources: list[Source] = []
    reasons = []
    for source, reason in (open_rapl(root), open_nvml(config, nvml)):
        if source is not None:
            sources.append(source)
        else:
            reasons.append(reason)
    return EnergyMeter(sources, reasons)
