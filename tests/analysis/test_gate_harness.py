"""The gate's measuring tools: the ``slow_steps`` plugin really does extra work (counted by the
plugin itself, never by a wall-clock assertion) and ``scripts/gate_harness.py``'s records and
table; its ``--small`` run end to end is ``-m long`` (minutes).

Run: ``pytest tests/analysis/test_gate_harness.py`` (``-m slow`` adds a CLI run of ``serial_slow``;
``-m long`` the harness's smoke run).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from script_module import load_script

pytestmark = pytest.mark.cpu
ROOT = Path(__file__).resolve().parents[2]
PLUGINS = ROOT / "tests" / "plugins"


def _harness(name: str = "gate_harness"):  # noqa: ANN202 - the script's module
    return load_script(name)


@pytest.fixture
def slow_plugin(monkeypatch: pytest.MonkeyPatch):  # noqa: ANN201
    monkeypatch.syspath_prepend(str(PLUGINS))
    monkeypatch.setenv("PYTHONPATH", str(PLUGINS), prepend=os.pathsep)
    monkeypatch.setenv("PARABENCH_PLUGINS", "slow_steps")
    import slow_steps

    return slow_steps


def _steps(slowdown, n: int = 20, fetch_s: float = 0.0) -> float:  # noqa: ANN001
    """``n`` training iterations, each fetching its batch for ``fetch_s`` (a sleep: outside
    forward and step, as a data loader is); returns the wall seconds from ``begin()`` to the
    last step's end, by a clock of the test's own."""
    torch = pytest.importorskip("torch")
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(),
                                torch.nn.Linear(32, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    slowdown.install(opt)
    x = torch.randn(32, 16)
    started = time.perf_counter()
    slowdown.begin()
    for _ in range(n):
        time.sleep(fetch_s)
        model(x).pow(2).mean().backward()
        opt.step()
        opt.zero_grad()
    seconds = time.perf_counter() - started
    model.eval()
    model(x)  # evaluation: no step, no extra work
    return seconds


@pytest.mark.parametrize("mode", ["spin", "sleep"])
def test_the_slowdown_adds_its_fraction_of_every_iteration(slow_plugin, mode: str,  # noqa: ANN001
                                                           monkeypatch: pytest.MonkeyPatch
                                                           ) -> None:
    """The extra work is f of each whole iteration, batch fetching included (a plant of f of
    the step alone was a smaller slowdown than it said where fetching is a large share), and
    the iterations plus the extra work are the whole loop by the test's own clock."""
    monkeypatch.setenv("PARABENCH_SLOW_FRACTION", "0.5")
    monkeypatch.setenv("PARABENCH_SLOW_MODE", mode)
    slowdown = slow_plugin.Slowdown()
    seconds = _steps(slowdown, fetch_s=0.003)
    c = slowdown.counters()
    assert c["steps"] == 20
    assert c["step_s"] >= 20 * 0.003  # every fetch is inside its iteration
    assert c["extra_s"] >= 0.5 * c["step_s"]  # at least the fraction, every iteration
    assert 0.9 * seconds <= c["step_s"] + c["extra_s"] <= seconds  # the loop, partitioned
    assert (c["spins"] > 0) == (mode == "spin")  # busy work, or none when asked to sleep


def test_time_between_training_calls_is_not_an_iteration(slow_plugin,  # noqa: ANN001
                                                         monkeypatch: pytest.MonkeyPatch
                                                         ) -> None:
    """An evaluation (or anything) between two training calls is not stretched: each call's
    ``begin()`` restarts the clock."""
    monkeypatch.setenv("PARABENCH_SLOW_FRACTION", "0.5")
    slowdown = slow_plugin.Slowdown()
    first = _steps(slowdown, n=5)
    time.sleep(0.2)  # between the calls
    second = _steps(slowdown, n=5)
    c = slowdown.counters()
    assert c["steps"] == 10 and c["step_s"] + c["extra_s"] <= first + second


def test_fraction_zero_does_no_extra_work(slow_plugin, monkeypatch: pytest.MonkeyPatch  # noqa: ANN001
                                          ) -> None:
    monkeypatch.delenv("PARABENCH_SLOW_FRACTION", raising=False)
    slowdown = slow_plugin.Slowdown()
    _steps(slowdown, n=5)
    assert slowdown.counters()["steps"] == 5
    assert slowdown.counters()["extra_s"] == 0 and slowdown.counters()["spins"] == 0


def test_a_bad_fraction_or_mode_is_refused(slow_plugin, monkeypatch: pytest.MonkeyPatch  # noqa: ANN001
                                           ) -> None:
    monkeypatch.setenv("PARABENCH_SLOW_MODE", "nap")
    with pytest.raises(ValueError, match="spin, sleep"):
        slow_plugin.Slowdown()


@pytest.mark.slow
def test_serial_slow_spins_in_a_real_case(slow_plugin, tmp_path: Path,  # noqa: ANN001
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PARABENCH_SLOW_FRACTION", "0.25")
    monkeypatch.setenv("PARABENCH_SLOW_COUNTER_DIR", str(tmp_path))
    out = tmp_path / "r.jsonl"
    done = subprocess.run([sys.executable, "-m", "parabench", "run", "--workload", "mlp",
                           "--method", "serial_slow", "--profile", "tiny", "--epochs", "1",
                           "--out", str(out)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    (counter,) = [json.loads(p.read_text()) for p in tmp_path.glob("*.json")]
    assert counter["steps"] > 0 and counter["spins"] > 0
    assert counter["extra_s"] >= 0.25 * counter["step_s"]
    record = json.loads(out.read_text().splitlines()[0])
    assert record["status"] == "ok"
    assert "slow_extra_s" in json.dumps(record)  # the counters in the result's notes


def _record(mode: str, slowdown: float, index: int, regressed: bool, **kw) -> dict:  # noqa: ANN003
    return {"mode": mode, "condition": "quiet", "slowdown": slowdown, "index": index,
            "verdict": "SLOWER 12%" if regressed else "same (not significant)",
            "regressed": regressed, "ratio": 0.9, "p": 0.01, "samples": "5 repeats vs 5 repeats",
            "seconds": 10.0, "load_before": "0.10 0.20 0.30", "load_after": "1.10 0.50 0.30",
            "date": "2026-01-02T03:04:05+00:00", "command": "python scripts/gate_harness.py",
            "commit": "abc", "settings": {"rounds": 5}, **kw}


def test_the_table_counts_false_alarms_and_detections(tmp_path: Path) -> None:
    h = _harness()
    path = tmp_path / h.RECORDS
    records = ([_record("file", 0.0, i, i < 2) for i in range(50)]
               + [_record("interleaved", 0.1, i, i < 15) for i in range(20)]
               + [_record("interleaved", 0.1, i, i < 9, settings={"plant": "iteration"})
                  for i in range(10)]
               + [_record("interleaved", 0.1, i, True, settings={"plant": "iteration"},
                          test="exact sign-flip test, 25%-trimmed mean") for i in range(4)])
    for r in records:
        h.append_record(path, r)
    assert h.read_records(path) == records
    text = h.write_table(tmp_path).read_text()
    assert "| file | quiet | none (A/A) | false alarms 4% | 2/50 (50) | 0.900 | 0.10-0.10 -> " \
           "1.10-1.10 | 2026-01-02 |" in text
    assert ("| interleaved, t test | quiet | 10% of each step (first plant) | detected 75% | "
            "15/20 (20) |") in text
    assert "| interleaved, t test | quiet | 10% of each iteration | detected 90% | 9/10 (10) |" \
        in text
    # records judged by the sign-flip test are counted apart from the t test's
    assert "| interleaved, sign-flip | quiet | 10% of each iteration | detected 100% | 4/4 (4) |" \
        in text
    assert "python scripts/gate_harness.py" in text and "84 record(s)" in text


def test_recorded_rounds_are_judged_again_by_todays_test(tmp_path: Path) -> None:
    """scripts/gate_rejudge.py: the measured loaded 20 % rounds the t test missed are flagged
    by today's paired test, same-code rounds are not, and records it cannot judge again
    exactly (6 rounds, a failed round) are left out of the table."""
    from test_signflip import LOADED_20PCT

    rejudge = _harness("gate_rejudge")
    out = tmp_path / "rounds16-load"
    out.mkdir()
    settings = {"plant": "iteration", "threshold": 0.05}
    same = [1.0 + 0.02 * ((-1) ** i) * (i % 3) for i in range(16)]
    for r in ([_record("interleaved", 0.2, i, False, settings=settings, round_ratios=LOADED_20PCT,
                       condition="load") for i in range(2)]
              + [_record("interleaved", 0.0, 0, False, settings=settings, round_ratios=same,
                         condition="load"),
                 _record("interleaved", 0.0, 1, False, settings=settings,
                         round_ratios=same[:6], condition="load"),
                 _record("interleaved", 0.0, 2, False, settings=settings,
                         round_ratios=[None, *same[1:]], condition="load")]):
        _harness().append_record(out / "gate_records.jsonl", r)
    text = rejudge.table([out], 0.05)
    assert "| rounds16-load | t test | 16 | load | 20% of each iteration | 0/2 | 2/2 |" in text
    assert "| rounds16-load | t test | 16 | load | none (A/A) | 0/1 | 0/1 |" in text
    assert "| 6 |" not in text
    rates = rejudge.resampled([out], 0.05, draws=200)
    aa = next(line for line in rates.splitlines() if "none (A/A)" in line)
    plant = next(line for line in rates.splitlines() if "20% of each iteration" in line)
    assert "| 1 (16) | 200 | 0.00% |" in aa, rates
    # the hardest measured record (4 of 16 rounds spoiled): draws with more spoiled rounds
    # than the trim drops are missed, so the rate sits well under the record's own verdict
    assert 40 < float(plant.split("|")[5].strip().rstrip("%")) < 100, rates


def test_recorded_comparisons_are_skipped_on_resume(tmp_path: Path) -> None:
    h = _harness()
    args = h.parse_args(["--small", "--mode", "file,interleaved,asv", "--out", str(tmp_path)])
    assert (args.count, args.detect_count, args.rounds, args.slowdowns) == (2, 1, 2, [0.2])
    todo = h.plan(args)
    assert ("asv", 0.0, 1) in todo and ("asv", 0.2, 0) not in todo  # asv: A/A only
    assert len(todo) == 2 * 3 + 2 * 1
    done = {h.record_key(_record("file", 0.0, 0, False))}
    left = h.pending(todo, done, "quiet")
    assert len(left) == len(todo) - 1 and ("file", 0.0, 0) not in left
    assert h.pending(todo, done, "load") == todo  # another condition: nothing recorded
    # a slowdown recorded through the first plant (no "plant" in its settings) runs again;
    # one recorded through today's does not
    first = _record("file", 0.2, 0, True)
    today = _record("file", 0.2, 0, True, settings={"rounds": 5, "plant": h.PLANT})
    assert ("file", 0.2, 0) in h.pending(todo, {h.record_key(first)}, "quiet")
    assert ("file", 0.2, 0) not in h.pending(todo, {h.record_key(today)}, "quiet")


@pytest.mark.long
def test_the_small_harness_run_writes_records_and_a_table(tmp_path: Path) -> None:
    """About 4 minutes on 2 cores: 3 comparisons each in file and interleaved mode."""
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "gate_harness.py"),
                           "--small", "--out", str(tmp_path)], capture_output=True, text=True,
                          timeout=1200)
    assert done.returncode == 0, done.stdout + done.stderr
    h = _harness()
    records = h.read_records(tmp_path / h.RECORDS)
    assert {(r["mode"], r["slowdown"]) for r in records} == {
        ("file", 0.0), ("file", 0.2), ("interleaved", 0.0), ("interleaved", 0.2)}
    assert len(records) == 6 and all(r["samples"] for r in records)
    # the interleaved rows name the test that judged them (mode_label)
    assert re.search(r"\| interleaved, (t test|sign-flip) \| quiet \| none \(A/A\) \|",
                     (tmp_path / h.TABLE).read_text())
    again = subprocess.run([sys.executable, str(ROOT / "scripts" / "gate_harness.py"),
                            "--small", "--out", str(tmp_path)], capture_output=True, text=True,
                           timeout=120)
    assert "0 comparison(s) to run (6 recorded)" in again.stdout  # resumed: nothing repeated


def test_the_load_generator_spins_one_process_per_core_and_stops() -> None:
    h = _harness()
    with h.background_load(True) as pids:
        assert len(pids) == (os.cpu_count() or 1)
        for pid in pids:
            os.kill(pid, 0)  # alive
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    with h.background_load(False) as none:
        assert none == []


def test_every_matched_case_is_one_verdict_and_rounds_are_judged_paired() -> None:
    """A selection of several cases gives one comparison record per case; interleaved rounds
    are judged paired by round (as ``compare --rerun`` does): a drift shared by both sides
    of a round cancels, so the same 15 % slowdown is SLOWER paired and not unpaired."""
    import dataclasses
    import random

    from sweepdata import case

    h = _harness()
    rng = random.Random(11)

    def runs(workload: str, slow: float, drift: list[float]) -> list:
        return [dataclasses.replace(
            case(workload, "serial", 1), window_s=[100 * slow * d / rng.gauss(1000, 10)
                                                   for _ in range(8)],
            window_samples=[100] * 8, window={"warmup": 1}) for d in drift]

    drift = [rng.choice((0.6, 1.0, 1.6)) for _ in range(10)]
    base = runs("mlp", 1.0, drift) + runs("cnn", 1.0, drift)
    new = runs("mlp", 1.15, drift) + runs("cnn", 1.0, drift)
    paired = {v["case"]: v for v in h._judge(base, new, 0.10, paired=True)}
    assert set(paired) == {"mlp/serial 1x2", "cnn/serial 1x2"}
    assert paired["mlp/serial 1x2"]["regressed"] and not paired["cnn/serial 1x2"]["regressed"]
    unpaired = {v["case"]: v for v in h._judge(base, new, 0.10)}
    assert not unpaired["mlp/serial 1x2"]["regressed"]


def test_paired_records_keep_each_rounds_ratio() -> None:
    import dataclasses

    from sweepdata import case

    h = _harness()
    base = [dataclasses.replace(case("mlp", "serial", 1), samples_per_s=100.0 * d)
            for d in (1.0, 2.0, 1.0)]
    new = [dataclasses.replace(r, samples_per_s=r.samples_per_s * f)
           for r, f in zip(base, (0.9, 0.8, 1.0), strict=True)]
    [record] = h._judge(base, new, 0.10, paired=True)
    assert record["round_ratios"] == [0.9, 0.8, 1.0]
    [unpaired] = h._judge(base, new, 0.10)
    assert unpaired["round_ratios"] is None


def test_asv_rows_reads_every_benchmark_of_asvs_table() -> None:
    """``asv continuous --no-only-changed``'s table (built here as asv builds it: tabulate,
    github style): one row per parameter set, ``+`` (slower) flagged, the ratio turned into
    NEW's rate over BASE's; the parameter sets ``-b`` did not select (n/a on both sides, as
    asv lists them) are left out."""
    tabulate = pytest.importorskip("tabulate")
    name = "bench_methods.Window.time_window"
    table = tabulate.tabulate(
        [["+", "6.73±0.8ms", "7.60±0.1ms", "1.13", f"{name}('mlp', 'serial', 'cpu', 1)"],
         [" ", "70.5±2ms", "75.5±2ms", "1.07", f"{name}('mlp', 'ddp', 'cpu', 2)"],
         ["-", "10.0±1ms", "8.00±1ms", "~0.80", f"{name}('cnn', 'ddp', 'cpu', 2)"],
         [" ", "n/a", "n/a", "n/a", f"{name}('vgg11', 'tp', 'cuda', 2)"]],  # not selected
        headers=["Change", "Before [c8fb8d85] <main~1>", "After [cb4c1dd3] <main>", "Ratio",
                 "Benchmark (Parameter)"], tablefmt="github")
    rows = _harness("gate_asv").asv_rows("· Running 2 total benchmarks\n" + table
                               + "\nSOME BENCHMARKS HAVE CHANGED SIGNIFICANTLY.\n")
    assert [r["case"] for r in rows] == ["mlp, serial, cpu, 1", "mlp, ddp, cpu, 2",
                                         "cnn, ddp, cpu, 2"]
    assert [r["regressed"] for r in rows] == [True, False, False]
    assert rows[0]["ratio"] == pytest.approx(1 / 1.13) and rows[2]["ratio"] == 1.25
    assert rows[0]["verdict"] == "asv: worse (1.13)" and rows[1]["verdict"] == "asv: same (1.07)"
