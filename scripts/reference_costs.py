"""Write the dry run's reference cost table from the results of real runs.

Usage::

    parabench run --out /tmp/grid.jsonl                      # the default grid, alone
    parabench run --workload mlp,cnn --method serial,ddp,pipeline,fsdp,fedavg \
        --workers 1,2 --profile tiny --target-quality --out /tmp/main.jsonl   # the main job
    python scripts/reference_costs.py /tmp/grid.jsonl /tmp/main.jsonl
    python scripts/reference_costs.py --check /tmp/grid.jsonl      # what it would hold

Each ok result with its wall-time split becomes one history row
(:func:`parabench.sweep.costs.cost_row`), written to
``src/parabench/sweep/reference_costs.jsonl`` (``--out`` to choose), replacing the table:
the cost model reads it for the cases a machine has not recorded
(:mod:`parabench.sweep.costref`). Run the sweeps alone on a quiet machine and record their
command, date and load in docs/measurements.md ("The dry run on a first run").
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
from pathlib import Path

from parabench.case.result import read_results
from parabench.sweep.costref import REFERENCE_FILE
from parabench.sweep.costs import cost_row


def rows_of(paths: list[Path]) -> list[dict]:
    """The history rows of the ok results in ``paths``, oldest first."""
    rows = []
    for path in paths:
        for result in read_results(path):
            if (row := cost_row(result)) is not None:  # None unless ok with its split
                rows.append(row)
    return sorted(rows, key=lambda r: str(r.get("t", "")))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", nargs="+", type=Path, help="results files of real runs")
    parser.add_argument("--out", type=Path, default=REFERENCE_FILE)
    parser.add_argument("--check", action="store_true", help="print, write nothing")
    args = parser.parse_args(argv)
    missing = [str(p) for p in args.results if not p.is_file()]
    if missing:
        print(f"no such results file: {', '.join(missing)}", file=sys.stderr)
        return 2
    rows = rows_of(args.results)
    if not rows:
        print("no ok result with a wall-time split in those files", file=sys.stderr)
        return 2
    machines = collections.Counter(r["machine"] for r in rows)
    print(f"{len(rows)} row(s) of {len(machines)} machine(s): "
          + "; ".join(f"{m} ({n})" for m, n in machines.items()))
    if not args.check:
        args.out.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
