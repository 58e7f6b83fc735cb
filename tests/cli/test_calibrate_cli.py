"""``parabench calibrate`` then ``parabench run --target-quality --targets FILE``: a workload
the shipped table does not know (the one-file plugin ``tests/plugins/tiny_logreg.py``) gets a
time-to-target answer whose statistical verdict states its power; without an entry the run
names the calibrate command that would make one."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from parabench.analysis.target_parity import converged_bounds
from parabench.case.result import read_results
from parabench.workloads.quality_targets import entry_converged
from parabench.workloads.targetstore import read_store

pytestmark = [pytest.mark.cpu, pytest.mark.torch]

PLUGIN_DIR = Path(__file__).parents[1] / "plugins"
RUN = ["run", "--workload", "tiny_logreg", "--method", "serial,ddp,fedavg", "--workers", "2",
       "--profile", "tiny", "--target-quality"]


def _parabench(args: list[str], cache: Path, cwd: Path) -> subprocess.CompletedProcess:
    paths = [str(PLUGIN_DIR), *(str(Path(p).resolve()) for p in  # cwd moves: absolute
                                os.environ.get("PYTHONPATH", "").split(os.pathsep) if p)]
    env = {**os.environ, "PARABENCH_PLUGINS": "tiny_logreg",
           "PYTHONPATH": os.pathsep.join(paths), "PARABENCH_CACHE_DIR": str(cache)}
    env.pop("PARABENCH_TARGETS", None)
    return subprocess.run([sys.executable, "-m", "parabench", *args], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)


@pytest.mark.slow
def test_calibrate_then_run_to_the_calibrated_target(tmp_path: Path) -> None:
    cache = tmp_path / "cache"  # an empty user store
    out = tmp_path / "results.jsonl"
    bare = _parabench([*RUN, "--out", str(out)], cache, tmp_path)
    assert bare.returncode == 2, bare.stdout + bare.stderr
    assert ("`parabench calibrate --workload tiny_logreg --profile tiny --seeds 3` measures one "
            "(about ") in bare.stderr
    assert not out.exists()

    cal = _parabench(["calibrate", "--workload", "tiny_logreg", "--profile", "tiny",
                      "--seeds", "3", "--targets", "T.json", "--paired"], cache, tmp_path)
    assert cal.returncode == 0, cal.stdout + cal.stderr
    assert "ETA" in cal.stdout and "power with 3 seeds" in cal.stdout
    assert "train seed 1002 (6/6)" in cal.stdout and "paired by seed" in cal.stdout
    (entry,) = read_store(tmp_path / "T.json")["tiny_logreg"]["tiny"]
    assert entry["seeds"] == [0, 1, 2] and len(entry["samples_to_target"]) == 3
    assert entry["paired"]["pairs"] == 3 and entry["paired"]["sd"] >= 0
    assert entry["command"].endswith("--paired")
    assert entry["workload_version"] and entry["data"] is None and entry["device"] == "cpu"
    assert not (tmp_path / "T.json.partial.json").exists()  # the entry holds the seeds now
    assert not (cache / "targets.json").exists()  # --targets chose the store

    paired = _parabench(["calibrate", "--workload", "tiny_logreg", "--profile", "tiny",
                         "--seeds", "1", "--targets", "T1000.json", "--train-seed-offset",
                         "1000"], cache, tmp_path)  # the same data, another training
    assert paired.returncode == 0, paired.stdout + paired.stderr
    (other,) = read_store(tmp_path / "T1000.json")["tiny_logreg"]["tiny"]
    assert other["train_seed_offset"] == 1000 and "--train-seed-offset 1000" in other["command"]
    assert "train_seed_offset" not in entry

    run = _parabench([*RUN, "--targets", "T.json", "--out", str(out)], cache, tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    results = {r.method: r for r in read_results(out) if r.workers == 2 or r.method == "serial"}
    for result in results.values():  # answered by time to the calibrated target
        ttt = result.time_to_target
        assert ttt is not None and ttt.reached and ttt.target == pytest.approx(entry["target"])
        assert str(tmp_path / "T.json") in (ttt.target_source or "")
    fedavg = results["fedavg"].parity
    assert fedavg is not None and fedavg.status == "ok" and fedavg.basis == "target"
    assert fedavg.detectable_loss is not None  # a stated power, from the calibrated seeds
    # seed 0 was calibrated at two trainings: the verdict takes the narrower of the paired
    # and the median check, as the entry's figures say
    refs = [entry_converged(entry, "T", seed=0), entry_converged(entry, "T")]
    best = min(refs, key=lambda r: converged_bounds(r, True)[2])
    assert refs[0].paired and fedavg.detectable_loss == pytest.approx(
        converged_bounds(best, True)[2])
    assert fedavg.baseline_quality == pytest.approx(best.median)
    row = next(line for line in run.stdout.splitlines() if line.startswith("fedavg"))
    assert "ok, blind <" in row and ("(paired by seed)" in row) == best.paired


def test_calibrate_dry_run_estimates_and_runs_nothing(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    from parabench.cli import main

    monkeypatch.setenv("PARABENCH_TARGETS", "")  # restored after: --targets sets it
    store = tmp_path / "T.json"
    assert main(["calibrate", "--workload", "mlp", "--profile", "tiny", "--seeds", "2",
                 "--targets", str(store), "--dry-run"]) == 0
    text = capsys.readouterr().out
    assert text.count("mlp/serial cpu w=1 t=1") == 2 and "Nothing was run." in text
    assert "estimated " in text and not store.exists()


def test_a_run_without_an_entry_names_the_calibrate_command_and_goes_on(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """mlp has no entry at full but a fallback target: the run says which calibration would
    make one and what it would cost, then plans on (here: a dry run)."""
    from parabench.cli import main

    monkeypatch.delenv("PARABENCH_TARGETS", raising=False)
    assert main(["run", "--workload", "mlp", "--method", "serial", "--profile", "full",
                 "--target-quality", "--dry-run", "--out", "/dev/null"]) == 0
    out = capsys.readouterr().out
    assert ("parabench: no measured target for mlp at full; `parabench calibrate --workload "
            "mlp --profile full --seeds 3` measures one (about ") in out
    assert "this run trains mlp to the fallback target" in out and "Planned cases:" in out


def test_an_offset_calibration_without_its_own_store_is_a_usage_error(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    from parabench.cli import main

    monkeypatch.setenv("PARABENCH_CACHE_DIR", str(tmp_path))
    assert main(["calibrate", "--workload", "mlp", "--profile", "tiny", "--seeds", "2",
                 "--train-seed-offset", "1000"]) == 2
    assert "give it its own --targets FILE" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())  # nothing run, nothing written


def test_paired_with_one_seed_is_a_usage_error(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    from parabench.cli import main

    monkeypatch.setenv("PARABENCH_CACHE_DIR", str(tmp_path))
    assert main(["calibrate", "--workload", "mlp", "--profile", "tiny", "--seeds", "1",
                 "--paired"]) == 2
    assert "--paired needs --seeds 2 or more" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


@pytest.mark.slow
def test_an_estimator_is_calibrated_on_one_fit_and_says_so(tmp_path: Path) -> None:
    store = tmp_path / "T.json"
    proc = _parabench(["calibrate", "--workload", "random_forest", "--profile", "tiny",
                       "--seeds", "2", "--targets", str(store)], tmp_path / "cache", tmp_path)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "2 seed(s), one fit each (an estimator: --max-epochs does not apply)" in proc.stdout
    assert "at most" not in proc.stdout.splitlines()[0]
    (entry,) = read_store(store)["random_forest"]["tiny"]
    assert entry["epochs"] == 1 and len(entry["values"]) == 2
