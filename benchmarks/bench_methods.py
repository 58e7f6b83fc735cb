"""asv benchmarks: every (workload, method, device, workers) case in parabench's registry.

Usage::

    asv machine --yes
    PARABENCH_ASV_PROFILE=tiny asv run -E existing:$(command -v python) --set-commit-hash HEAD
    asv publish                      # site in .asv/html; `asv preview` serves it
    bash scripts/asv_history.sh 5    # the last 5 commits of main, benchmarked and published

The parameter axes are workload x method x device x workers, read from
:func:`parabench.sweep.bench.bench_cases` (the planner's): a method added to the registry adds
its cases here. A combination that is not a case, or that cannot run on this machine (no GPU,
too few cores, an engine missing), raises ``NotImplementedError`` in ``setup``, which asv
shows as n/a. A case that *fails* is a failure, never n/a. ``PARABENCH_ASV_PROFILE`` (tiny |
quick | full, default quick) sizes the data and models.

asv reads a larger number as worse, even for ``track_*``, so every figure here is
lower-is-better (each class docstring says what its figures mean).

The module imports against an older parabench that has no :mod:`parabench.sweep.bench` (history
builds install old commits into the environment): discovery still works, and every benchmark
is n/a for that commit.
"""

from __future__ import annotations

import os
import statistics
from typing import Any

PROFILE_ENV = "PARABENCH_ASV_PROFILE"
DEFAULT_PROFILE = "quick"
PARAM_NAMES = ["workload", "method", "device", "workers"]
#: asv's per-benchmark limit (setup, every sample, teardown) by profile
TIMEOUT_S = {"tiny": 300.0, "quick": 1800.0, "full": 7200.0}
#: epochs measured per case for the track_* figures (their median is reported)
TRACK_STEPS = {"tiny": 5, "quick": 3, "full": 3}

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

_BY_KEY = {(c.workload, c.method, c.device, c.workers): c for c in _CASES}


def _profile() -> str:
    return os.environ.get(PROFILE_ENV, DEFAULT_PROFILE)


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
    timeout = TIMEOUT_S.get(_profile(), TIMEOUT_S[DEFAULT_PROFILE])


# The clock time_epoch is read by: it advances only by the epoch time the session reports,
# which is what parabench's results record (slowest rank between barriers, CUDA synchronised).
_session_seconds = [0.0]


def _session_clock() -> float:
    return _session_seconds[0]


class Epoch(_Cases):
    """One steady-state epoch of an already started, warmed-up session.

    - ``time_epoch`` (seconds, lower is better): the epoch time the session reports. asv
      re-runs ``setup`` before every sample, so each sample is one epoch of a freshly started
      session; start-up and the warm-up epoch are in ``setup``, outside the timing. At least
      7 samples per commit (``--quick``: one), enough for asv's Mann-Whitney test to call a
      change significant; asv keeps them only with ``--record-samples`` (the history script
      passes it), else ``asv compare`` falls back to a coarser confidence-interval check.
    - ``peakmem_epoch`` (bytes, lower is better): asv's peak RSS of the benchmark process while
      set up and running an epoch. It covers this process only: for multi-process methods the
      summed peak over all workers is in parabench's own results (``parabench run``).
    """

    number = 1
    rounds = 1
    repeat = (7, 10, 120.0)  # (min samples, max samples, stop after this many seconds)
    warmup_time = 0.0  # the warm-up epoch runs in setup
    timer = staticmethod(_session_clock)

    def setup(self, workload: str, method: str, device: str, workers: int) -> None:
        case = _case(workload, method, device, workers)
        self.started = StartedCase(case.config(profile=_profile()))
        self.started.__enter__()

    def teardown(self, *params: Any) -> None:
        started, self.started = getattr(self, "started", None), None
        if started is not None:
            started.__exit__(None, None, None)

    def time_epoch(self, *params: Any) -> None:
        _session_seconds[0] += self.started.step().seconds

    def peakmem_epoch(self, *params: Any) -> None:
        self.started.step()


def _measure(case: Any, profile: str) -> dict[str, float]:
    with StartedCase(case.config(profile=profile)) as started:
        steps = [started.step() for _ in range(TRACK_STEPS[profile])]
        return {
            "startup_s": started.startup_s,
            "epoch_s": statistics.median(s.seconds for s in steps),
            "seconds_per_sample": statistics.median(s.seconds / s.samples for s in steps),
            "quality": started.quality(),
        }


class _Measured(_Cases):
    """Every runnable case measured once per commit, in ``setup_cache``, shared by the tracks."""

    def setup_cache(self) -> dict[str, dict[str, Any]]:
        figures: dict[str, dict[str, Any]] = {}
        if _MISSING is not None:
            return figures
        profile = _profile()
        for case in _CASES:
            if case.skip_reason(profile) is not None:
                continue
            try:
                figures[case.id] = _measure(case, profile)
            except Exception as exc:  # one broken case must not take the others down
                figures[case.id] = {"error": f"{type(exc).__name__}: {exc}"}
        return figures

    # Shared by both subclasses (asv keys the cache by this function): measured once.
    setup_cache.timeout = 4 * TIMEOUT_S.get(_profile(), TIMEOUT_S[DEFAULT_PROFILE])

    def _figures(self, cache: dict[str, dict[str, Any]], case: Any) -> dict[str, Any]:
        figures = cache.get(case.id)
        if figures is None:
            raise NotImplementedError(f"{case.id} was not measured")
        if "error" in figures:
            raise RuntimeError(f"{case.id} failed: {figures['error']}")  # a failure, not n/a
        return figures


class Case(_Measured):
    """Figures of the case itself, medians over a few steady-state epochs.

    - ``track_seconds_per_sample`` (seconds/sample, lower is better): epoch time / samples
      trained in it (every rank's samples): the inverse of throughput.
    - ``track_startup_s`` (seconds, lower is better): starting the session (spawn, rendezvous,
      cluster, JIT, data, model), measured once.
    """

    def setup(self, cache: dict, workload: str, method: str, device: str, workers: int) -> None:
        self.figures = self._figures(cache, _case(workload, method, device, workers))

    def track_seconds_per_sample(self, *params: Any) -> float:
        return self.figures["seconds_per_sample"]

    track_seconds_per_sample.unit = "seconds/sample"

    def track_startup_s(self, *params: Any) -> float:
        return self.figures["startup_s"]

    track_startup_s.unit = "seconds"


class VersusSerial(_Measured):
    """The case against the serial baseline at the same workload, device and profile.

    - ``track_inverse_speedup`` (ratio, lower is better): method epoch time / serial epoch
      time. 1 is no gain; 0.5 is twice as fast. Its inverse is the speedup.
    - ``track_quality_gap`` (quality units, lower is better): serial quality minus method
      quality, sign-flipped for lower-is-better metrics, so positive is always "worse than
      serial" (:func:`parabench.sweep.compare.quality_shortfall`, the negated quality gap).
      Serial itself gives exactly 1 and 0.
    """

    def setup(self, cache: dict, workload: str, method: str, device: str, workers: int) -> None:
        case = _case(workload, method, device, workers)
        self.figures = self._figures(cache, case)
        # imported here: an old commit without it still runs the other benchmarks
        from parabench.sweep.compare import baseline_of, quality_shortfall, slowdown

        self._slowdown, self._shortfall = slowdown, quality_shortfall

        base = baseline_of(method)
        if (baseline := _BY_KEY.get((workload, base, device, 1))) is None:
            raise NotImplementedError(f"no {base} baseline for {workload} on {device}")
        if (reason := baseline.skip_reason(_profile())) is not None:
            raise NotImplementedError(f"{baseline.id}: {reason}")
        self.baseline = self._figures(cache, baseline)
        self.higher_is_better = workloads.get(workload).quality.higher_is_better

    def track_inverse_speedup(self, *params: Any) -> float:
        return self._slowdown(self.baseline["epoch_s"], self.figures["epoch_s"])

    track_inverse_speedup.unit = "ratio"

    def track_quality_gap(self, *params: Any) -> float:
        return self._shortfall(self.figures["quality"], self.baseline["quality"],
                               self.higher_is_better)

    track_quality_gap.unit = "quality"
