"""Checks at the file: the figures a user reads agree with counts that did not pass through
the same code, or the case fails naming both (:mod:`parabench.case.audit`).

Each check is tested both ways on results built here (agreeing evidence passes, a doubled or
halved figure fails), the runner's outside reading of the cores on a real process, and the
planted bugs of ``tests/plugins/figure_bugs.py`` through the real CLI, one hop each: a
figure doubled while the result is assembled (serial, ddp, fedavg, tensor parallel), a
multi-process case folding its cores from its own process instead of its tree (ddp, fedavg), a
tensor-parallel case whose every rank counts the samples the ranks share (caught inside the
case, before the file). A rank claiming more than its loader served is caught inside the case
(``test_samples_crosscheck.py``).
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from parabench.case.audit import MIN_SPAN_S, audit, audited
from parabench.case.isolate import _outside_cores
from parabench.case.result import Result
from parabench.core.records import Evidence, TimeToTarget, Window
from parabench.core.sampler import TreeSampler, _interpolated
from sweepdata import case

pytestmark = [pytest.mark.cpu]
PLUGINS = Path(__file__).parents[1] / "plugins"

SECONDS = [0.30, 0.50, 0.52, 0.48]  # a warm-up window, then three steady ones
SERVED = [900, 1000, 1000, 1000]


def windowed(**changes: object) -> Result:
    """An ok ddp result whose windows, speed, cores and evidence agree."""
    rates = [n / s for n, s in zip(SERVED[1:], SECONDS[1:], strict=True)]
    rates.sort()
    base = dataclasses.replace(
        case("mlp", "ddp", 2), window_s=list(SECONDS), window_samples=list(SERVED),
        window=Window(unit="steps", steps=10, warmup=1), samples_per_s=rates[1],
        samples_per_s_ci=[rates[0], rates[2]], window_cores=1.6,
        evidence=Evidence(window_served=list(SERVED), windows_span=[100.0, 101.55],
                          outside_cores=1.58))
    return dataclasses.replace(base, **changes)


def test_a_result_whose_figures_agree_passes() -> None:
    result = windowed()
    assert audit(result) == []
    assert audited(result) is result


def test_results_without_evidence_or_not_ok_are_not_checked() -> None:
    assert audit(windowed(evidence=None, samples_per_s=1.0)) == []
    assert audit(windowed(status="failed", samples_per_s=1.0)) == []


@pytest.mark.parametrize("factor", [2.0, 0.5])
def test_samples_per_s_not_from_its_windows_fails_the_case(factor: float) -> None:
    good = windowed()
    bad = audited(dataclasses.replace(good, samples_per_s=good.samples_per_s * factor))
    assert bad.status == "failed"
    assert bad.reason.startswith("figures disagree: samples/s ")
    assert f"{good.samples_per_s:,.1f}" in bad.reason  # what the windows give


def test_without_served_counts_samples_per_s_is_checked_against_the_windows() -> None:
    good = windowed(evidence=Evidence(window_served=[None] * 4, windows_span=[100.0, 101.55]))
    assert audit(good) == []
    problems = audit(dataclasses.replace(good, samples_per_s=2 * good.samples_per_s))
    assert problems and problems[0].startswith("samples/s ")


def test_a_window_claiming_what_the_loaders_did_not_serve_fails() -> None:
    claims = [900, 2000, 1000, 1000]
    assert audit(windowed(window_samples=claims)) == [
        "window 1: 2000 samples, the loaders served 1000"]
    # a window the loaders kept no count for is not checked (samples/s is then its windows'
    # own: here 4000, 1923 and 2083 samples/s, median 2083)
    evidence = Evidence(window_served=[900, None, 1000, 1000], windows_span=[100.0, 101.55])
    own = sorted(n / t for n, t in zip(claims[1:], SECONDS[1:], strict=True))
    assert audit(windowed(window_samples=claims, evidence=evidence, samples_per_s=own[1],
                          samples_per_s_ci=[own[0], own[2]])) == []


def test_a_figure_outside_its_own_interval_fails() -> None:
    problems = audit(windowed(samples_per_s_ci=[1.0, 2.0]))
    assert problems and "outside its own CI" in problems[0]


@pytest.mark.parametrize(("span", "fails"), [
    ([100.0, 101.55], False),    # 1.50 s of windows in 1.55 s
    ([100.0, 101.0], True),      # more window seconds than passed on the host clock
    ([100.0, 103.0], True),      # the windows fill under 75 % of their span (seconds halved)
])
def test_window_seconds_against_the_host_clock(span: list[float], fails: bool) -> None:
    evidence = Evidence(window_served=list(SERVED), windows_span=span)
    assert bool(audit(windowed(evidence=evidence))) == fails
    # a window of one fit may leave work outside its clock: only the upper bound holds
    fits = windowed(evidence=evidence, window=Window(unit="fit", warmup=1))
    assert bool(audit(fits)) == (span[1] - span[0] < 1.5)


def test_windows_in_stretches_are_held_against_the_stretches_seconds() -> None:
    """Windows that were parts trained for quality (fedavg's rounds) lie in stretches with the
    evaluations between them: their seconds are held against the stretches', not against
    the whole span around them, which the evaluations fill too."""
    apart = [[100.0, 100.51], [101.0, 101.51], [102.0, 102.51]]
    ok = Evidence(window_served=list(SERVED), windows_span=[100.0, 102.51], window_spans=apart)
    assert audit(windowed(evidence=ok)) == []
    short = [[a, b - 0.1] for a, b in apart]  # 1.50 s of windows in 1.23 s of stretches
    bad = dataclasses.replace(ok, window_spans=short)
    assert audit(windowed(evidence=bad)) == ["windows 1.500 s by their clock, only 1.230 s "
                                             "passed around them"]


@pytest.mark.parametrize(("inside", "outside", "fails"), [
    (1.6, 1.58, False), (1.0, 1.3, False), (0.0, 1.57, True), (1.0, 1.9, True),
    (1.9, 1.0, True), (0.95, 0.99, False)])
def test_cores_against_the_runners_reading_from_outside(inside: float, outside: float,
                                                        fails: bool) -> None:
    evidence = Evidence(window_served=list(SERVED), windows_span=[100.0, 101.55],
                        outside_cores=outside)
    problems = audit(windowed(window_cores=inside, evidence=evidence))
    assert bool(problems) == fails, problems
    if fails:
        assert problems == [f"cores {inside:.2f} (CPU s per wall s), the runner saw "
                            f"{outside:.2f} from outside"]
    # too short a span to compare: not checked
    short = dataclasses.replace(evidence, windows_span=[100.0, 100.3])
    assert not audit(windowed(window_cores=inside, evidence=short, window_s=[0.05] * 4,
                              samples_per_s=None))[1:]


def ttt_result(eval_samples: list[int], served: list[int | None], *,
               samples_to_target: int | None = 768, train_s: float = 0.5) -> Result:
    ttt = TimeToTarget(target=0.8, reached=True, eval_samples=eval_samples,
                       samples_to_target=samples_to_target, train_s=train_s)
    return windowed(time_to_target=ttt, evidence=Evidence(
        window_served=list(SERVED), windows_span=[100.0, 101.55], eval_served=served))


def test_time_to_target_counts_against_the_loaders() -> None:
    assert audit(ttt_result([256, 512, 768], [256, 512, 768])) == []
    assert audit(ttt_result([512, 1024, 1536], [256, 512, 768],
                            samples_to_target=1536))[:1] == [
        "evaluation 1: 512 samples, the loaders served 256"]
    assert "no evaluation's served count" in audit(
        ttt_result([256, 512, 768], [256, 512, 768], samples_to_target=700))[0]
    assert audit(ttt_result([256, 512], [256, 512, 768])) == [
        "2 evaluations, the lifecycle counted 3"]
    # the training seconds to the target lie within the epochs' (case(): about 6 s)
    assert "the epochs took" in audit(ttt_result([256], [256], samples_to_target=256,
                                                 train_s=1e4))[0]


def test_interpolation_needs_samples_around_the_time() -> None:
    points = [(0.0, 0.0), (1.0, 2.0), (2.0, 3.0)]
    assert _interpolated(points, 0.5, 1.0) == pytest.approx(1.0)
    assert _interpolated(points, 1.5, 1.0) == pytest.approx(2.5)
    assert _interpolated(points, -0.1, 1.0) is None and _interpolated(points, 2.1, 1.0) is None
    assert _interpolated(points, 0.5, 0.2) is None  # the samples around it are too far


def test_the_runner_reads_a_busy_process_cores_from_outside() -> None:
    code = "import time\nt = time.process_time()\nwhile time.process_time() - t < 2.5: pass\n"
    proc = subprocess.Popen([sys.executable, "-c", code])
    with TreeSampler(proc.pid) as sampler:
        time.sleep(0.8)
        t0 = time.perf_counter()
        time.sleep(1.0)
        span = [t0, time.perf_counter()]
        proc.wait()
    cores = sampler.cores_over(span)
    # one spinning thread: at most one core, and most of one unless others took it
    assert cores is not None and 0.0 < cores <= 1.1, cores
    assert sampler.cores_over([span[0] - 60, span[1]]) is None  # before the first sample


def test_the_runner_reads_stretches_of_windows_weighted_by_their_seconds() -> None:
    """Over stretches of windows the runner's reading is their CPU seconds over their wall
    seconds (2 s at 2 cores and 1 s at 0.5: 1.5), not the mean of the readings (1.25); a
    stretch it cannot read leaves the reading out."""
    class Sampler:
        def cores_over(self, span: list[float]) -> float | None:
            return {0.0: 2.0, 5.0: 0.5}.get(span[0])

    assert _outside_cores(Sampler(), [[0.0, 2.0], [5.0, 6.0]]) == 1.5
    assert _outside_cores(Sampler(), [[0.0, 2.0], [9.0, 9.5]]) is None


def _planted_run(tmp_path: Path, *args: str, windows: int = 24
                 ) -> tuple[subprocess.CompletedProcess, dict[tuple[str, int], dict]]:
    out = tmp_path / "results.jsonl"
    path = os.pathsep.join(p for p in (str(PLUGINS), os.environ.get("PYTHONPATH")) if p)
    # the cores are compared over spans of 0.5 s or more: windows of 0.05 s (the suite's
    # length), or of one fedavg round (0.02-0.03 s at tiny)
    env = os.environ | {"PYTHONPATH": path, "PARABENCH_PLUGINS": "figure_bugs",
                        "PARABENCH_WINDOW_S": "0.05"}
    cmd = [sys.executable, "-m", "parabench", "run", *args, "--threads", "1", "--profile",
           "tiny", "--epochs", "1", "--windows", str(windows), "--out", str(out)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900,
                          cwd=tmp_path)
    rows = {(r["method"], r["workers"]): r for r in map(json.loads,
                                                        out.read_text().splitlines())}
    return proc, rows


def _failed_row(proc: subprocess.CompletedProcess, rows: dict, method: str, workers: int,
                says: str) -> None:
    row = rows[(method, workers)]
    assert row["status"] == "failed", (method, workers, row["reason"])
    assert says in row["reason"], row["reason"]
    line = next(ln for ln in proc.stdout.splitlines()
                if ln.split()[:2] == [method, f"{workers}x1"])
    assert "failed" in line, line


@pytest.mark.slow
@pytest.mark.torch
def test_figures_planted_wrong_on_the_way_to_the_file_fail_their_cases(tmp_path: Path) -> None:
    planted = "ddp_assembled2x,fedavg_assembled2x,ddp_onecpu,fedavg_onecpu"
    # 64 windows: a fedavg round of 2 clients takes under 0.02 s at tiny on a quiet machine,
    # and 24 of them fell under the 0.5 s the cores check needs (fedavg_onecpu read "ok")
    proc, rows = _planted_run(tmp_path, "--workload", "mlp", "--workers", "1,2", "--method",
                              f"serial,serial_assembled2x,{planted}", windows=64)
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert rows[("serial", 1)]["status"] == "ok"  # the real baseline: no false alarm
    assert rows[("serial", 1)]["evidence"]["outside_cores"] is not None
    _failed_row(proc, rows, "serial_assembled2x", 1, "figures disagree: samples/s ")
    for workers in (1, 2):
        for method in ("ddp_assembled2x", "fedavg_assembled2x"):
            _failed_row(proc, rows, method, workers, "figures disagree: samples/s ")
        for method in ("ddp_onecpu", "fedavg_onecpu"):  # the ranks are the case's children
            ev = rows[(method, workers)]["evidence"]
            span = ev["windows_span"]
            assert span[1] - span[0] >= MIN_SPAN_S, (method, workers, span)  # checked at all
            # read from outside at all: a gap in the runner's CPU points left it unread once
            assert ev["outside_cores"] is not None, (method, workers, span)
            _failed_row(proc, rows, method, workers, "figures disagree: cores 0.0")


@pytest.mark.slow
@pytest.mark.torch
def test_tensor_parallel_figures_planted_wrong_fail_their_cases(tmp_path: Path) -> None:
    proc, rows = _planted_run(tmp_path, "--workload", "gpt", "--workers", "2", "--method",
                              "serial,tp_eachcount,tp_assembled2x", windows=2)
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-3000:]
    # the shared samples counted by every tensor rank: caught inside, by the window check
    _failed_row(proc, rows, "tp_eachcount", 2, "steps x global batch")
    _failed_row(proc, rows, "tp_assembled2x", 2, "figures disagree: samples/s ")
