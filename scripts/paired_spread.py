"""How far a seed-paired quality verdict would see: a measurement for #41 item 3.

Usage::

    python scripts/paired_spread.py --profile quick --seeds 10      # the forest: 20 fits
    python scripts/paired_spread.py --profile tiny --seeds 10
    python scripts/paired_spread.py --stores A.json B.json --workload cnn --profile quick \
        [--epoch 5] [--last 3]                                       # two calibrations
    python scripts/paired_spread.py --stores A.json B.json --workload cnn --profile quick \
        --epoch 5 --into src/parabench/workloads/quality_targets.json   # ship the pairing

Today a statistical verdict compares one run with serial's (the sweep's serial at the same
seed, or the converged check's median over the calibrated seeds) within a tolerance of
serial's seed-to-seed spread, which also holds how much the data draw moves quality. Paired
by seed, the tolerance would be the spread of the *difference* between two sound runs of the
same data. A verdict at 3 spreads flags 95 % of runs that lose ``3 sd + 1.645 sd'`` (sd' the
spread of one run's gap to serial's: the paired difference's sd, or for today's unpaired rule
sd x sqrt(1 + 1/N)).

The forest (``--profile``): the workload's sklearn forest fitted twice per data seed
(``random_state`` = the seed, then the seed + 1000: another forest, the same data); plain
sklearn, one job, nothing written.

Two calibrations (``--stores``): ``parabench calibrate ... --targets A.json`` and the same with
``--train-seed-offset K --targets B.json`` (each seed's data trained again from other initial
weights and another sample order); either may be the shipped table (``quality_targets.json``),
which pairs the same seeds measured on another machine. The pairs are each seed's quality at
``--epoch`` (default: A's budget) in both, and each seed's mean over the ``--last`` K evaluated
epochs up to it (one evaluation's bounce averaged away). Quality only: the machine's load does
not matter. ``--into TABLE`` writes the pairing at ``--epoch`` into TABLE's entry for the
workload and profile as its ``paired`` block (:func:`parabench.sweep.calibrate.paired_block`:
B's qualities and the sd of A - B), so that verdicts judged against that entry are paired by
seed (``parabench calibrate --paired`` measures the same in one store); the entry's budget
must be ``--epoch``. Where TABLE's values are not A's (the shipped table, measured on another
machine), the block's ``how`` says so.
"""

from __future__ import annotations

import argparse
import math
import statistics
from pathlib import Path

from parabench.analysis.ratios import POWER_Z, SPREAD_FACTOR
from parabench.dataset import Dataset
from parabench.workloads.random_forest import SIZES, forest_data


def fit_accuracy(data: Dataset, trees: int, random_state: int) -> float:
    from sklearn.ensemble import RandomForestClassifier

    model = RandomForestClassifier(n_estimators=trees, random_state=random_state, n_jobs=1)
    model.fit(data.x_train, data.y_train)
    return float((model.predict(data.x_test) == data.y_test).mean())


def blind_spots(firsts: list[float], diffs: list[float]) -> tuple[float, float, float, float]:
    """(seed-to-seed sd, today's blind spot, paired-difference sd, a paired verdict's)."""
    n = len(firsts)
    unpaired, paired = statistics.stdev(firsts), statistics.stdev(diffs)
    today = SPREAD_FACTOR * unpaired + POWER_Z * unpaired * math.sqrt(1 + 1 / n)
    return unpaired, today, paired, (SPREAD_FACTOR + POWER_Z) * paired


def from_stores(paths: list[str], workload: str, profile: str, epoch: int | None,
                last: int) -> None:
    """The paired spread of two calibrations of the same seeds (see the module doc)."""
    from parabench.workloads.targetstore import read_store

    a, b = (_entry(read_store(Path(p)), workload, profile) for p in paths)
    e = epoch or a["epochs"]
    seeds = [s for s in a["seeds"] if s in b["seeds"]]

    def at(x: dict, s: int, k: int) -> float:
        curve = x["curves_run"][x["seeds"].index(s)]
        return statistics.fmean([q for q in curve[:e] if q is not None][-k:])

    print(f"{workload} {profile}: {len(seeds)} seeds, epoch {e}; training seeds +"
          f"{a.get('train_seed_offset', 0)} (A) and +{b.get('train_seed_offset', 0)} (B)")
    for s in seeds:
        print(f"  seed {s}: {at(a, s, 1):.4f} / {at(b, s, 1):.4f} "
              f"(difference {at(a, s, 1) - at(b, s, 1):+.4f}; mean of the last {last}: "
              f"{at(a, s, last) - at(b, s, last):+.4f})")
    for k in sorted({1, last}):
        firsts = [at(a, s, k) for s in seeds]
        sd, today, psd, paired = blind_spots(firsts, [at(a, s, k) - at(b, s, k) for s in seeds])
        what = "epoch" if k == 1 else f"mean of the last {k} epochs"
        print(f"  {what}: seed-to-seed sd {sd:.4f} (today's verdict blind below {today:.3f}); "
              f"paired-difference sd {psd:.4f} (a paired verdict blind below {paired:.3f})")


def write_into(table: Path, paths: list[str], workload: str, profile: str,
               epoch: int) -> dict:
    """Put the pairing of the two stores at ``epoch`` into ``table``'s entry (see the module
    doc); the block written."""
    import json

    from parabench.sweep.calibrate import paired_block
    from parabench.workloads.targetstore import read_store

    a, b = (_entry(read_store(Path(p)), workload, profile) for p in paths)
    doc = json.loads(table.read_text())
    target = _entry(doc["entries"], workload, profile)
    if int(target["epochs"]) != epoch:
        raise SystemExit(f"{table}: the {workload} {profile} entry's budget is "
                         f"{target['epochs']} epoch(s), not --epoch {epoch}")
    seeds = [s for s in a["seeds"] if s in b["seeds"]]
    if seeds != list(target["seeds"]):
        raise SystemExit(f"the stores pair seeds {seeds}; {table} has {target['seeds']}")
    ours = {"epochs": epoch,
            "values": [a["curves_run"][a["seeds"].index(s)][epoch - 1] for s in seeds]}
    others = [{"curve": b["curves_run"][b["seeds"].index(s)]} for s in seeds]
    offset = b.get("train_seed_offset", 0) - a.get("train_seed_offset", 0)
    block = paired_block(ours, others, offset, by_curve=True)
    block["how"] = (f"{block['how']}, between {Path(paths[0]).name} ({a['command']}) and "
                    f"{Path(paths[1]).name} ({b['command']}) on "
                    f"{(a.get('machine') or {}).get('cpu', 'an unrecorded machine')}, "
                    f"{a['date']}; measured by scripts/paired_spread.py")
    target["paired"] = block
    table.write_text(json.dumps(doc, indent=1) + "\n")
    return block


def _entry(entries: dict, workload: str, profile: str) -> dict:
    """A store's newest entry for workload and profile, or a table's one."""
    found = entries[workload][profile]
    return found[-1] if isinstance(found, list) else found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="quick", choices=sorted(SIZES))
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--stores", nargs=2, metavar=("A", "B"), default=None)
    parser.add_argument("--workload", default=None, help="with --stores")
    parser.add_argument("--epoch", type=int, default=None, help="with --stores")
    parser.add_argument("--last", type=int, default=3, help="with --stores")
    parser.add_argument("--into", type=Path, default=None,
                        help="with --stores and --epoch: write the pairing into this table")
    args = parser.parse_args()
    if args.stores:
        if not args.workload:
            parser.error("--stores needs --workload")
        from_stores(args.stores, args.workload, args.profile, args.epoch, args.last)
        if args.into:
            if not args.epoch:
                parser.error("--into needs --epoch (the table entry's budget)")
            block = write_into(args.into, args.stores, args.workload, args.profile, args.epoch)
            print(f"wrote {args.workload} {args.profile}'s paired block into {args.into}: sd "
                  f"{block['sd']:.4f} over {block['pairs']} seeds at epoch {block['epoch']}")
        return
    trees = SIZES[args.profile][3]
    firsts, diffs, held_out = [], [], 0
    for seed in range(args.seeds):
        data = forest_data(args.profile, seed)
        one, twin = fit_accuracy(data, trees, seed), fit_accuracy(data, trees, seed + 1000)
        firsts.append(one)
        held_out = len(data.y_test)
        diffs.append(one - twin)
        print(f"seed {seed}: {one:.4f} / {twin:.4f} (difference {one - twin:+.4f})", flush=True)
    unpaired, blind_unpaired, paired, blind_paired = blind_spots(firsts, diffs)
    n = args.seeds
    print(f"random_forest {args.profile}: held-out rows {held_out:,}, {trees} trees, "
          f"{n} data seeds")
    print(f"  seed-to-seed sd {unpaired:.4f}: today's verdict is blind below {blind_unpaired:.3f}")
    print(f"  paired-difference sd {paired:.4f}: a paired verdict would be blind below "
          f"{blind_paired:.3f}")


if __name__ == "__main__":
    main()
