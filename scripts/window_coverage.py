"""How often the speed windows' CI holds the case's speed, and what the windows cost, under
the window rule and its candidates, replayed on long recorded window series.

Usage::

    PARABENCH_WINDOW_S=0.25 parabench run --workload cnn --method serial,ddp --workers 1,2 \\
        --profile tiny --epochs 1 --windows 40 --repeats 2 --out long.jsonl
    python scripts/window_coverage.py long.jsonl --merge 1,2 --wanted 4,5,6,8 --most 8,16
    python scripts/window_coverage.py long.jsonl --out docs/windows/coverage.json

Every ``ok`` result with at least ``--min-series`` steady windows is a series. A trial replays
:class:`parabench.case.windows.WindowRule` (the rule the case itself follows) on the series'
steady windows from its start, the windows merged in runs of ``merge`` (two 0.25 s windows
make one 0.5 s window: their samples and seconds summed), and takes the CI the case would
report where the rule stops (:func:`parabench.case.bootstrap.median_ci`). It is checked
against two truths at the same window length:

* **within the case**: the median of the same series' windows the trial did not use (at
  least ``MIN_TRUTH`` of them; a trial the rule would carry past that point is cut there,
  and the table counts the cut ones): what the CI claims to cover;
* **a re-run**: the median of every window of the other repeat of the same configuration (a
  separate case process): what a reader comparing two runs' rows meets.

It prints per rule: the trials, the coverage of each truth (% of CIs that held it, with the
95 % Wilson interval), the mean steady windows, the mean seconds of windows (the warm-up
window included: one window of the length), the mean CI half-width, and ``x95``: how many
times wider the intervals would have to be to hold the within-case truth in 95 % of trials
(the 95th percentile of the factor each trial needed on the truth's side).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from parabench.analysis.stats import wilson
from parabench.case.bootstrap import ci_half_pct, median_ci
from parabench.case.windows import CI_TARGET, MAX_WINDOWS, WindowRule

#: the fewest unused windows the within-case truth is taken from
MIN_TRUTH = 8


@dataclass
class Series:
    label: str  # workload/method workers x threads
    repeat: int
    seconds: list[float]
    samples: list[int]

    def merged(self, merge: int) -> tuple[list[float], list[float]]:
        """(seconds, samples/s) of the windows merged in runs of ``merge``."""
        secs, rates = [], []
        for i in range(0, len(self.seconds) - merge + 1, merge):
            s = sum(self.seconds[i:i + merge])
            secs.append(s)
            rates.append(sum(self.samples[i:i + merge]) / s)
        return secs, rates


def load(paths: list[Path], min_series: int) -> list[Series]:
    out = []
    for path in paths:
        for line in path.read_text().splitlines():
            r = json.loads(line)
            if r.get("status") != "ok":
                continue
            warm = (r.get("window") or {}).get("warmup", 0)
            secs, samples = r["window_s"][warm:], r["window_samples"][warm:]
            if len(secs) < min_series:
                continue
            label = (f"{r['workload']}/{r['method']} {r['workers']}x"
                     f"{r.get('threads_per_worker')}")
            out.append(Series(label, r.get("repeat", 0), secs, samples))
    return out


def trial(rule: WindowRule, secs: list[float], rates: list[float]) -> tuple[int, bool]:
    """(steady windows the rule takes on this series, whether it was cut at MIN_TRUTH)."""
    usable = len(rates) - MIN_TRUTH
    k, spent = 0, 0.0
    while rule.stop(rates[:k], spent) is None:
        if k >= usable:
            return k, True
        spent += secs[k]
        k += 1
    return k, False


def replay(series: list[Series], merge: int, wanted: int, most: int = MAX_WINDOWS) -> dict:
    rule = WindowRule(wanted=wanted, most=max(wanted, most), ci_target=CI_TARGET)
    by_config: dict[str, dict[int, Series]] = defaultdict(dict)
    for s in series:
        by_config[s.label][s.repeat] = s
    within = rerun = cut = n = n_rerun = 0
    windows, seconds, halves, needed = [], [], [], []
    for s in series:
        secs, rates = s.merged(merge)
        k, was_cut = trial(rule, secs, rates)
        if k < 2:
            continue
        lo, hi = median_ci(rates[:k]) or (math.nan, math.nan)
        median = statistics.median(rates[:k])
        n += 1
        cut += was_cut
        truth = statistics.median(rates[k:])
        within += lo <= truth <= hi
        side = (hi - median) if truth >= median else (median - lo)  # the side the truth is on
        needed.append(abs(truth - median) / side if side > 0 else math.inf)
        others = [o for r, o in by_config[s.label].items() if r != s.repeat]
        if others:
            n_rerun += 1
            rerun += lo <= statistics.median(others[0].merged(merge)[1]) <= hi
        windows.append(k)
        seconds.append(sum(secs[:k]) + secs[0])  # the warm-up window: one more of the length
        halves.append(ci_half_pct(median, (lo, hi)) or 0.0)
    return {"merge": merge, "wanted": wanted, "most": rule.most, "ci_target": CI_TARGET,
            "trials": n, "cut": cut,
            "within_hits": within, "within": within / n if n else None,
            "within_ci": wilson(within, n),
            "rerun_trials": n_rerun, "rerun_hits": rerun,
            "rerun": rerun / n_rerun if n_rerun else None,
            "rerun_ci": wilson(rerun, n_rerun),
            "mean_windows": statistics.fmean(windows) if windows else None,
            "mean_seconds": statistics.fmean(seconds) if seconds else None,
            "mean_half_pct": statistics.fmean(halves) if halves else None,
            "x95": _p95(needed)}


def _p95(values: list[float]) -> float | None:
    """The 95th percentile (nearest rank) of the factors each CI's side would have needed to
    hold its within-case truth: how much wider the interval must be to cover 95 %."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(0.95 * len(ordered)) - 1)]


def _share(rate: float | None, ci: tuple[float, float] | None) -> str:
    """'75.0% (63%-84%)'; '-' where there was nothing to count (no re-run of any series)."""
    if rate is None or ci is None:
        return f"{'-':>16}"
    return f"{rate:6.1%} ({ci[0]:.0%}-{ci[1]:.0%})"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results", nargs="+", type=Path, help="JSONL results with long series")
    ap.add_argument("--merge", default="1,2", help="windows merged into one (1: as recorded)")
    ap.add_argument("--wanted", default="3,4,5,6,8",
                    help="steady windows before the CI may stop them (the rule's WINDOWS)")
    ap.add_argument("--most", default=str(MAX_WINDOWS),
                    help="the most steady windows while the CI is wide (the rule's MAX_WINDOWS)")
    ap.add_argument("--min-series", type=int, default=24,
                    help="the fewest steady windows a result needs to be a series")
    ap.add_argument("--out", type=Path, help="write the rows as JSON here")
    args = ap.parse_args(argv)
    series = load(args.results, args.min_series)
    if not series:
        print(f"no ok result with {args.min_series}+ steady windows in the files: record "
              f"some with --windows 40 (see the usage)", file=sys.stderr)
        return 2
    rows = [replay(series, m, w, most) for m in map(int, args.merge.split(","))
            for w in map(int, args.wanted.split(",")) for most in map(int, args.most.split(","))]
    print(f"{len(series)} series ({len({s.label for s in series})} configurations); "
          f"CI target {CI_TARGET:.0%}")
    print("merge wanted most trials cut  within-case (95% CI)     re-run (95% CI)          "
          "windows  seconds  half%   x95")
    for r in rows:
        print(f"{r['merge']:>5} {r['wanted']:>6} {r['most']:>4} {r['trials']:>6} {r['cut']:>3}  "
              f"{_share(r['within'], r['within_ci'])}       "
              f"{_share(r['rerun'], r['rerun_ci'])}       "
              f"{r['mean_windows']:6.1f} {r['mean_seconds']:8.2f} {r['mean_half_pct']:6.2f} "
              f"{r['x95']:5.2f}")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"series": len(series), "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
