"""Energy readers on a fake powercap tree and a mocked NVML; the meter around real epochs."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any, ClassVar

import pytest

from parabench.case import execute as execute_mod
from parabench.case.energy import gpu_indices, open_meter, open_nvml, open_rapl
from parabench.config import RunConfig
from parabench.method import EpochStats, Method, Session
from parabench.workload import Dataset, Quality, Workload

pytestmark = pytest.mark.cpu

MAX_RANGE = 262_143_328_850  # a real package's max_energy_range_uj


def domain(root: Path, name: str, label: str, energy_uj: int,
           max_range: int = MAX_RANGE) -> Path:
    path = root / name
    path.mkdir(parents=True)
    (path / "name").write_text(label + "\n")
    (path / "energy_uj").write_text(f"{energy_uj}\n")
    (path / "max_energy_range_uj").write_text(f"{max_range}\n")
    return path


@pytest.fixture
def powercap(tmp_path: Path) -> Path:
    """Two packages, their sub-domains, a psys domain and the control-type directory."""
    root = tmp_path / "powercap"
    (root / "intel-rapl").mkdir(parents=True)  # the control type, not a domain
    domain(root, "intel-rapl:0", "package-0", 5_000_000)
    domain(root, "intel-rapl:0:0", "core", 4_000_000)  # inside package 0: never added
    domain(root, "intel-rapl:1", "package-1", MAX_RANGE - 1_000_000)  # about to wrap
    domain(root, "intel-rapl:2", "psys", 9_000_000)  # platform, not a package
    return root


def set_energy(root: Path, name: str, value: int) -> None:
    (root / name / "energy_uj").write_text(f"{value}\n")


def test_rapl_sums_package_domains_only_and_survives_wrap_around(powercap: Path) -> None:
    source, reason = open_rapl(powercap)
    assert source is not None and reason == ""
    assert source.domains == ["intel-rapl:0 package-0", "intel-rapl:1 package-1"]
    before = source.read()
    set_energy(powercap, "intel-rapl:0", 5_000_000 + 2_500_000)  # +2.5 J
    set_energy(powercap, "intel-rapl:0:0", 9_999_999_999)  # a sub-domain: ignored
    set_energy(powercap, "intel-rapl:1", 500_000)  # wrapped: 1.0 J to the top, then 0.5 J
    assert source.joules(before, source.read()) == pytest.approx(2.5 + 1.0 + 0.5)


def test_an_unreadable_package_is_left_out_with_the_reason(
    powercap: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    real_read = Path.read_text
    locked = {powercap / "intel-rapl:1" / "energy_uj"}

    def read_text(self: Path, *args: Any, **kwargs: Any) -> str:
        if self in locked:  # root reads anything, so a chmod could not show this
            raise PermissionError(13, "Permission denied", str(self))
        return real_read(self, *args, **kwargs)

    monkeypatch.setattr(Path, "read_text", read_text)
    source, _ = open_rapl(powercap)
    assert source is not None and source.domains == ["intel-rapl:0 package-0"]
    locked.add(powercap / "intel-rapl:0" / "energy_uj")
    source, reason = open_rapl(powercap)
    assert source is None
    assert reason == ("RAPL package domains not readable (intel-rapl:0: PermissionError; "
                      "intel-rapl:1: PermissionError; root only)")


def test_no_powercap_tree_is_a_reason_not_an_error(tmp_path: Path) -> None:
    source, reason = open_rapl(tmp_path / "absent")
    assert source is None and "no powercap/RAPL driver" in reason
    (tmp_path / "empty").mkdir()
    assert "no readable RAPL package domain" in open_rapl(tmp_path / "empty")[1]


class FakeNvml:
    """Just the pynvml calls parabench makes; counters in millijoules per GPU index."""

    def __init__(self, gpus: int = 4, fail_init: bool = False,
                 unsupported: bool = False) -> None:
        self.counters = {i: 1_000_000 * (i + 1) for i in range(gpus)}
        self.gpus, self.fail_init, self.unsupported = gpus, fail_init, unsupported
        self.shutdowns = 0

    def nvmlInit(self) -> None:  # noqa: N802 - pynvml's names
        if self.fail_init:
            raise RuntimeError("NVML Shared Library Not Found")

    def nvmlShutdown(self) -> None:  # noqa: N802
        self.shutdowns += 1

    def nvmlDeviceGetCount(self) -> int:  # noqa: N802
        return self.gpus

    def nvmlDeviceGetHandleByIndex(self, index: int) -> SimpleNamespace:  # noqa: N802
        return SimpleNamespace(index=index)

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: SimpleNamespace) -> int:  # noqa: N802
        if self.unsupported:
            raise RuntimeError("Not Supported")
        return self.counters[handle.index]


def cuda(workers: int = 2, **options: Any) -> RunConfig:
    return RunConfig(workload="cnn", method="ddp", device="cuda", workers=workers,
                     options=options)


def test_nvml_sums_the_gpus_the_case_uses(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    nvml = FakeNvml()
    source, reason = open_nvml(cuda(workers=2), nvml)  # type: ignore[arg-type]
    assert source is not None and reason == "" and source.domains == ["gpu 0", "gpu 1"]
    before = source.read()
    nvml.counters[0] += 1500  # mJ
    nvml.counters[1] += 2500
    nvml.counters[3] += 99_000  # a GPU this case does not use
    assert source.joules(before, source.read()) == pytest.approx(4.0)
    source.close()
    assert nvml.shutdowns == 1


def test_gpu_indices_follow_visible_devices_and_stages(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    assert gpu_indices(cuda(workers=2), gpus=4) == [2, 3]
    assert gpu_indices(cuda(workers=8), gpus=4) == [2, 3]  # capped at what is visible
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert gpu_indices(cuda(workers=1, stages=3), gpus=4) == [0, 1, 2]
    assert gpu_indices(RunConfig(workload="cnn", method="serial"), gpus=4) == []


def test_nvml_without_driver_or_support_gives_the_reason() -> None:
    source, reason = open_nvml(cuda(), FakeNvml(fail_init=True))  # type: ignore[arg-type]
    assert source is None and "NVML Shared Library Not Found" in reason
    nvml = FakeNvml(unsupported=True)
    source, reason = open_nvml(cuda(), nvml)  # type: ignore[arg-type]
    assert source is None and "Not Supported" in reason and nvml.shutdowns == 1
    cpu_case = RunConfig(workload="cnn", method="serial")
    assert "device cpu" in open_nvml(cpu_case, FakeNvml())[1]  # type: ignore[arg-type]


def test_meter_without_sources_records_null_with_every_reason(tmp_path: Path) -> None:
    meter = open_meter(RunConfig(workload="mlp", method="serial"), root=tmp_path / "none")
    meter.add_epoch(meter.read(), meter.read())
    summary = meter.summary(samples_per_epoch=100)
    assert summary["joules_per_epoch"] is None and summary["joules_per_sample"] is None
    assert summary["source"] is None
    assert "no powercap/RAPL driver" in summary["reason"] and "device cpu" in summary["reason"]


def test_meter_per_epoch_and_per_sample_over_steady_epochs(powercap: Path) -> None:
    meter = open_meter(RunConfig(workload="mlp", method="serial"), root=powercap)
    value = 5_000_000
    for joules in (10.0, 2.0, 4.0):  # the first epoch (warm-up) is left out per sample
        before = meter.read()
        value += int(joules * 1e6)
        set_energy(powercap, "intel-rapl:0", value)
        meter.add_epoch(before, meter.read())
    summary = meter.summary(samples_per_epoch=1000)
    assert summary["source"] == "rapl" and summary["joules_per_epoch"] == [10.0, 2.0, 4.0]
    assert summary["joules_per_sample"] == pytest.approx(3.0 / 1000)
    assert summary["by_source"] == {"rapl": [10.0, 2.0, 4.0]}


def test_parts_of_an_epoch_add_up_and_a_cut_short_one_is_no_steady_epoch(
    powercap: Path,
) -> None:
    """Time to target reads around each part (its evaluations left out); a last epoch it
    stopped between parts is recorded, but not taken as a steady epoch per sample."""
    meter = open_meter(RunConfig(workload="mlp", method="serial"), root=powercap)
    value = 5_000_000
    for epoch_parts in ([6.0, 4.0], [1.0, 1.0], [3.0, 1.0], [0.5]):  # the last: cut short
        for part, joules in enumerate(epoch_parts):
            before = meter.read()
            value += int(joules * 1e6)
            set_energy(powercap, "intel-rapl:0", value)
            meter.add_epoch(before, meter.read(), part)
    meter.cut_short = True
    summary = meter.summary(samples_per_epoch=1000)
    assert summary["joules_per_epoch"] == [10.0, 2.0, 4.0, 0.5]
    assert summary["joules_per_sample"] == pytest.approx(3.0 / 1000)  # median of 2 and 4


def test_a_counter_that_stops_reading_nulls_that_epoch_only(powercap: Path) -> None:
    meter = open_meter(RunConfig(workload="mlp", method="serial"), root=powercap)
    before = meter.read()
    (powercap / "intel-rapl:0" / "energy_uj").unlink()
    meter.add_epoch(before, meter.read())
    summary = meter.summary(samples_per_epoch=10)
    assert summary["joules_per_epoch"] == [None] and summary["joules_per_sample"] is None
    assert "read failed" in summary["reason"]


class OneBatch(Workload):
    name: ClassVar[str] = "one_batch"
    family: ClassVar[str] = "scripted"
    quality: ClassVar[Quality] = Quality(name="accuracy", higher_is_better=True)

    def make_data(self, profile: str, seed: int, data_dir: str | None = None) -> Dataset:
        raise NotImplementedError  # the scripted sessions need no data


class Burning(Session):
    """Each epoch 'burns' 3 J on package 0 and each evaluation 100 J: only epochs count."""

    def __init__(self, workload: Workload, config: RunConfig, root: Path) -> None:
        super().__init__(workload, config)
        self.root = root

    def start(self) -> None:
        self.samples_per_epoch = 10

    def burn(self, joules: float) -> None:
        path = self.root / "intel-rapl:0" / "energy_uj"
        path.write_text(str(int(path.read_text()) + int(joules * 1e6)))

    def train_epoch(self, epoch: int) -> EpochStats:
        if epoch == FAIL_AT.get("epoch"):
            raise RuntimeError("epoch failed")
        self.burn(3.0)
        return EpochStats(seconds=1.0, loss=0.0, samples=10)

    def evaluate(self) -> float:
        self.burn(100.0)
        return 0.5


FAIL_AT: dict[str, int] = {}


@pytest.fixture
def burning(powercap: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """execute() on the Burning session with the fake powercap tree (registries untouched)."""

    class Burner(Method):
        name: ClassVar[str] = "burner"
        families: ClassVar[frozenset[str]] = frozenset({"scripted"})

        def session(self, workload: Workload, config: RunConfig) -> Session:
            return Burning(workload, config, powercap)

    class Lookup(dict):
        def get(self, name: str) -> Any:  # type: ignore[override]
            return self[name]

    monkeypatch.setattr(execute_mod, "workloads", Lookup(one_batch=OneBatch()))
    monkeypatch.setattr(execute_mod, "methods", Lookup(burner=Burner()))
    monkeypatch.setattr(execute_mod, "open_meter",
                        lambda config: open_meter(config, root=powercap))
    FAIL_AT.clear()
    return powercap


@pytest.mark.parametrize("target", [None, 0.9])
def test_execute_reads_the_counters_around_each_training_epoch(
    burning: Path, target: float | None,
) -> None:
    config = RunConfig(workload="one_batch", method="burner", epochs=3, target_quality=target)
    result = execute_mod.execute(config)
    assert result.status == "ok", result.reason
    assert result.energy is not None and result.energy.source == "rapl"
    assert result.energy.joules_per_epoch == pytest.approx([3.0, 3.0, 3.0])
    assert result.energy.joules_per_sample == pytest.approx(3.0 / 10)


def test_a_failed_case_keeps_the_energy_of_its_finished_epochs(burning: Path) -> None:
    FAIL_AT["epoch"] = 2
    result = execute_mod.execute(RunConfig(workload="one_batch", method="burner", epochs=3))
    assert result.status == "failed" and "epoch failed" in result.reason
    assert result.energy is not None
    assert result.energy.joules_per_epoch == pytest.approx([3.0, 3.0])
