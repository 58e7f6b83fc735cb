"""Measure the time-to-target quality verdict's two error rates on really degraded training.

Usage::

    PYTHONPATH=src python scripts/quality_gate_power.py --workload cnn        # 20 seeds
    PYTHONPATH=src python scripts/quality_gate_power.py --workload mlp --seeds 2 \\
        --fractions 0.9 --scan-seeds 1 --no-fedavg --out /tmp/power
    PYTHONPATH=src python scripts/quality_gate_power.py --workload cnn --fractions 0.1 \\
        --drop 0.02 --no-sound --no-fedavg --out /tmp/power-02   # a smaller plant only

In time-to-target mode a statistical method is trained on past the target to the measured
table's epoch budget and judged on its quality there against serial's over the table's seeds
(:mod:`parabench.analysis.target_parity`), and the table states the loss it is blind to
(``ok, blind <L``). This script checks both error rates with the test plugin
``serial_flip`` (``tests/plugins/label_flip.py``: serial trained on a seeded fraction of
wrong labels; real training, no figure edited):

1. **scan**: for each ``--fractions`` value, smallest first, ``serial_flip`` trains the
   target table's epoch budget (``--epochs E``, 1 worker, 1 thread, as the table was
   measured) for ``--scan-seeds`` seeds; the first fraction whose median last-epoch quality is
   at least ``--drop`` (0.03) below the table's serial median is the *lossy* fraction;
2. **gate**: for every seed (``--seeds`` of them from ``--first-seed``; by default those after
   the table's, so no gate run repeats a run the table was measured on; the scan's too),
   ``parabench run --method serial,serial_flip --target-quality``
   (the measured default target) with no labels flipped (a sound method: it must pass) and
   at the lossy fraction (it must fail), as a user runs it; the verdict is read from the
   results file (with each run's converged quality and whether it reached the target, so the
   reaching rule's rates can be read off the same runs). ``--method forest_flip`` gates a
   forest instead (another ``random_state``, so its fraction 0 is a sound other forest: the
   A/A case). With fedavg (default), the real
   statistical method also runs, 2 clients, to the same target: its pass rate is the
   false-fail rate users meet.

The rates (passes of the sound runs, failures of the lossy ones, over the seeds) and every
run's verdict go to ``OUT/<workload>-<profile>.json`` and a table on stdout. Runs are kept
(``--runs``, default ``OUT/runs/``) and reused when present, so a run can be resumed.
Quality only: the machine's load does not change these figures (it is recorded all the
same).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "docs" / "gate-power"
FAST = {"PARABENCH_WINDOWS": "2", "PARABENCH_WINDOW_S": "0.05"}  # speed is not judged here


def run(runs: Path, name: str, argv: list[str], fraction: float) -> list[dict[str, Any]]:
    """One real ``parabench run`` (kept in ``runs/NAME.jsonl``); its results."""
    path = runs / f"{name}.jsonl"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, **FAST, "PARABENCH_PLUGINS": "label_flip",
               "PARABENCH_FLIP_FRACTION": str(fraction),
               "PYTHONPATH": os.pathsep.join([str(ROOT / "tests" / "plugins"),
                                              str(ROOT / "src")])}
        tmp = path.with_suffix(".partial")
        tmp.unlink(missing_ok=True)
        cmd = [sys.executable, "-m", "parabench", "run", *argv, "--out", str(tmp)]
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
        if done.returncode not in (0, 1) or not tmp.exists():
            raise SystemExit(f"{' '.join(cmd)} failed ({done.returncode}):\n{done.stderr[-2000:]}")
        tmp.rename(path)
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def last_quality(rows: list[dict[str, Any]], method: str) -> float:
    (row,) = [r for r in rows if r["method"] == method]
    return float(row["quality"]["value"])


def scan(out: Path, workload: str, profile: str, entry: dict[str, Any],
         fractions: list[float], seeds: range, drop: float, method: str = "serial_flip"
         ) -> tuple[float | None, list[dict]]:
    """The smallest fraction costing at least ``drop`` of serial's median converged quality."""
    sign = 1 if entry["higher_is_better"] else -1
    rows = []
    for fraction in fractions:
        values = [last_quality(run(out, f"scan-f{fraction}-s{s}", [
            "--workload", workload, "--method", method, "--workers", "1", "--threads",
            "1", "--profile", profile, "--epochs", str(entry["epochs"]), "--seed", str(s)],
            fraction), method) for s in seeds]
        loss = sign * (entry["median"] - statistics.median(values))
        rows.append({"fraction": fraction, "values": values, "loss": loss})
        print(f"scan: {fraction:.1%} of labels flipped: {entry['epochs']} epochs -> median "
              f"{statistics.median(values):.4f}, {loss:+.4f} below serial's "
              f"{entry['median']:.4f}", flush=True)
        if loss >= drop:
            return fraction, rows
    return None, rows


def verdict(rows: list[dict[str, Any]], method: str) -> dict[str, Any]:
    (row,) = [r for r in rows if r["method"] == method and r["status"] == "ok"]
    p, t = row["parity"], row["time_to_target"]
    return {"status": p["status"], "basis": p.get("basis"), "differs": p.get("differs"),
            "gap": p.get("gap"), "reached": t["reached"], "best": t["best_quality"],
            "converged": t.get("converged_quality"), "blind": p.get("detectable_loss"),
            "quality": row["quality"]["value"]}


def gate(out: Path, workload: str, profile: str, seeds: range, fraction: float,
         fedavg: bool, sound: bool = True, method: str = "serial_flip") -> dict[str, Any]:
    common = ["--workload", workload, "--profile", profile, "--target-quality"]
    runs: dict[str, list[dict[str, Any]]] = {"sound": [], "lossy": [], "fedavg": []}
    for s in seeds:
        for kind, f in (("sound", 0.0), ("lossy", fraction))[0 if sound else 1:]:
            rows = run(out, f"gate-f{f}-s{s}", [*common, "--method", f"serial,{method}",
                                                 "--workers", "1", "--threads", "1",
                                                 "--seed", str(s)], f)
            runs[kind].append({"seed": s, **verdict(rows, method)})
        if fedavg:
            rows = run(out, f"gate-fedavg-s{s}", [*common, "--method", "serial,fedavg",
                                                   "--workers", "2", "--threads", "1",
                                                   "--seed", str(s)], 0.0)
            runs["fedavg"].append({"seed": s, **verdict(rows, "fedavg")})
        print(f"gate: seed {s}: " + ", ".join(f"{k} {v[-1]['status']}" for k, v in runs.items()
                                               if v), flush=True)
    return runs


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workload", default="cnn")
    p.add_argument("--profile", default="tiny")
    p.add_argument("--seeds", type=int, default=20)
    p.add_argument("--first-seed", type=int, default=None,
                   help="default: the first seed after the target table's, so no gate run "
                        "repeats a run the table was measured on")
    p.add_argument("--scan-seeds", type=int, default=5)
    p.add_argument("--fractions", default="0.1,0.125,0.15,0.175,0.2,0.3,0.4,0.5,0.6,0.8")
    p.add_argument("--drop", type=float, default=0.03)
    p.add_argument("--no-fedavg", dest="fedavg", action="store_false")
    p.add_argument("--no-sound", dest="sound", action="store_false",
                   help="run only the lossy fraction (a second plant beside a full run)")
    p.add_argument("--method", default="serial_flip",
                   help="the degraded method: serial_flip (networks) or forest_flip (forests)")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    p.add_argument("--runs", type=Path, default=None, help="where runs are kept (OUT/runs)")
    args = p.parse_args(argv)
    runs_dir = args.runs or args.out / "runs"
    sys.path.insert(0, str(ROOT / "src"))
    from parabench.workloads.quality_targets import table

    entry = table().get(args.workload, {}).get(args.profile)
    if entry is None:
        p.error(f"no measured target for {args.workload} at {args.profile}")
    first = max(entry["seeds"]) + 1 if args.first_seed is None else args.first_seed
    started, load = datetime.now(timezone.utc), os.getloadavg()[0]
    fraction, scanned = scan(runs_dir, args.workload, args.profile, entry,
                             [float(f) for f in args.fractions.split(",")],
                             range(first, first + args.scan_seeds), args.drop, args.method)
    if fraction is None:
        print(f"no fraction costs {args.drop} of serial's quality: nothing lossy to gate")
        return 1
    runs = gate(runs_dir, args.workload, args.profile, range(first, first + args.seeds),
                fraction, args.fedavg, args.sound, args.method)
    rates = {kind: {"passed": sum(r["status"] == "ok" for r in rs), "runs": len(rs),
                    "reached": sum(bool(r["reached"]) for r in rs)}
             for kind, rs in runs.items() if rs}
    blind = {r["blind"] for rs in runs.values() for r in rs}
    record = {"workload": args.workload, "profile": args.profile, "target": entry["target"],
              "table_seeds": entry["seeds"], "seeds": [first, first + args.seeds - 1],
              "serial_median": entry["median"], "lossy_fraction": fraction,
              "drop": args.drop, "scan": scanned, "rates": rates, "stated_blind": sorted(
                  b for b in blind if b is not None), "runs": runs,
              "command": "python scripts/quality_gate_power.py " + " ".join(
                  sys.argv[1:] if argv is None else argv),
              "started": started.isoformat(timespec="seconds"),
              "finished": datetime.now(timezone.utc).isoformat(timespec="seconds"),
              "load_start": round(load, 2), "load_end": round(os.getloadavg()[0], 2)}
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"{args.workload}-{args.profile}.json"
    path.write_text(json.dumps(record, indent=1) + "\n")
    print(f"\n{args.workload} at {args.profile}: target {entry['target']:.4f}, stated blind "
          f"<{', '.join(f'{b:.4f}' for b in record['stated_blind'])}")
    for kind, what in (("sound", "no labels flipped: passed"),
                       ("lossy", f"{fraction:.1%} flipped (costs >= {args.drop}): failed"),
                       ("fedavg", "fedavg, 2 clients: passed")):
        if kind in rates:
            n, total = rates[kind]["passed"], rates[kind]["runs"]
            shown = total - n if kind == "lossy" else n
            print(f"  {what} {shown}/{total} (reached the target: "
                  f"{rates[kind]['reached']}/{total})")
    print(f"record: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
