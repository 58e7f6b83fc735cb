"""Measure each workload's default time-to-quality target and write it to the shipped table.

Usage::

    python scripts/quality_targets.py --profile tiny                    # every workload, 10 seeds
    python scripts/quality_targets.py --profile tiny --workload mlp,cnn
    python scripts/quality_targets.py --profile tiny --workload cnn --seeds 3 --dry-run
    python scripts/quality_targets.py --profile tiny --epochs 24 --seeds 20 --workload mlp
    python scripts/quality_targets.py --profile quick --workload cnn --from-store T.json
    python scripts/quality_targets.py --profile quick --workload gpt --preview a.json b.json

For each workload it runs ``serial`` (1 worker, 1 thread) once per seed through the real
harness (:func:`parabench.sweep.calibrate.measure`, which ``parabench calibrate`` uses too:
each case isolated, as ``parabench run`` does), for the profile's fixed epoch budget
(:data:`BUDGET`: 8 epochs at every profile, below the CLI's default ``--max-epochs``, so the
default target run can reach what is measured here; an estimator, which refits the same model
every epoch, is measured at 1 epoch: one fit). Where 8 epochs are not yet a plateau, measure
it with a longer ``--epochs`` (mlp tiny: 24): the entry records its budget, and ``parabench
run``'s default ``--max-epochs`` rises to it for that workload.
Each case runs in time-to-target mode against an unreachable target, so it evaluates held-out
quality during every epoch: the per-seed curves (each epoch's last evaluation) are kept, to
show whether the budget reached a plateau.

The target is the 10th percentile (numpy's default linear interpolation, Hyndman and Fan's
type 7) over seeds of serial's held-out quality after the *last* epoch of the budget; for a
lower-is-better metric (reconstruction MSE) the 90th percentile. The last epoch, not the
best one: the best of eight noisy evaluations is biased upwards, while the last is where
serial's plateau sits, so serial reaches the target by the end of the budget in about 9 of
10 seeds (``reached_by`` counts them) and earlier wherever its curve crosses it.

Each entry records the target, the per-seed final qualities and curves, the seeds, the
epochs, the command and the date, in ``src/parabench/workloads/quality_targets.json`` under
its workload and profile. Entries not measured by this invocation are kept as they were.
``--target-quality`` without a value reads this table
(:mod:`parabench.workloads.quality_targets`).

``--from-store FILE`` measures nothing: it ships the entries ``parabench calibrate --targets
FILE`` measured (epoch budget at serial's plateau, samples to the target per seed) for the
current code, synthetic data and the CPU, keeping their own command and date and adding
``shipped_by`` (this command). The quick entries come this way: a calibration is resumable
and its budget is where the curves stop rising, where this script's is a fixed count.

``--preview PARTIAL ...`` measures and writes nothing: it reads the finished seeds of one
workload that ``parabench calibrate`` (or :func:`~parabench.sweep.calibrate.measure`, run as
several processes, each with its own partial file) has kept so far, for the current code,
synthetic data and the CPU, and prints the entry they would make (the budget and its rule,
the target), each epoch's median and std over the seeds, and the power they would state
(:func:`~parabench.sweep.calibrate.power_lines`). A preview from a few seeds can read far
narrower than the whole calibration: a slow seed still to come widens it.

Not a timing: the machine's load does not matter, only the qualities are used.
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import sys
from datetime import date
from pathlib import Path
from typing import Any

from parabench.registry import workloads
from parabench.sweep.calibrate import measure, partial_key, power_lines, summarize
from parabench.workloads.quality_targets import TABLE
from parabench.workloads.targetstore import current_version, matches, read_store

ABOUT = ("Default time-to-quality targets: per workload and profile, the 10th percentile "
         "(90th for lower-is-better metrics; numpy's linear interpolation) over seeds of "
         "serial's held-out quality after the last epoch of the stated budget (1 worker, "
         "1 thread). Written by scripts/quality_targets.py, measured there or by `parabench "
         "calibrate` (then the budget is serial's plateau, and shipped_by says so); each "
         "entry records the per-seed figures and curves, the seeds, the epochs, the command "
         "and the date; a calibrated one also its workload_version and the libraries that "
         "version was hashed with.")
#: the epoch budget per profile: at most the CLI's default --max-epochs (10)
BUDGET = {"tiny": 8, "quick": 8, "full": 8}


def write(workload: str, profile: str, entry: dict[str, Any], path: Path = TABLE) -> None:
    """Put ``entry`` at ``entries[workload][profile]``, keeping the rest."""
    old = json.loads(path.read_text())["entries"] if path.exists() else {}
    old.setdefault(workload, {})[profile] = entry
    ordered = {w: {p: old[w][p] for p in sorted(old[w])} for w in sorted(old)}
    path.write_text(json.dumps({"about": ABOUT, "entries": ordered}, indent=1) + "\n")


def calibrated(store: Path, workload: str, profile: str) -> dict[str, Any]:
    """The newest entry of ``workload`` at ``profile`` in the calibrate store ``store`` that is
    for the current code, synthetic data and the CPU (what the shipped table is for)."""
    want = {"workload_version": current_version(workload), "data": None, "device": "cpu"}
    found = [e for e in read_store(store).get(workload, {}).get(profile, []) if matches(e, want)]
    if not found:
        raise SystemExit(f"{store} has no entry for {workload} at {profile} on synthetic data, "
                         f"cpu, version {want['workload_version']}; `parabench calibrate "
                         f"--workload {workload} --profile {profile} --targets {store}` "
                         "measures one")
    return found[-1]


def preview(partials: list[Path], workload: str, profile: str,
            say: Any = print) -> dict[str, Any]:
    """The entry the finished seeds in ``partials`` would make (see the module's docstring),
    printed with their per-epoch median and std and their power; returned, written nowhere."""
    runs: dict[int, dict[str, Any]] = {}
    found: set[int] = set()
    for path in partials:
        for key, seeds in read_store(path).items():
            max_epochs = key.rsplit("|", 1)[-1]
            if (max_epochs.isdigit()
                    and key == partial_key(workload, profile, None, "cpu", int(max_epochs))):
                found.add(int(max_epochs))
                runs.update((int(s), r) for s, r in seeds.items())
    if not runs:
        raise SystemExit(f"{', '.join(map(str, partials))}: no finished seed of {workload} at "
                         f"{profile} on synthetic data, cpu, version "
                         f"{current_version(workload)}")
    if len(found) > 1:
        raise SystemExit(f"the partial files hold runs of {workload} at {profile} to different "
                         f"maximum epochs ({sorted(found)}); preview one maximum at a time")
    seeds = sorted(runs)
    entry = summarize([runs[s] for s in seeds], seeds, found.pop(),
                      workloads.get(workload).quality.higher_is_better, plateau=True)
    entry.update(workload=workload, profile=profile, command="preview", date="-")
    say(f"{workload} {profile}: {len(seeds)} seed(s) ({', '.join(map(str, seeds))}); budget "
        f"{entry['epochs']} of {entry['max_epochs']} ({entry['budget_rule']}); target "
        f"{entry['target']:.4g}")
    say("epoch  median  std")
    for epoch in range(1, entry["max_epochs"] + 1):
        values = [c[epoch - 1] for c in entry["curves_run"]
                  if len(c) >= epoch and c[epoch - 1] is not None]
        std = f"{statistics.stdev(values):.4f}" if len(values) > 1 else "-"
        say(f"{epoch:5d}  {statistics.median(values):.4f}  {std}")
    for line in power_lines(entry, "preview"):
        say(line)
    return entry


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--profile", required=True, choices=sorted(BUDGET))
    p.add_argument("--workload", default=None, help="comma list (default: every workload)")
    p.add_argument("--seeds", type=int, default=10, help="seeds 0..N-1 (default 10)")
    p.add_argument("--epochs", type=int, default=None, help="default: the profile's budget")
    p.add_argument("--timeout", type=float, default=1800.0, help="per case, seconds")
    p.add_argument("--dry-run", action="store_true", help="measure, print, write nothing")
    p.add_argument("--from-store", type=Path, default=None, metavar="FILE",
                   help="ship parabench calibrate's entries from FILE; measure nothing")
    p.add_argument("--preview", type=Path, nargs="+", default=None, metavar="PARTIAL",
                   help="print the entry the finished seeds in these partial files would "
                        "make (one --workload); measure and write nothing")
    p.add_argument("--table", type=Path, default=TABLE, help=argparse.SUPPRESS)  # tests
    args = p.parse_args(argv)
    names = args.workload.split(",") if args.workload else workloads.names()
    if args.preview is not None:
        if len(names) != 1:
            p.error("--preview reads one workload: give --workload NAME")
        preview(args.preview, names[0], args.profile)
        return 0
    epochs = args.epochs or BUDGET[args.profile]
    command = " ".join(["python scripts/quality_targets.py", *map(shlex.quote, argv)])
    for name in names:
        if args.from_store is not None:
            entry = dict(calibrated(args.from_store, name, args.profile), shipped_by=command)
        else:
            entry = measure(name, args.profile, list(range(args.seeds)), epochs,
                            timeout_s=args.timeout, plateau=False)  # a fixed budget
            entry.update(command=command, date=date.today().isoformat())
        print(f"{name} {args.profile}: target {entry['target']:.4g} (p{entry['percentile']}), "
              f"min {entry['min']:.4g} median {entry['median']:.4g} max {entry['max']:.4g}",
              flush=True)
        if not args.dry_run:  # one workload at a time: a later failure keeps what was measured
            write(name, args.profile, entry, args.table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
