"""Forest methods side by side: fit time against sklearn serial and against the best peer.

    pytest tests/benchmarks/test_forest_peers_speed.py --benchmark-only -s   # measure, table
    pytest tests/benchmarks/test_forest_peers_speed.py                       # smoke: tiny

In one run, at 2 workers: ``serial`` (sklearn, one core), sklearn ``rf_threads``, the
histogram forests ``rf_numba`` and ``rf_torch``, and the peers ``xgboost`` and ``lightgbm``.
Each row starts its session once, fits once as warm-up, then times ``ROUNDS`` fits (the
session's own ``EpochStats.seconds``, what a result reports) and records the median.
``extra_info`` holds the median, the speedup over serial's median and the ratio to the best
peer (the faster of xgboost and lightgbm; > 1 means faster than it), with the held-out
accuracy and its gap to serial. The peers run first; the xgboost row measures lightgbm once
more, untimed by pytest-benchmark, to know the best peer (every row compares with a method's
first measurement). The last test prints the whole table and records it in its ``extra_info``
(a method no earlier row measured is measured there, so ``-k table`` alone works). No target
is asserted: it is a comparison, not a gate.

The profile is ``$PARABENCH_BENCH_PROFILE``, default ``quick`` when measuring and ``tiny`` in
smoke mode.
"""

from __future__ import annotations

import os
import statistics
from dataclasses import dataclass
from typing import Any

import pytest

from parabench.analysis.parity import tolerance
from parabench.analysis.ratios import parity_holds, quality_gap, speedup
from parabench.case.lifecycle import StartedCase
from parabench.registry import methods
from parabench.sweep.plan import BenchCase

pytestmark = pytest.mark.cpu

WORKLOAD = "random_forest"
WORKERS = 2
#: timed fits per row after one warm-up fit (a LightGBM fit takes ~45 s at quick)
ROUNDS = 3
PEERS = ("xgboost", "lightgbm")
LEARNED = 0.5
#: rows in run order: the peers first, so every later row knows the best peer; serial is
#: sklearn on one core (the baseline), every other row runs at WORKERS
METHODS = [
    pytest.param("xgboost", marks=pytest.mark.xgboost),
    pytest.param("lightgbm", marks=pytest.mark.lightgbm),
    pytest.param("serial"),
    pytest.param("rf_threads"),
    pytest.param("rf_numba", marks=pytest.mark.numba),
    pytest.param("rf_torch", marks=pytest.mark.torch),
]
TABLE_ORDER = ("serial", "rf_threads", "rf_numba", "rf_torch", "xgboost", "lightgbm")


@dataclass(frozen=True, kw_only=True)
class Row:
    method: str
    fit_s: float
    startup_s: float
    quality: float


@pytest.fixture
def profile(benchmark: Any) -> str:
    return os.environ.get("PARABENCH_BENCH_PROFILE") or ("tiny" if benchmark.disabled else "quick")


@pytest.fixture(scope="module")
def rows() -> dict[tuple[str, str], Row]:
    """(profile, method) -> its measured row, shared by every test of the module."""
    return {}


def _case(method: str) -> BenchCase:
    return BenchCase(workload=WORKLOAD, method=method, device="cpu",
                     workers=1 if method == "serial" else WORKERS)


def _measure(method: str, profile: str, rounds: int, timed: Any = None) -> Row:
    """Start the case, warm it up, time ``rounds`` fits (under ``timed`` when given)."""
    fit_s: list[float] = []
    with StartedCase(_case(method).config(profile)) as started:
        def fit() -> None:
            fit_s.append(started.step().seconds)

        if timed is None:
            for _ in range(rounds):
                fit()
        else:
            timed(fit)
        quality = started.quality()
        startup = started.startup_s
    return Row(method=method, fit_s=statistics.median(fit_s), startup_s=startup, quality=quality)


def _row(method: str, profile: str, rounds: int,
         rows: dict[tuple[str, str], Row]) -> Row | None:
    """The cached row, measuring it now if it is missing; None where it cannot run here."""
    if (profile, method) not in rows:
        if _case(method).skip_reason(profile) is not None:
            return None
        rows[profile, method] = _measure(method, profile, rounds)
    return rows[profile, method]


def _comparison(row: Row, serial: Row, peers: list[Row], profile: str) -> dict[str, Any]:
    best = min(peers, key=lambda r: r.fit_s) if peers else None  # of those that run here
    kind = methods.get(row.method).parity
    tol = tolerance("statistical" if kind == "statistical" else "exact", WORKLOAD, profile,
                    serial.quality, higher_is_better=True)
    gap = quality_gap(row.quality, serial.quality, higher_is_better=True)
    return {
        "method": row.method, "workers": _case(row.method).workers, "profile": profile,
        "fit_median_s": row.fit_s, "startup_s": row.startup_s,
        "serial_fit_median_s": serial.fit_s, "speedup_vs_serial": speedup(serial.fit_s, row.fit_s),
        "best_peer": best.method if best else None,
        "best_peer_fit_median_s": best.fit_s if best else None,
        "vs_best_peer": speedup(best.fit_s, row.fit_s) if best else None,
        "quality": row.quality, "serial_quality": serial.quality, "gap": gap,
        "parity": "ok" if row.method == "serial" or parity_holds(gap, tol) else "FAILED",
    }


def _rounds(benchmark: Any) -> int:
    return 1 if benchmark.disabled else ROUNDS


@pytest.mark.parametrize("method", METHODS)
def test_forest_fit_against_serial_and_best_peer(
    method: str, benchmark: Any, profile: str, rows: dict[tuple[str, str], Row],
) -> None:
    rounds = _rounds(benchmark)
    row = _measure(method, profile, rounds,
                   timed=lambda fit: benchmark.pedantic(fit, rounds=rounds, iterations=1))
    # the first measurement of a method is the one every row and the table compare with
    rows.setdefault((profile, method), row)
    serial = _row("serial", profile, rounds, rows)
    assert serial is not None, "serial (sklearn) always runs"
    peers = [r for p in PEERS if (r := _row(p, profile, rounds, rows)) is not None]
    info = _comparison(row, serial, peers, profile)
    benchmark.extra_info.update(info)
    # it learned (chance is 1/3 at tiny, 1/5 at quick); parity is the tests' business
    assert row.fit_s > 0 and row.quality > LEARNED


def test_forest_side_by_side_table(
    benchmark: Any, profile: str, rows: dict[tuple[str, str], Row],
) -> None:
    rounds = _rounds(benchmark)
    measured = {m: r for m in TABLE_ORDER if (r := _row(m, profile, rounds, rows)) is not None}
    serial = measured["serial"]
    peers = [measured[p] for p in PEERS if p in measured]

    def table() -> list[dict[str, Any]]:
        return [_comparison(r, serial, peers, profile) for r in measured.values()]

    lines = benchmark.pedantic(table, rounds=1, iterations=1)
    benchmark.extra_info.update(profile=profile, workers=WORKERS, rounds=rounds, table=lines,
                                not_run=[m for m in TABLE_ORDER if m not in measured])
    print(f"\nrandom_forest, profile {profile}, {WORKERS} workers (serial: 1), median of "
          f"{rounds} fit(s) after a warm-up fit")
    print(format_table(lines))
    assert [line["method"] for line in lines][0] == "serial"


def format_table(lines: list[dict[str, Any]]) -> str:
    head = (f"{'method':<9} {'workers':>7} {'fit s':>9} {'vs serial':>9} {'vs best peer':>12} "
            f"{'accuracy':>8} {'gap':>7} {'parity':>6}")
    out = [head, "-" * len(head)]
    for d in lines:
        peer = f"{d['vs_best_peer']:.2f}x" if d["vs_best_peer"] is not None else "-"
        out.append(f"{d['method']:<9} {d['workers']:>7} {d['fit_median_s']:>9.3f} "
                   f"{d['speedup_vs_serial']:>8.2f}x {peer:>12} {d['quality']:>8.4f} "
                   f"{d['gap']:>+7.4f} {d['parity']:>6}")
    best = lines[0]["best_peer"]
    out.append(f"best peer: {best or 'not measured (xgboost/lightgbm missing)'}; "
               "vs = that time / this method's time (> 1: this method is faster)")
    return "\n".join(out)
