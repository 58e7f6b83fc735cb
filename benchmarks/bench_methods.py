"""asv benchmarks: every (workload, method, device, workers) case in parabench's registry.

Usage::

    asv machine --yes
    PARABENCH_ASV_PROFILE=tiny asv run -E existing:$(command -v python) --set-commit-hash HEAD
    asv publish                      # site in .asv/html; `asv preview` serves it
    bash scripts/asv_history.sh 2    # the last 2 commits of main (tiny, a bounded selection)

The parameter axes are workload x method x device x workers, read from
:func:`parabench.sweep.bench.bench_cases` (the planner's): a method added to the registry adds
its cases here. A combination that is not a case, or that cannot run on this machine (no GPU,
too few cores, an engine missing), raises ``NotImplementedError`` in ``setup``, which asv
shows as n/a. A case that *fails* is a failure, never n/a. ``PARABENCH_ASV_PROFILE`` (tiny |
quick | full, default quick) sizes the data and models. asv's ``-b`` selects combinations by
name, e.g. ``-b "\\('mlp', '(serial|ddp)', "`` (``scripts/asv_history.sh`` uses such a subset).

**The unit** is the CLI's and pytest-benchmark's: a steady-state speed *window* (N global
mini-batch steps over :func:`~parabench.torch.loop.window_order`, N calibrated by a warm-up
window to about ``WINDOW_TARGET_S``; one fit / round / epoch for sessions whose
``window_unit`` says so), through :mod:`parabench.case.lifecycle`. ``Window.time_window``
times one in this process (:class:`~parabench.case.lifecycle.StartedCase`); the ``track_*``
figures come from the case run as ``parabench run`` runs it
(:func:`parabench.case.isolate.run_isolated`: its own process tree, one epoch for the quality,
then the CLI's warm-up window and steady windows), so they carry parabench's summed peak memory
(PSS) and the same throughput (median window samples/s, with its 95 % bootstrap interval) as
the CLI's table. The benchmark was ``Epoch.time_epoch`` (one steady epoch) before windows: its
asv history ends there and ``Window.time_window``'s starts.

**Hardware-normalised.** The ratio tracks compare a case with serial runs measured *in the
same asv session* on the same machine, through :func:`parabench.analysis.ratios.ratios` (serial
at the same total cores for the speedup, at the threads per worker for the scaling
efficiency), so a slower or busier machine moves both sides and does not read as a regression.

**Every figure is lower-is-better** (asv reads a larger number as worse, also for ``track_*``);
each class docstring says what its figures mean.

**asv's limits.** Nothing heavy runs in ``setup_cache`` (it only names the session): each
case is measured at most once per session, lazily, in the ``setup`` of the first track that
needs it, and kept in a JSON file in the session's cache directory (asv runs every benchmark
sharing a ``setup_cache`` in that directory), where the other tracks read it. One ``setup``
measures at most three cases (the case and its two serial baselines), each under
``TIMEOUT_S[profile] / 3`` (its ``timeout_s``), inside the benchmark's ``timeout`` of
``TIMEOUT_S[profile]``, so no limit drops the tracks.

The module imports against an older parabench that has no :mod:`parabench.sweep.bench` (history
builds install old commits into the environment): discovery still works, and every benchmark
is n/a for that commit; a commit without ``run_isolated`` or ``compare.ratios``, or whose results
have no speed windows, shows its tracks as n/a and still times its ``step``.
"""

from __future__ import annotations

import fcntl
import json
import os
import statistics
import tempfile
from pathlib import Path
from typing import Any

PROFILE_ENV = "PARABENCH_ASV_PROFILE"
DEFAULT_PROFILE = "quick"
PARAM_NAMES = ["workload", "method", "device", "workers"]
#: asv's per-benchmark limit (setup, every sample, teardown) by profile
TIMEOUT_S = {"tiny": 300.0, "quick": 1800.0, "full": 7200.0}
#: cases one track's ``setup`` may have to measure: the case and its two serial baselines
MEASURED_PER_SETUP = 3
#: epochs a track's run trains (for the quality; speed comes from the windows after them)
TRACK_EPOCHS = 1
#: where the session's measurements live, relative to asv's cache directory (the cwd)
FIGURES_DIR = "parabench-figures"
#: setup_cache only names the session: seconds are plenty
SETUP_CACHE_TIMEOUT_S = 60.0

try:
    try:
        from parabench.case.lifecycle import StartedCase
        from parabench.sweep.bench import BASELINE, bench_cases
    except ImportError:  # commits before the case/ sweep/ layout: asv history reaches back
        from parabench.bench import BASELINE, StartedCase, bench_cases  # type: ignore
    from parabench.registry import workloads

    _CASES = bench_cases()
    _MISSING: str | None = None
except Exception as exc:  # an older parabench, or a broken registry: keep discovery alive
    _CASES = []
    _MISSING = f"parabench.sweep.bench is unusable in this environment: {exc!r}"

try:  # the CLI's isolated runner: the tracks need it, the window timing does not
    from parabench.case.isolate import run_isolated
except Exception:  # pragma: no cover - an older parabench
    run_isolated = None  # type: ignore[assignment]

_BY_KEY = {(c.workload, c.method, c.device, c.workers): c for c in _CASES}


def _profile() -> str:
    return os.environ.get(PROFILE_ENV, DEFAULT_PROFILE)


def _timeout() -> float:
    return TIMEOUT_S.get(_profile(), TIMEOUT_S[DEFAULT_PROFILE])


def _axes() -> list[list[Any]]:
    if _CASES:
        methods = sorted({c.method for c in _CASES}, key=lambda m: (m != BASELINE, m))
        return [
            sorted({c.workload for c in _CASES}),
            methods,
            sorted({c.device for c in _CASES}, key=lambda d: (d != "cpu", d)),
            sorted({c.workers for c in _CASES}),
        ]
    # Same axis values as a current parabench would give where possible, so an old commit's
    # n/a lines up with the newer commits' points in the published graphs.
    try:
        from parabench.registry import methods as method_registry
        from parabench.registry import workloads as workload_registry

        return [workload_registry.names(), method_registry.names(), ["cpu"], [1]]
    except Exception:
        return [["mlp"], ["serial"], ["cpu"], [1]]


def _case_key(case_key: Any, workload: str, method: str, device: str, workers: int,
              profile: str, threads: int) -> Any:
    """A benchmark case's key as ``ratios`` reads it: ``CaseKey.bench`` (parabench.identity,
    the one definition); commits before it had the same tuple, spelled out."""
    if hasattr(case_key, "bench"):
        return case_key.bench(workload, method, device, workers, profile, threads)
    return case_key(workload, method, device, workers, "-", profile, "-", threads)


def _case(workload: str, method: str, device: str, workers: int) -> Any:
    """The runnable case for these parameters; NotImplementedError (asv: n/a) otherwise."""
    if _MISSING is not None:
        raise NotImplementedError(_MISSING)
    if (profile := _profile()) not in TIMEOUT_S:
        raise ValueError(f"{PROFILE_ENV}={profile!r}; valid: {', '.join(TIMEOUT_S)}")
    case = _BY_KEY.get((workload, method, device, workers))
    if case is None:
        raise NotImplementedError(f"{method} has no case {workload}/{device}/w{workers}")
    if (reason := case.skip_reason(profile)) is not None:
        raise NotImplementedError(f"{case.id}: {reason}")
    return case


class _Cases:
    params = _axes()
    param_names = PARAM_NAMES
    timeout = _timeout()


# The clock time_window is read by: it advances only by the window time the session reports,
# which is what parabench's results record (slowest rank between barriers, CUDA synchronised).
_session_seconds = [0.0]


def _session_clock() -> float:
    return _session_seconds[0]


def _epoch_equivalent(seconds: float, samples: int | None, samples_per_epoch: int | None
                      ) -> float:
    """``seconds`` for ``samples`` scaled to one epoch's samples (equal work per sample);
    unscaled when either count is unknown (an older parabench, or a window of one epoch)."""
    if not samples or not samples_per_epoch:
        return seconds
    return seconds * samples_per_epoch / samples


class Window(_Cases):
    """One steady-state speed window of an already started, warmed-up, calibrated session.

    - ``time_window`` (seconds per epoch's worth of samples, lower is better): the window time
      the session reports, scaled to one epoch's samples (window seconds x samples per epoch /
      window samples, as :attr:`parabench.case.result.Result.median_epoch_s`). The scaling
      makes asv's samples and commits comparable: each ``setup`` calibrates its own N so that a
      window takes about ``WINDOW_TARGET_S``, so raw window seconds would read the same on a
      commit twice as slow.
      A fit, round or epoch window is one epoch's samples: its seconds as they are.
      asv re-runs ``setup`` before every sample, so each sample is one window of a freshly
      started session; start-up, the warm-up epoch and the warm-up (calibration) window are in
      ``setup``, outside the timing. At least 7 samples per commit (``--quick``: one), enough
      for asv's Mann-Whitney test to call a change significant; asv keeps them only with
      ``--record-samples`` (the history script passes it), else ``asv compare`` falls back to a
      coarser confidence-interval check.

    Memory is ``Case.track_peak_pss_mb``: asv's own ``peakmem`` sees this process only, so a
    multi-process method would look lighter than serial there.
    """

    number = 1
    rounds = 1
    repeat = (7, 10, 120.0)  # (min samples, max samples, stop after this many seconds)
    warmup_time = 0.0  # the warm-up epoch and window run in setup

    timer = staticmethod(_session_clock)

    def setup(self, workload: str, method: str, device: str, workers: int) -> None:
        case = _case(workload, method, device, workers)
        self.started = StartedCase(case.config(profile=_profile()))
        self.started.__enter__()

    def teardown(self, *params: Any) -> None:
        started, self.started = getattr(self, "started", None), None
        if started is not None:
            started.__exit__(None, None, None)

    def time_window(self, *params: Any) -> None:
        stats = self.started.step()
        _session_seconds[0] += _epoch_equivalent(stats.seconds, getattr(stats, "samples", None),
                                                 self.started.samples_per_epoch)


# --- the tracks: each case measured once per asv session, as `parabench run` measures it ------

def _figures_of(result: Any) -> dict[str, Any]:
    """A finished Result's figures for the tracks (an error entry when it did not finish ok)."""
    if result.status != "ok":
        return {"error": f"{result.status}: {result.reason}"}
    if not hasattr(result, "window_rates"):  # a commit before speed windows: n/a, not failed
        return {"na": "this parabench's results have no speed windows"}
    rates = result.window_rates
    if len(rates) < 2:  # the CLI always measures >= 2 steady windows; fewer: no median or CI
        return {"error": f"{len(rates)} steady speed window(s) recorded "
                         f"({len(result.window_s)} in all): no steady-state throughput"}
    from parabench.analysis.stats import median_ci  # here: windows and median_ci came together

    rate = statistics.median(rates)
    low, high = result.samples_per_s_ci or median_ci(rates)
    pss = getattr(result, "peak_pss_mb", None)  # None: an older parabench, or unreadable
    return {
        "threads": result.threads_per_worker,
        "samples_per_s": rate,
        "samples_per_s_ci": [low, high],
        "ci_halfwidth": (high - low) / 2 / rate,
        "seconds_per_sample": 1.0 / rate,
        "windows": len(rates),
        "window": result.window,
        "startup_s": result.startup_s,
        "quality": result.quality.value if result.quality else None,
        "peak_mb": pss if pss is not None else result.peak_rss_mb,
        "peak_source": "pss" if pss is not None else "rss",
        "busy": bool((getattr(result, "machine", None) or {}).get("busy")),
    }


def _measure(config: Any) -> dict[str, Any]:
    """Run ``config`` isolated, as the CLI does: an epoch (quality), then its speed windows."""
    if run_isolated is None:
        raise NotImplementedError("this parabench has no parabench.case.isolate.run_isolated")
    config = config.replace(epochs=TRACK_EPOCHS, timeout_s=_timeout() / MEASURED_PER_SETUP)
    with tempfile.TemporaryDirectory(prefix="parabench-asv-") as tmp:
        return _figures_of(run_isolated(config, workdir=Path(tmp)))


def measured(case: Any, threads: int | None = None) -> dict[str, Any]:
    """The case's figures in this asv session (at ``threads`` threads per worker if given).

    Read from the session's figures directory (asv's cache directory, the cwd), or measured
    now and stored there; a lock keeps two benchmarks from measuring at once (which would
    also slow each other down).
    """
    config = case.config(_profile())
    if threads is not None:
        config = config.replace(threads_per_worker=threads)
    folder = Path(FIGURES_DIR)
    folder.mkdir(exist_ok=True)
    path = folder / f"{case.id}-t{config.threads}.json"
    with open(folder / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not path.exists():
            figures = _measure(config)
            partial = path.with_suffix(".partial")
            partial.write_text(json.dumps(figures))
            os.replace(partial, path)  # never a half-written file for the next reader
        figures = json.loads(path.read_text())
    if "na" in figures:
        raise NotImplementedError(f"{case.id}: {figures['na']}")
    if "error" in figures:
        raise RuntimeError(f"{case.id} t={config.threads} failed: {figures['error']}")
    return figures


class _Measured(_Cases):
    """Tracks sharing one asv cache directory, where :func:`measured` keeps its figures."""

    def setup_cache(self) -> dict[str, Any]:
        # Only names the session: the measuring happens in each track's setup, within its own
        # timeout, so asv's setup_cache limit can no longer drop every track at once.
        return {"profile": _profile(), "cwd": os.getcwd()}

    # Shared by every subclass (asv keys the cache by this function): one session directory.
    setup_cache.timeout = SETUP_CACHE_TIMEOUT_S


class Case(_Measured):
    """Figures of the case itself, from its steady-state speed windows.

    - ``track_seconds_per_sample`` (seconds/sample, lower is better): 1 / the median of the
      windows' samples/s (every rank's samples): the inverse of throughput.
    - ``track_speed_ci_halfwidth`` (ratio, lower is better): half the width of that median's
      95 % bootstrap confidence interval, over the median: how noisy the speed figure is (the
      issue's target is <= 0.05 on a quiet machine for mlp/cnn serial and ddp).
    - ``track_startup_s`` (seconds, lower is better): starting the session (spawn, rendezvous,
      cluster, JIT, data, model).
    - ``track_peak_pss_mb`` (MB, lower is better): parabench's peak of the PSS sum over the
      case's whole process tree (every worker; shared pages counted once), as ``parabench
      run`` records it (``peak_pss_mb``); the RSS sum where PSS was unreadable.
    """

    def setup(self, cache: dict, workload: str, method: str, device: str, workers: int) -> None:
        self.figures = measured(_case(workload, method, device, workers))

    def track_seconds_per_sample(self, *params: Any) -> float:
        return self.figures["seconds_per_sample"]

    track_seconds_per_sample.unit = "seconds/sample"

    def track_speed_ci_halfwidth(self, *params: Any) -> float:
        return self.figures["ci_halfwidth"]

    track_speed_ci_halfwidth.unit = "ratio"

    def track_startup_s(self, *params: Any) -> float:
        return self.figures["startup_s"]

    track_startup_s.unit = "seconds"

    def track_peak_pss_mb(self, *params: Any) -> float:
        return self.figures["peak_mb"]

    track_peak_pss_mb.unit = "MB"


class VersusSerial(_Measured):
    """The case against serial measured in the same session: hardware-normalised ratios.

    The baselines are :func:`parabench.analysis.ratios.ratios`'s, at the same workload, device
    and profile: serial with the same total cores (workers x threads) and serial at the
    threads per worker.

    - ``track_slowdown_vs_serial`` (ratio, lower is better): 1 / speedup, the case's seconds
      per sample (median window) over serial's at the same total cores. 1 is no gain; 0.5 is
      twice as fast. Per sample, since the two calibrate different steps per window.
    - ``track_scaling_shortfall`` (ratio, lower is better): 1 - scaling efficiency (speedup
      over serial at the threads per worker, / workers). 0 is linear scaling.
    - ``track_quality_gap`` (quality units, lower is better): how far the case's quality falls
      short of serial's at the same total cores
      (:func:`parabench.analysis.ratios.quality_shortfall`: positive is worse than serial).
    - ``track_memory_vs_serial`` (ratio, lower is better): the case's peak PSS sum over
      serial's at the same total cores (2 is twice serial's memory).

    Serial itself gives 1, 0, 0 and 1.
    """

    def setup(self, cache: dict, workload: str, method: str, device: str, workers: int) -> None:
        case = _case(workload, method, device, workers)
        try:  # imported here: a commit without them still runs the other benchmarks
            from parabench.analysis.ratios import CaseKey, baseline_of, quality_shortfall, ratios
        except ImportError as exc:
            raise NotImplementedError(f"this parabench has no compare.ratios: {exc}") from exc
        self.figures = measured(case)
        threads, profile = self.figures["threads"], _profile()
        base = baseline_of(method)
        if (baseline := _BY_KEY.get((workload, base, device, 1))) is None:
            raise NotImplementedError(f"no {base} baseline for {workload} on {device}")
        if (reason := baseline.skip_reason(profile)) is not None:
            raise NotImplementedError(f"{baseline.id}: {reason}")
        key = _case_key(CaseKey, workload, method, device, workers, profile, threads)
        times, self.baselines = {key: self.figures["seconds_per_sample"]}, {}
        for n in (workers * threads, threads):  # equal cores; threads per worker
            self.baselines[n] = figures = measured(baseline, threads=n)
            times[_case_key(CaseKey, workload, base, device, 1, profile, n)] = figures[
                "seconds_per_sample"]
        self.ratios = ratios(key, times)
        self.serial = self.baselines[workers * threads]
        higher_is_better = workloads.get(workload).quality.higher_is_better
        self._gap = quality_shortfall(self.figures["quality"], self.serial["quality"],
                                      higher_is_better)

    def track_slowdown_vs_serial(self, *params: Any) -> float:
        return 1.0 / self.ratios.speedup.value

    track_slowdown_vs_serial.unit = "ratio"

    def track_scaling_shortfall(self, *params: Any) -> float:
        return 1.0 - self.ratios.scaling_efficiency.value

    track_scaling_shortfall.unit = "ratio"

    def track_quality_gap(self, *params: Any) -> float:
        return self._gap

    track_quality_gap.unit = "quality"

    def track_memory_vs_serial(self, *params: Any) -> float:
        return self.figures["peak_mb"] / self.serial["peak_mb"]

    track_memory_vs_serial.unit = "ratio"

