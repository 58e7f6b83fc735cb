"""How far a seed-paired quality verdict would see for the random forest: a measurement for #41.

Usage::

    python scripts/paired_spread.py --profile quick --seeds 10      # 20 fits of 100 trees
    python scripts/paired_spread.py --profile tiny --seeds 10

Today a statistical verdict compares one run with serial's at the same seed (the same data)
but within a tolerance of serial's seed-to-seed spread, which also holds how much the data
draw moves quality. Paired by seed, the tolerance would be the spread of the *difference*
between two sound fits of the same data. This fits the workload's sklearn forest twice per
data seed (``random_state`` = the seed, then the seed + 1000: another forest, the same data),
and prints both spreads and the blind spot each would give: a verdict at 3 spreads flags 95 %
of runs that lose ``3 sd + 1.645 sd'`` (sd' the spread of one run's gap to serial's: the paired
difference's sd, or for today's unpaired rule sd x sqrt(1 + 1/N)). Nothing is written; it does
not go through the harness (plain sklearn, one job), and the machine's load does not matter.
"""

from __future__ import annotations

import argparse
import math
import statistics

from parabench.analysis.ratios import POWER_Z, SPREAD_FACTOR
from parabench.dataset import Dataset
from parabench.workloads.random_forest import SIZES
from parabench.workloads.tabular import tabular_classification


def fit_accuracy(data: Dataset, trees: int, random_state: int) -> float:
    from sklearn.ensemble import RandomForestClassifier

    model = RandomForestClassifier(n_estimators=trees, random_state=random_state, n_jobs=1)
    model.fit(data.x_train, data.y_train)
    return float((model.predict(data.x_test) == data.y_test).mean())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="quick", choices=sorted(SIZES))
    parser.add_argument("--seeds", type=int, default=10)
    args = parser.parse_args()
    samples, features, classes, trees = SIZES[args.profile]
    firsts, diffs, held_out = [], [], 0
    for seed in range(args.seeds):
        data = tabular_classification(n_samples=samples, n_features=features,
                                      n_classes=classes, seed=seed)
        one, twin = fit_accuracy(data, trees, seed), fit_accuracy(data, trees, seed + 1000)
        firsts.append(one)
        held_out = len(data.y_test)
        diffs.append(one - twin)
        print(f"seed {seed}: {one:.4f} / {twin:.4f} (difference {one - twin:+.4f})", flush=True)
    unpaired, paired = statistics.stdev(firsts), statistics.stdev(diffs)
    n = args.seeds
    blind_unpaired = SPREAD_FACTOR * unpaired + POWER_Z * unpaired * math.sqrt(1 + 1 / n)
    blind_paired = (SPREAD_FACTOR + POWER_Z) * paired
    print(f"random_forest {args.profile}: held-out rows {held_out:,}, {trees} trees, "
          f"{n} data seeds")
    print(f"  seed-to-seed sd {unpaired:.4f}: today's verdict is blind below {blind_unpaired:.3f}")
    print(f"  paired-difference sd {paired:.4f}: a paired verdict would be blind below "
          f"{blind_paired:.3f}")


if __name__ == "__main__":
    main()
