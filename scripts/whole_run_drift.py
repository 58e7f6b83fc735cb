"""How far reduction order moves a whole run: the yardstick for exact parity beyond the trace.

Usage::

    parabench run --workload mlp,cnn,conv_autoencoder --method serial,ddp,fsdp,pipeline \
        --workers 2 --profile tiny --epochs 3 --steps 0 --threads 1 --out drift.jsonl
    python scripts/whole_run_drift.py drift.jsonl

Prints, for every result of that file against serial at 1 thread of the same workload: the
run's training steps, the estimated relative L2 difference of the final (evaluated) weights,
the worst relative difference of a per-epoch training loss (and its epoch), and the held-out
quality gap. ``analysis/trajectory.py`` states the figures next to the tolerances derived
from them (FINAL_WEIGHT_RTOL, EPOCH_LOSS_RTOL, EVAL_TOLERANCE, EVAL_RTOL).
"""

from __future__ import annotations

import argparse
import json

from parabench.analysis.trajectory import epoch_loss_rel_max, weight_rel_l2


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", help="a JSON Lines results file of parabench run")
    rows = [json.loads(line) for line in open(parser.parse_args().results)]
    ok = [r for r in rows if r["status"] == "ok" and r.get("trace")]
    for workload in sorted({r["workload"] for r in ok}):
        mine = [r for r in ok if r["workload"] == workload]
        ref = next(r for r in mine if r["method"] == "serial" and r["threads_per_worker"] == 1)
        for r in mine:
            if r is ref:
                continue
            final = (weight_rel_l2(r["trace"]["final_digest"], ref["trace"]["final_digest"])[0]
                     if r["trace"].get("final_digest") and ref["trace"].get("final_digest")
                     else None)
            loss, epoch = epoch_loss_rel_max(r["loss"], ref["loss"])
            steps = r["epochs"] * -(-(r["samples_per_epoch"] or 0) // (r["batch_size"] or 1))
            gap = r["quality"]["value"] - ref["quality"]["value"]
            print(f"{workload:18s} {r['method']:10s} t={r['threads_per_worker']} "
                  f"steps={steps:4d} final_w={final if final is None else f'{final:.1e}'} "
                  f"epoch_loss={loss:.1e} (epoch {epoch}) quality_gap={gap:+.2e} "
                  f"(relative {gap / ref['quality']['value']:+.1e})")


if __name__ == "__main__":
    main()
