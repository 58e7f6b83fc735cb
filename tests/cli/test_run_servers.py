"""A local ``parabench run`` starts its pre-start servers (parabench.core.prestart) before it
plans the sweep, so that their torch imports run beside the planning's own device probe, and
its cases then fork from those very servers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from parabench import hardware
from parabench.cli import main
from parabench.core import prestart

pytestmark = pytest.mark.cpu


@pytest.fixture
def events(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """What happened, in order: each server started, the device probe, each server closed."""
    seen: list[str] = []
    server_init, server_close = prestart.Server.__init__, prestart.Server.close

    def init(self: prestart.Server, env: dict[str, str]) -> None:
        seen.append("server")
        server_init(self, env)

    def close(self: prestart.Server) -> None:
        seen.append("closed")
        server_close(self)

    def count() -> int:
        seen.append("probe")
        return 0

    monkeypatch.setattr(prestart.Server, "__init__", init)
    monkeypatch.setattr(prestart.Server, "close", close)
    monkeypatch.setattr(hardware, "cuda_device_count", count)
    hardware.probe.cache_clear()
    monkeypatch.delenv(prestart.ENV, raising=False)
    yield seen
    hardware.probe.cache_clear()


def test_the_server_starts_before_the_plan_probes_and_the_case_forks_from_it(
        events: list[str], tmp_path: Path) -> None:
    out = tmp_path / "r.jsonl"
    code = main(["run", "--workload", "mlp", "--method", "serial", "--profile", "tiny",
                 "--epochs", "1", "--windows", "2", "--out", str(out)])
    assert code == 0
    assert events[0] == "server" and "probe" in events  # started before the devices' probe
    assert events.count("server") == 1 and events[-1] == "closed"  # one, used, closed
    result = json.loads(out.read_text().splitlines()[0])
    assert result["status"] == "ok"
    assert result["facts"]["prestart_import_s"] is not None  # forked from that server


def test_a_resumed_run_starts_none_before_its_plan(events: list[str], tmp_path: Path) -> None:
    """--resume may have nothing left to run: no server is started on a guess."""
    out = tmp_path / "r.jsonl"
    argv = ["run", "--workload", "mlp", "--method", "serial", "--profile", "tiny", "--epochs",
            "1", "--windows", "2", "--out", str(out)]
    assert main(argv) == 0
    events.clear()
    assert main([*argv, "--resume"]) == 0
    assert "server" not in events
