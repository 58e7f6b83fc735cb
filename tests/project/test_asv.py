"""The asv suite end to end: a ``--quick`` run of this commit, then the published site.

Run: ``pytest tests/project/test_asv.py`` (about a minute on 2 cores; skipped when asv is missing).

asv runs in this Python environment (``-E existing:<this python>``) with the ``tiny`` profile,
on a clone of this repository whose ``main`` is this commit, with this checkout's
``benchmarks/`` and an ``asv.conf.json`` derived from the real one. Results, site and the asv
machine file all go to a temporary directory: nothing in the checkout or in ``~`` changes.
``scripts/asv_history.sh`` reinstalls packages into the environment, so here it is only
syntax-checked; run it by hand (``bash scripts/asv_history.sh 2``).
"""

from __future__ import annotations

import itertools
import json
import os
import re
import shutil
import site
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.cpu, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
SERIAL_MLP = ("'mlp'", "'serial'", "'cpu'", "1")  # asv's repr() of the parameter values


@dataclass(frozen=True)
class AsvSite:
    sha: str
    run: subprocess.CompletedProcess[str]
    results: Path
    html: Path
    index: dict


def _git(*args: str, cwd: Path = ROOT) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True,
                          text=True).stdout.strip()


def _asv(conf: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "asv", "--config", str(conf), *args], env=env,
                          capture_output=True, text=True, timeout=150)


@pytest.fixture(scope="module")
def asv_site(tmp_path_factory: pytest.TempPathFactory) -> AsvSite:
    pytest.importorskip("asv", reason="asv is not installed: pip install -e '.[test]'")
    tmp = tmp_path_factory.mktemp("asv")
    sha = _git("rev-parse", "HEAD")
    # asv publishes the commits of the configured branch: give the clone a `main` at this
    # commit, whatever this checkout's branch is (CI checks out detached or shallow).
    clone = tmp / "repo"
    subprocess.run(["git", "clone", "--quiet", "--no-checkout", str(ROOT), str(clone)],
                   check=True, capture_output=True)
    _git("update-ref", "refs/heads/main", sha, cwd=clone)

    conf = json.loads((ROOT / "asv.conf.json").read_text())
    conf.update(repo=str(clone), branches=["main"], benchmark_dir=str(ROOT / "benchmarks"),
                env_dir=str(tmp / "env"), results_dir=str(tmp / "results"),
                html_dir=str(tmp / "html"))
    conf_path = tmp / "asv.conf.json"
    conf_path.write_text(json.dumps(conf, indent=2))

    home = tmp / "home"  # `asv machine` writes ~/.asv-machine.json
    home.mkdir()
    env = {**os.environ, "HOME": str(home), "PYTHONUSERBASE": site.getuserbase(),
           "PARABENCH_ASV_PROFILE": "tiny", "PYTHONDONTWRITEBYTECODE": "1",
           # the suite's machinery on one workload: every case would take far too long here
           "PARABENCH_WORKLOADS": "mlp", "PARABENCH_METHODS": "serial"}
    machine = _asv(conf_path, env, "machine", "--yes")
    assert machine.returncode == 0, machine.stdout + machine.stderr
    run = _asv(conf_path, env, "run", "-E", f"existing:{sys.executable}",
               "--set-commit-hash", sha, "--quick", "--show-stderr")
    publish = _asv(conf_path, env, "publish")
    assert publish.returncode == 0, publish.stdout + publish.stderr
    index = json.loads((tmp / "html" / "index.json").read_text())
    return AsvSite(sha=sha, run=run, results=tmp / "results", html=tmp / "html", index=index)


def _value(site_: AsvSite, benchmark: str, params: tuple[str, ...] = SERIAL_MLP) -> float | None:
    """The published value of one parameter combination of ``benchmark`` at this commit."""
    assert benchmark in site_.index["benchmarks"], sorted(site_.index["benchmarks"])
    combos = list(itertools.product(*site_.index["benchmarks"][benchmark]["params"]))
    assert params in combos, f"{params} not among {combos}"
    graphs = [p for p in (site_.html / "graphs").rglob(f"{benchmark}.json")
              if "summary" not in p.parts]
    assert len(graphs) == 1, f"expected one graph for {benchmark}, found {graphs}"
    revision = {h: int(r) for r, h in site_.index["revision_to_hash"].items()}[site_.sha]
    points = {rev: values for rev, values in json.loads(graphs[0].read_text())}
    assert revision in points, f"no point for {site_.sha[:8]} in {graphs[0]}"
    return points[revision][combos.index(params)]


def test_asv_runs_every_benchmark_of_this_commit_without_failures(asv_site: AsvSite) -> None:
    output = asv_site.run.stdout + asv_site.run.stderr
    # asv exits 2 when a benchmark failed; n/a (NotImplementedError in setup) is not a failure
    assert asv_site.run.returncode == 0, output
    assert list(asv_site.results.glob(f"*/{asv_site.sha[:8]}-existing-*.json")), output


def test_published_site_has_the_serial_mlp_window_time(asv_site: AsvSite) -> None:
    assert (asv_site.html / "index.html").is_file()
    seconds = _value(asv_site, "bench_methods.Window.time_window")
    assert seconds is not None and 0 < seconds < 60, seconds
    peak = _value(asv_site, "bench_methods.Case.track_peak_pss_mb")
    assert peak is not None and peak > 10, peak  # MB: torch alone is more


def test_tracks_are_lower_is_better_figures_against_serial(asv_site: AsvSite) -> None:
    per_sample = _value(asv_site, "bench_methods.Case.track_seconds_per_sample")
    assert per_sample is not None and 0 < per_sample < 1, per_sample
    startup = _value(asv_site, "bench_methods.Case.track_startup_s")
    assert startup is not None and startup >= 0, startup
    halfwidth = _value(asv_site, "bench_methods.Case.track_speed_ci_halfwidth")
    assert halfwidth is not None and halfwidth >= 0, halfwidth  # relative: no bound when busy
    # serial against itself: the same measurement on both sides of the ratio and the gap
    assert _value(asv_site, "bench_methods.VersusSerial.track_slowdown_vs_serial") == 1.0
    assert _value(asv_site, "bench_methods.VersusSerial.track_scaling_shortfall") == 0.0
    assert _value(asv_site, "bench_methods.VersusSerial.track_quality_gap") == 0.0
    assert _value(asv_site, "bench_methods.VersusSerial.track_memory_vs_serial") == 1.0
    units = {name: b.get("unit") for name, b in asv_site.index["benchmarks"].items()}
    assert units["bench_methods.Case.track_seconds_per_sample"] == "seconds/sample"
    assert units["bench_methods.VersusSerial.track_slowdown_vs_serial"] == "ratio"


def test_benchmarks_are_na_on_a_parabench_without_bench() -> None:
    """An old commit installed by the history script lacks parabench.sweep.bench: n/a, no crash."""
    pytest.importorskip("asv", reason="asv is not installed: pip install -e '.[test]'")
    code = """
import sys
sys.modules["parabench.sweep.bench"] = None  # import parabench.sweep.bench now raises ImportError
sys.path.insert(0, sys.argv[1])
from benchmarks import bench_methods as b
assert b._MISSING and "parabench.sweep.bench" in b._MISSING, b._MISSING
assert b.Window.params[1] and b.Window.param_names[0] == "workload", b.Window.params
try:
    b.Window().setup("mlp", "serial", "cpu", 1)
except NotImplementedError:
    pass
else:
    raise AssertionError("setup ran without parabench.sweep.bench")
assert b.Case().setup_cache()["profile"]  # cheap: names the session, measures nothing
print("ok")
"""
    proc = subprocess.run([sys.executable, "-c", code, str(ROOT)], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stdout + proc.stderr


def test_history_script_is_valid_bash() -> None:
    script = ROOT / "scripts" / "asv_history.sh"
    proc = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    if shellcheck := shutil.which("shellcheck"):
        proc = subprocess.run([shellcheck, str(script)], capture_output=True, text=True)
        assert proc.returncode == 0, proc.stdout


# --- structure, without running asv: crafted measurements in place of real runs -------------

def _bench() -> Any:
    sys.path.insert(0, str(ROOT))
    try:
        from benchmarks import bench_methods
    finally:
        sys.path.remove(str(ROOT))
    return bench_methods


def _crafted(config: Any) -> dict[str, Any]:
    """Figures by config: serial 100 samples/s at 2 threads, 62.5 at 1; ddp 2 x 1 at 200."""
    rate = {("serial", 2): 100.0, ("serial", 1): 62.5, ("ddp", 1): 200.0}[config.method,
                                                                          config.threads]
    return {"threads": config.threads, "samples_per_s": rate, "seconds_per_sample": 1 / rate,
            "samples_per_s_ci": [rate * 0.9, rate * 1.1], "ci_halfwidth": 0.1,
            "startup_s": 1.0, "quality": 0.9 if config.method == "serial" else 0.88,
            "peak_mb": 500.0 * config.workers ** 0.5, "peak_source": "pss", "busy": False}


def test_tracks_are_ratios_against_serial_of_the_same_session(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    b = _bench()
    if b._MISSING or ("mlp", "ddp", "cpu", 2) not in b._BY_KEY:
        pytest.skip(f"no mlp ddp x2 case here: {b._MISSING}")
    monkeypatch.setenv(b.PROFILE_ENV, "tiny")
    monkeypatch.chdir(tmp_path)  # asv runs tracks in the session's cache directory
    measured: list[tuple[str, int]] = []
    monkeypatch.setattr(b, "_measure", lambda c: measured.append((c.method, c.threads))
                        or _crafted(c))
    v = b.VersusSerial()
    v.setup(v.setup_cache(), "mlp", "ddp", "cpu", 2)
    assert v.track_slowdown_vs_serial() == pytest.approx(0.5)      # 100 / 200 samples/s
    assert v.track_scaling_shortfall() == pytest.approx(1 - 1.6)   # 200 / 62.5 / 2 = 1.6
    assert v.track_quality_gap() == pytest.approx(0.02)            # positive: worse
    assert v.track_memory_vs_serial() == pytest.approx(2 ** 0.5)
    c = b.Case()
    c.setup({}, "mlp", "ddp", "cpu", 2)  # read from the session's files: not measured again
    assert c.track_peak_pss_mb() == pytest.approx(500.0 * 2 ** 0.5)
    assert sorted(measured) == [("ddp", 1), ("serial", 1), ("serial", 2)], measured


def test_every_track_is_declared_lower_is_better_and_within_asv_limits() -> None:
    b = _bench()
    tracks = {f"{cls.__name__}.{name}": cls for cls in (b.Case, b.VersusSerial)
              for name in dir(cls) if name.startswith("track_")}
    assert len(tracks) == 8, sorted(tracks)
    for name, cls in tracks.items():  # every docstring states its figures as lower-is-better
        assert f"``{name.split('.')[1]}``" in cls.__doc__, name
    assert (b.__doc__ or "").count("lower-is-better") >= 1
    assert not any(n.startswith("peakmem_") for n in dir(b.Window)), "asv's peakmem: one process"
    json.dumps(b.Window.params)  # asv stores the params as JSON
    for cls in (b.Window, b.Case, b.VersusSerial):
        assert cls.timeout == b.TIMEOUT_S[os.environ.get(b.PROFILE_ENV, b.DEFAULT_PROFILE)]
    assert b._Measured.setup_cache.timeout <= min(b.TIMEOUT_S.values()) / 5


def test_history_script_defaults_to_tiny_and_a_bounded_selection() -> None:
    text = (ROOT / "scripts" / "asv_history.sh").read_text()
    assert "PARABENCH_ASV_PROFILE=${PARABENCH_ASV_PROFILE:-tiny}" in text
    lines = [ln for ln in text.splitlines() if ln.startswith("default_bench")]
    proc = subprocess.run(["bash", "-c", "\n".join([*lines, 'printf %s "$default_bench"'])],
                          capture_output=True, text=True, check=True)
    regex = proc.stdout

    def picked(w: str, m: str, n: int) -> bool:
        return re.search(regex, f"bench_methods.Case.track_startup_s('{w}', '{m}', 'cpu', {n})"
                         ) is not None

    assert all(picked(*c) for c in [("mlp", "serial", 1), ("mlp", "ddp", 2),
                                    ("random_forest", "serial", 1),
                                    ("random_forest", "rf_threads", 2)])
    assert not any(picked(*c) for c in [("mlp", "ddp", 1), ("cnn", "ddp", 2),
                                        ("vgg11", "serial", 1),
                                        ("random_forest", "rf_threads+torch", 2)])


def _result(**fields: Any) -> Any:
    from parabench.case.result import Result

    base = dict(workload="mlp", method="serial", device="cpu", workers=1, threads_per_worker=2,
                batch_size=64, epochs=1, profile="tiny", seed=0, repeat=0, status="ok",
                samples_per_epoch=1000, epoch_s=[9.0], startup_s=1.0, peak_rss_mb=300.0)
    return Result(**{**base, **fields})


def test_track_figures_come_from_the_steady_windows_only() -> None:
    """Windows: a 0.1 s warm-up (left out), then 100, 400 and 200 samples/s: median 200."""
    b = _bench()
    result = _result(window_s=[0.1, 1.0, 0.5, 1.0], window_samples=[300, 100, 200, 200],
                     window={"unit": "steps", "steps": 2, "warmup": 1},
                     samples_per_s_ci=[150.0, 250.0])
    figures = b._figures_of(result)
    assert figures["samples_per_s"] == pytest.approx(200.0)  # not 3000 (the warm-up window)
    assert figures["seconds_per_sample"] == pytest.approx(1 / 200)  # not the 9 s epoch's
    assert figures["ci_halfwidth"] == pytest.approx(0.25)  # (250 - 150) / 2 / 200
    assert figures["windows"] == 3 and json.dumps(figures)  # stored as JSON
    # no steady windows (only the warm-up one, or none): an error entry, never an epoch figure
    for s, n in (([0.1], [300]), ([], [])):
        figures = b._figures_of(_result(window_s=s, window_samples=n, window={"warmup": 1}))
        assert "steady speed window" in figures["error"], figures
    assert "error" in b._figures_of(_result(status="failed", reason="boom"))


def test_time_window_reads_seconds_per_epoch_of_samples() -> None:
    """Each setup calibrates its own N: the timed figure is per sample, scaled to an epoch."""
    b = _bench()
    assert b._epoch_equivalent(0.5, 250, 1000) == pytest.approx(2.0)  # 4 windows an epoch
    assert b._epoch_equivalent(0.5, 500, 1000) == pytest.approx(1.0)  # half the time a sample
    assert b._epoch_equivalent(3.0, 1000, 1000) == 3.0  # a fit / epoch window: as it is
    assert b._epoch_equivalent(3.0, None, 1000) == 3.0  # an older parabench: no scaling
