"""What placing the evaluations changes: samples to the target and evaluation time, with the
epochs before serial's first measured crossing evaluated at their ends only (the default,
:func:`parabench.case.stopping.mid_epoch_from`) against every part evaluated
(``PARABENCH_EVAL_ALL_PARTS=1``), the same case and seed on both sides.

Usage::

    python scripts/eval_placement.py --workload cnn --seeds 10 --out docs/eval_placement/cnn.json
    python scripts/eval_placement.py --workload mlp --method serial,fedavg --workers 2 --seeds 3

Each seed runs ``parabench run --target-quality --profile tiny`` once each way (alternating,
placed first), and the script prints one line per seed and a summary: in how many seeds the
samples to the target (every configuration's) were the same, and the evaluation seconds and
wall seconds of both sides (``wall_parts``). Samples are deterministic on CPU for a seed, so
a difference is the placement's doing.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path


def run(workload: str, method: str, workers: str, seed: int, all_parts: bool,
        folder: Path) -> list[dict]:
    out = folder / f"s{seed}-{'all' if all_parts else 'placed'}.jsonl"
    env = dict(os.environ)
    env.pop("PARABENCH_EVAL_ALL_PARTS", None)
    if all_parts:
        env["PARABENCH_EVAL_ALL_PARTS"] = "1"
    cmd = [sys.executable, "-m", "parabench", "run", "--workload", workload, "--method",
           method, "--workers", workers, "--profile", "tiny", "--target-quality", "--seed",
           str(seed), "--out", str(out)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if not out.exists():
        raise SystemExit(f"seed {seed}: parabench run wrote nothing\n{proc.stderr[-2000:]}")
    return [json.loads(line) for line in out.read_text().splitlines()]


def summary(rows: list[dict]) -> dict:
    def label(r: dict) -> str:
        return f"{r['method']} {r['workers']}x{r['threads_per_worker']}"

    def parts(r: dict, name: str) -> float:
        return (r.get("wall_parts") or {}).get(name, 0.0)

    return {
        "samples": {label(r): (r.get("time_to_target") or {}).get("samples_to_target")
                    for r in rows},
        "evals": sum(len((r.get("time_to_target") or {}).get("eval_quality") or [])
                     for r in rows),
        "evaluate_s": round(sum(parts(r, "evaluate") for r in rows), 2),
        "wall_s": round(sum(r.get("wall_s") or 0.0 for r in rows), 2),
        "verdicts": {label(r): (r.get("parity") or {}).get("status") for r in rows},
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workload", default="cnn")
    p.add_argument("--method", default="serial")
    p.add_argument("--workers", default="1")
    p.add_argument("--seeds", type=int, default=10)
    p.add_argument("--out", help="JSON file for the per-seed records")
    args = p.parse_args(argv)
    records = []
    with tempfile.TemporaryDirectory() as tmp:
        for seed in range(args.seeds):
            sides = {}
            for all_parts in (False, True):
                rows = run(args.workload, args.method, args.workers, seed, all_parts, Path(tmp))
                sides["all" if all_parts else "placed"] = summary(rows)
            same = sides["placed"]["samples"] == sides["all"]["samples"]
            records.append({"seed": seed, "same_samples": same, **sides})
            print(f"seed {seed}: samples {'same' if same else 'DIFFER'} "
                  f"{sides['placed']['samples']} vs {sides['all']['samples']}; evaluations "
                  f"{sides['placed']['evals']} vs {sides['all']['evals']} "
                  f"({sides['placed']['evaluate_s']} s vs {sides['all']['evaluate_s']} s); "
                  f"wall {sides['placed']['wall_s']} s vs {sides['all']['wall_s']} s", flush=True)
    same = sum(r["same_samples"] for r in records)
    saved = sum(r["all"]["evaluate_s"] - r["placed"]["evaluate_s"] for r in records)
    print(f"{args.workload} {args.method} w={args.workers}: samples to the target the same in "
          f"{same} of {len(records)} seeds; evaluation seconds saved {saved:.1f} in all")
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps({"workload": args.workload, "method": args.method,
                                              "workers": args.workers, "seeds": records},
                                             indent=1) + "\n")
    return 0 if same == len(records) else 1


if __name__ == "__main__":
    sys.exit(main())
