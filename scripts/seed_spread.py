"""Measure serial's seed-to-seed spread of held-out quality and write it to the shipped table.

Usage::

    python scripts/seed_spread.py --profile tiny                       # every workload, seeds 0-4
    python scripts/seed_spread.py --profile tiny --epochs 1            # the default run's epochs
    python scripts/seed_spread.py --profile quick --workload mlp,cnn,random_forest
    python scripts/seed_spread.py --profile tiny --workload nbow --seeds 5 --dry-run

For each workload it runs ``serial`` (1 worker, 1 thread) once per seed through the real
harness (:func:`parabench.sweep.run.run_grid`: each case isolated, as ``parabench run`` does)
with the CLI's default epochs (3; ``--epochs 1`` for the default coverage run's), and records
the sample standard deviation (ddof 1) of the held-out quality, with the per-seed values, the
seeds, the epochs, and the command and date that produced it, in
``src/parabench/workloads/seed_spread.json`` under its workload, profile and epochs. Entries
not measured by this invocation are kept as they were. Statistical parity reads this table
(:mod:`parabench.workloads.spread`). The seed changes the model's initial weights and the
batch order, and the data draw where the workload seeds it (mlp and gpt draw one dataset for every
seed), so the spread is what "running another seed" moves quality by.

Not a timing: the machine's load does not matter, only the qualities are used.
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import sys
import tempfile
from datetime import date
from pathlib import Path
from typing import Any

from parabench.registry import workloads
from parabench.stopping import Epochs
from parabench.sweep.plan import Grid
from parabench.sweep.run import run_grid
from parabench.workloads.spread import TABLE

ABOUT = ("Sample std (ddof 1) of serial's held-out quality over seeds, per workload and "
         "profile; statistical parity's margin is 3 x std. Written by scripts/seed_spread.py; "
         "each entry records the command and date that measured it.")


def measure(workload: str, profile: str, seeds: list[int], epochs: int,
            timeout_s: float) -> dict[str, Any]:
    """Serial's quality for each seed, through the harness; the entry for the table."""
    values: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "spread.jsonl"
        for seed in seeds:
            grid = Grid(workloads=[workload], methods=["serial"], workers=[1],
                        threads_per_worker=1, stop=Epochs(epochs), profile=profile, seed=seed,
                        timeout_s=timeout_s)
            (result,) = run_grid(grid, out=out)
            if result.status != "ok" or result.quality is None or result.quality.value is None:
                raise RuntimeError(f"{workload}/{profile} seed {seed}: {result.status} "
                                   f"{result.error or ''}")
            values.append(float(result.quality.value))
            print(f"  {workload} {profile} seed {seed}: {values[-1]:.6g}", flush=True)
    return {"std": statistics.stdev(values), "mean": statistics.fmean(values),
            "values": values, "seeds": seeds, "epochs": epochs,
            "method": "serial w=1 t=1"}


def write(workload: str, profile: str, entry: dict[str, Any], path: Path = TABLE) -> None:
    """Put ``entry`` at ``entries[workload][profile][str(entry["epochs"])]``, keeping the rest."""
    old = json.loads(path.read_text())["entries"] if path.exists() else {}
    old.setdefault(workload, {}).setdefault(profile, {})[str(entry["epochs"])] = entry
    ordered = {w: {p: dict(sorted(old[w][p].items(), key=lambda kv: int(kv[0])))
                   for p in sorted(old[w])} for w in sorted(old)}
    path.write_text(json.dumps({"about": ABOUT, "entries": ordered}, indent=1) + "\n")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--profile", required=True, choices=["tiny", "quick", "full"])
    p.add_argument("--workload", default=None, help="comma list (default: every workload)")
    p.add_argument("--seeds", type=int, default=5, help="seeds 0..N-1 (default 5)")
    p.add_argument("--epochs", type=int, default=3, help="default: the CLI's (3)")
    p.add_argument("--timeout", type=float, default=1800.0, help="per case, seconds")
    p.add_argument("--dry-run", action="store_true", help="measure, print, write nothing")
    args = p.parse_args(argv)
    names = args.workload.split(",") if args.workload else workloads.names()
    command = " ".join(["python scripts/seed_spread.py", *map(shlex.quote, argv)])
    for name in names:
        entry = measure(name, args.profile, list(range(args.seeds)), args.epochs, args.timeout)
        entry.update(command=command, date=date.today().isoformat())
        print(f"{name} {args.profile}: std {entry['std']:.4g} mean {entry['mean']:.4g}")
        if not args.dry_run:  # one workload at a time: a later failure keeps what was measured
            write(name, args.profile, entry)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
