"""How a method compares with its baseline: the one place for speedup, efficiency, quality gap.

Usage::

    base = baseline_of("tf_multiworker")            # "tf_serial"; "serial" for most methods
    speedup(baseline_s=2.0, method_s=0.5)           # 4.0: the method is 4x as fast
    efficiency(speedup=4.0, workers=8)              # 0.5
    r = ratios(key, times)                          # both ratios of a case, baselines named
    speed_base, scaling_base = baseline_keys(key)   # the baseline runs those two read
    r.speedup.value, r.speedup.baseline, r.scaling_efficiency.missing
    gap = quality_gap(0.90, baseline=0.92, higher_is_better=True)   # -0.02: worse
    parity_holds(gap, tolerance=0.015)              # False

Sign convention (every module follows it): the **quality gap** is the method's quality minus
the baseline's, measured in the "higher is better" direction, so a *negative* gap means the
method is *worse* than its baseline, whatever the metric (for a loss, lower being better, the
gap is baseline loss minus method loss). Parity holds when the gap is at least ``-tolerance``.
Figures that must read the other way round (asv plots every ``track_*`` as lower is better)
use :func:`quality_shortfall`, defined as the negated gap, never a formula of their own.

**Speedup** is the baseline's time over the method's at equal work (or the method's throughput
over the baseline's): above 1 is faster. **Efficiency** is speedup per worker.

The baseline of a method is its ``baseline_method`` (``serial``; ``tf_serial`` for the
TensorFlow methods); a method is a baseline when it is its own baseline.

Which baseline *run* a case is compared with (:func:`ratios`): equal work means the same
workload, device, profile, batch size and the options declared to change the mathematics or
the work timed (:meth:`parabench.identity.CaseKey.same_work`), never another batch. Two
ratios, each naming its baseline:

* ``speedup``: vs the baseline with the **same total cores**, ``workers x threads_per_worker``
  threads in one process: what the parallel method buys on these cores. (Comparing with a
  serial run that had all cores while each worker had one would cap DDP 2 x 1 at 0.5.)
* ``scaling_efficiency``: vs the baseline at **threads_per_worker** threads, divided by the
  workers: how well adding workers of that size scales (1.0 is linear).

When that baseline run is missing the ratio is None and says which run to add; no other run
stands in for it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from parabench.identity import (  # the baseline rule is the identity's; named here as before
    BASELINE_METHOD,
    CaseKey,
    baseline_of,
    baseline_threads,
    is_baseline,
)

__all__ = ["BASELINE_METHOD", "EXACT_TOLERANCE", "MIN_STATISTICAL_TOLERANCE", "SPREAD_FACTOR",
           "CaseKey", "Ratio", "Ratios", "baseline_label", "baseline_of", "baseline_threads",
           "detectable_loss", "efficiency", "find_baseline", "is_baseline", "missing_hint",
           "parity_holds", "parity_tolerance", "quality_gap", "quality_shortfall", "ratios",
           "scaling_efficiency", "slowdown", "speedup", "throughput_speedup", "total_cores"]

#: parity tolerance of methods computing the same mathematics as their baseline (see
#: :mod:`parabench.analysis.parity` for why this much)
EXACT_TOLERANCE = 0.015
#: statistical parity: this many baseline seed-to-seed standard deviations ...
SPREAD_FACTOR = 3.0
#: ... but never less than this
MIN_STATISTICAL_TOLERANCE = 0.01


def speedup(baseline_s: float, method_s: float) -> float:
    """Baseline time / method time at equal work: 2.0 is twice as fast."""
    return baseline_s / method_s


def throughput_speedup(method_rate: float, baseline_rate: float) -> float:
    """Speedup from rates (samples/s): method throughput / baseline throughput."""
    return method_rate / baseline_rate


def slowdown(baseline_s: float, method_s: float) -> float:
    """The inverse of :func:`speedup` (method time / baseline time), for lower-is-better plots."""
    return method_s / baseline_s


def efficiency(speedup: float, workers: int) -> float:
    """Parallel efficiency: speedup per worker (1.0 is perfect scaling)."""
    return speedup / workers


def total_cores(workers: int, threads_per_worker: int) -> int:
    """Cores a case uses: every worker's threads."""
    return workers * threads_per_worker


def scaling_efficiency(baseline_s: float, method_s: float, workers: int) -> float:
    """Speedup over the baseline at ``threads_per_worker`` threads, per worker."""
    return efficiency(speedup(baseline_s, method_s), workers)


def quality_gap(quality: float, baseline: float, higher_is_better: bool) -> float:
    """Method quality minus baseline quality, higher-is-better direction: negative is worse."""
    return quality - baseline if higher_is_better else baseline - quality


def quality_shortfall(quality: float, baseline: float, higher_is_better: bool) -> float:
    """How far the method falls short of its baseline: ``-quality_gap``, positive is worse."""
    return 0.0 - quality_gap(quality, baseline, higher_is_better)  # 0.0 -: no "-0.0"


def parity_tolerance(kind: str, baseline: float, higher_is_better: bool,
                     spread: float) -> float:
    """The largest shortfall parity accepts.

    ``kind`` "exact": :data:`EXACT_TOLERANCE`; "statistical": :data:`SPREAD_FACTOR` x the
    baseline's seed-to-seed ``spread``, at least :data:`MIN_STATISTICAL_TOLERANCE`. For a
    lower-is-better metric the tolerance is relative to the baseline's value.
    """
    tol = EXACT_TOLERANCE if kind == "exact" else max(SPREAD_FACTOR * spread,
                                                      MIN_STATISTICAL_TOLERANCE)
    return tol if higher_is_better else tol * abs(baseline)


#: one-sided 95 % normal quantile: a method that loses the detectable loss fails 95 % of runs
POWER_Z = 1.645


def detectable_loss(tolerance: float, spread: float, baseline: float,
                    higher_is_better: bool, reference_runs: int = 1,
                    paired: bool = False) -> float:
    """The smallest loss a statistical verdict flags in 95 % of runs: the tolerance plus
    :data:`POWER_Z` standard deviations of the gap between one run and the baseline, taken
    from ``reference_runs`` seeds (one run a side: two seeds' worth of the baseline's
    seed-to-seed ``spread``, relative for a lower-is-better metric); ``paired``: ``spread`` is
    already the sd of that gap (two runs of the same data). A sound method (no loss) then
    fails only when the gap passes the tolerance: at 3 spreads, under 2 %."""
    sd = (1.0 if paired else math.sqrt(1 + 1 / reference_runs)) * (
        spread if higher_is_better else spread * abs(baseline))
    return tolerance + POWER_Z * sd


def parity_holds(gap: float, tolerance: float) -> bool:
    """Parity's verdict: the method is not worse than its baseline by more than ``tolerance``."""
    return gap >= -tolerance


# --- which baseline run, and the two ratios ---------------------------------------------------

def find_baseline(key: CaseKey, pool: Iterable[tuple], threads: int) -> CaseKey | None:
    """The baseline run of ``key`` at ``threads`` threads in ``pool`` (as the baseline runs
    it: :func:`baseline_threads`): equal work only
    (:meth:`~parabench.identity.CaseKey.same_work`)."""
    key = CaseKey(*key)
    wanted = key.baseline_at(baseline_threads(key.workload, baseline_of(key.method), threads))
    for c in sorted(CaseKey(*c) for c in pool):
        if c.same_work(wanted):
            return c
    return None


def baseline_label(key: CaseKey) -> str:
    """How a row names a baseline run: ``serial/cpu t=2 bs=64``."""
    return f"{key.method}/{key.device} t={key.threads} bs={key.batch}"


def missing_hint(key: CaseKey, threads: int) -> str:
    """What to run for a missing baseline, e.g. ``no serial at 2 threads: add ...``."""
    base = baseline_of(key.method)
    threads = baseline_threads(key.workload, base, threads)
    batch = "" if key.batch == "-" else f" --batch-size {key.batch}"
    at = "" if key.batch == "-" else f" and batch {key.batch}"
    return (f"no {base} at {threads} thread{'s' if threads > 1 else ''}{at}: "
            f"add --method {base} --threads {threads}{batch}")


@dataclass(frozen=True, kw_only=True)
class Ratio:
    """One ratio of a case with the baseline run it is against (``value`` None: missing)."""

    value: float | None
    baseline: str
    missing: str | None = None

    def cell(self, spec: str, unit: str = "") -> str:
        """Table text: ``1.85x (t=2)`` (the baseline's threads), or ``- (no t=2)``."""
        threads = self.baseline.split(" t=")[1].split()[0] if " t=" in self.baseline else "?"
        if self.value is None:
            return f"- (no t={threads})"
        return f"{format(self.value, spec)}{unit} (t={threads})"


@dataclass(frozen=True, kw_only=True)
class Ratios:
    speedup: Ratio
    scaling_efficiency: Ratio

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready: for ``extra_info`` and result extras."""
        return {"speedup": self.speedup.value, "speedup_baseline": self.speedup.baseline,
                "scaling_efficiency": self.scaling_efficiency.value,
                "scaling_baseline": self.scaling_efficiency.baseline,
                "missing": [m for r in (self.speedup, self.scaling_efficiency)
                            if (m := r.missing)]}


def baseline_keys(key: CaseKey) -> tuple[CaseKey, CaseKey]:
    """The baseline runs :func:`ratios` compares ``key`` with, as keys: the speedup's (the
    same total cores) and the scaling efficiency's (the threads per worker); one run twice
    where they coincide. A front end that measures its own baselines measures these."""
    key = CaseKey(*key)
    base = baseline_of(key.method)
    speed, scaling = (key._replace(method=base, workers=1,
                                   threads=baseline_threads(key.workload, base, asked))
                      for asked in (total_cores(key.workers, key.threads), key.threads))
    return speed, scaling


def ratios(key: CaseKey, times: Mapping[tuple, float]) -> Ratios:
    """Both ratios of ``key`` from steady-state times (seconds per equal unit of work).

    ``times`` maps case keys (``key`` itself among them) to their time; the baselines are
    looked up there by :func:`find_baseline`: ``workers x threads`` threads for the speedup,
    ``threads`` for the scaling efficiency.
    """
    key = CaseKey(*key)
    mine = times.get(key)
    out = []
    for wanted, divide in zip(baseline_keys(key), (1, key.workers), strict=True):
        threads = wanted.threads
        base = find_baseline(key, times, threads)
        wanted = base or wanted
        if base is None or mine is None:
            out.append(Ratio(value=None, baseline=baseline_label(wanted),
                             missing=None if base else missing_hint(key, threads)))
        else:
            out.append(Ratio(value=efficiency(speedup(times[base], mine), divide),
                             baseline=baseline_label(base)))
    return Ratios(speedup=out[0], scaling_efficiency=out[1])
