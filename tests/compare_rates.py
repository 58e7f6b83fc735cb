"""How often ``parabench compare`` calls NEW SLOWER, on simulated runs: its false-alarm and
detection rates (docs/measurements.md records the table; docs/usage.md quotes it).

Usage::

    PYTHONPATH=src:tests python tests/compare_rates.py [DRAWS]     # default 300 per row

Each run's level is off by a lognormal run effect of CV ``true_cv``; each of its 8 windows is
2 % around that. Columns: the share of draws whose p < 0.05 ("sig"), called SLOWER by
compare's rule (estimate past the threshold and p < 0.05), and by the stricter rule the
docs compare it with (the whole 95 % interval past the threshold). Threshold 10 %.
"""

from __future__ import annotations

import math
import random
import sys

from parabench.analysis.compare import judge_speed


def runs(rng: random.Random, n: int, level: float, cv: float, windows: int = 8
         ) -> list[list[float]]:
    out = []
    for _ in range(n):
        run_level = level * math.exp(rng.gauss(0, cv))
        out.append([run_level * math.exp(rng.gauss(0, 0.02)) for _ in range(windows)])
    return out


def main(draws: int = 300, threshold: float = 0.10) -> None:
    rng = random.Random(1)
    print("runs/side  true_cv  slowdown  sig    SLOWER  whole-CI rule")
    for n in (1, 2, 3, 5):
        for cv in (0.06, 0.12):
            for slow in (1.0, 1.15, 1.3, 1.5):
                sig = rule = strict = 0
                for _ in range(draws):
                    speed = judge_speed(runs(rng, n, 1000, cv), runs(rng, n, 1000 / slow, cv),
                                        threshold)
                    sig += speed.estimate.p < 0.05
                    rule += speed.regressed
                    strict += speed.estimate.ci[1] < 1 / (1 + threshold)
                print(f"{n:<9}  {cv:<7.2f}  {slow:<8.2f}  {sig / draws:.3f}  {rule / draws:.3f}"
                      f"   {strict / draws:.3f}", flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 300)
