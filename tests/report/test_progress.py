"""Sweep progress: rich's live line on a terminal, one plain line per finished case elsewhere."""

from __future__ import annotations

import io
import re
import subprocess
import sys
from pathlib import Path

import pytest

from parabench.case.result import Result
from parabench.sweep.progress import Progress

pytestmark = pytest.mark.cpu


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def _result(status: str = "ok", reason: str = "") -> Result:
    return Result(workload="mlp", method="serial", device="cpu", workers=1,
                  threads_per_worker=1, batch_size=None, epochs=3, profile="tiny", seed=0,
                  repeat=0, status=status, reason=reason, epoch_s=[3.0, 2.0, 2.0],
                  samples_per_s=500.0)


def test_a_terminal_gets_a_live_line_with_counts_eta_case_and_epoch() -> None:
    tty = Tty()
    p = Progress(total=3, stream=tty, runnable=2)
    p.show("mlp/serial cpu w=1", "epoch 2/3")
    p.case_done("mlp/serial cpu w=1", _result())
    p.show("mlp/ddp cpu w=2", "epoch 1/3")
    p.finish()
    text = tty.getvalue()
    assert "[0/3]" in text and "[1/3]" in text and "epoch 2/3" in text
    assert "mlp/ddp cpu w=2" in text and "ETA 00:00" in text
    assert "mlp/serial cpu w=1: ok 2.000 s/epoch" in text  # cut at the 80-column width


def test_off_a_terminal_each_finished_case_is_one_line_and_nothing_else() -> None:
    pipe = io.StringIO()
    p = Progress(total=3, stream=pipe, runnable=1)
    p.show("mlp/serial cpu w=1", "epoch 2/3")
    assert pipe.getvalue() == ""
    p.case_done("mlp/serial cpu w=1", _result())
    p.case_done("mlp/pipeline cpu w=4", _result("skipped", "needs 4 cores\nsecond line"))
    p.finish()
    lines = pipe.getvalue().splitlines()
    assert len(lines) == 2
    assert lines[0].startswith("[1/3] 00:00 elapsed, ETA 00:00  mlp/serial cpu w=1: ok")
    assert lines[1].endswith("mlp/pipeline cpu w=4: skipped: needs 4 cores")


def test_eta_counts_only_cases_that_ran() -> None:
    p = Progress(total=10, stream=io.StringIO(), runnable=5)
    assert p.eta_s() is None
    p.show("a")
    p._case_started -= 30.0  # the case took 30 s
    p.case_done("a", _result())
    p.case_done("b", _result("skipped", "n/a"))  # instant, not a runnable case
    assert p.eta_s() == pytest.approx(4 * 30.0, rel=0.01)


@pytest.mark.slow
@pytest.mark.torch
def test_a_piped_sweep_prints_one_line_per_case_and_ends_with_the_report(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    pytest.importorskip("tensorboard")
    proc = subprocess.run(
        [sys.executable, "-m", "parabench", "run", "--workload", "mlp", "--method", "serial",
         "--repeats", "2", "--profile", "tiny", "--epochs", "2",
         "--out", str(tmp_path / "r.jsonl"), "--report", str(tmp_path / "rep"),
         "--tensorboard", str(tmp_path / "tb")],
        capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    progress = [ln for ln in proc.stderr.splitlines() if ln.startswith("[")]
    assert [ln[:5] for ln in progress] == ["[1/2]", "[2/2]"]
    assert all("mlp/serial" in ln and ": ok " in ln for ln in progress)
    out = proc.stdout.strip().splitlines()
    assert out[-1].startswith(f"report: {tmp_path / 'rep' / 'report.html'}")
    assert any(ln.startswith("mlp on cpu (tiny): use serial") for ln in out)
    assert (tmp_path / "rep" / "report.md").read_text().splitlines()[4].startswith(
        "- mlp on cpu (tiny): use serial")
    runs = sorted(p.name for p in (tmp_path / "tb" / "mlp").iterdir())
    assert [re.sub(r"bs\d+", "bsN", r) for r in runs] == ["serial-cpu-w1-bsN-r0",
                                                           "serial-cpu-w1-bsN-r1"]
    assert all(any(p.glob("events.out.tfevents.*")) for p in (tmp_path / "tb" / "mlp").iterdir())


def test_without_rich_a_terminal_gets_plain_lines(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "rich", None)  # import fails as if not installed
    monkeypatch.setitem(sys.modules, "rich.console", None)
    tty = Tty()
    p = Progress(total=1, stream=tty)
    p.show("mlp/serial cpu w=1", "epoch 1/3")
    p.case_done("mlp/serial cpu w=1", _result())
    p.finish()
    assert tty.getvalue().startswith("[1/1] ") and "\x1b" not in tty.getvalue()
