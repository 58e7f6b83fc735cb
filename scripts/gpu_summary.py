"""The GPU script's summary: each run's speed, MFU, memory and start-up, and the peer's ratios.

Usage::

    python scripts/gpu_summary.py $OUT/runs.jsonl $OUT/peer.jsonl    # either may be missing

One line per result of ``runs.jsonl`` (``parabench run``'s JSON Lines): workload, method,
batch, options, samples/s, MFU with its arithmetic, what training needs on the GPU
(``peak_gpu_mb``), the evaluation's peak and the data kept on the device, start-up and where
the data came from (built or the sweep's cache); then one line per object of ``peer.jsonl``
(``scripts/hand_loop.py``'s output: parabench's ratio to the hand loop, or the hand loop's
own speed and CUDA peak).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from parabench.case.result import read_results


def _mb(value: object) -> str:
    return f"{value:,.0f}" if isinstance(value, int | float) else "-"


def runs(path: Path) -> list[str]:
    out = ["workload method batch options: samples/s, MFU, train GPU MB (eval peak, data), "
           "start-up s (data), status"]
    for r in read_results(path):
        opts = " ".join(f"{k}={v}" for k, v in sorted(r.config.get("options", {}).items()))
        peak = r.machine.peak if r.machine else None
        mfu = f"{r.mfu:.1%} {peak.arithmetic}" if r.mfu is not None and peak else "-"
        rate = f"{r.samples_per_s:,.0f}" if r.samples_per_s else "-"
        start = f"{r.startup_s:.1f}" if r.startup_s is not None else "-"
        data = r.extra.get("data_source", "?")
        out.append(f"{r.workload} {r.method} {r.batch_size} {opts}: {rate}/s, {mfu}, "
                   f"{_mb(r.peak_gpu_mb)} ({_mb(r.extra.get('gpu_eval_peak_mb'))}, "
                   f"{_mb(r.extra.get('gpu_data_mb'))}), {start} ({data}), {r.status} "
                   f"{r.reason[:100]}".rstrip())
    return out


def peers(path: Path) -> list[str]:
    out = []
    for line in path.read_text().splitlines():
        try:
            p = json.loads(line)
        except ValueError:
            continue
        what = (f"peer {p.get('workload')} b{p.get('batch_size')} {p.get('precision')} "
                f"channels_last={p.get('channels_last')}")
        if "ratio" in p:
            out.append(f"{what}: parabench/hand {p['ratio']:.3f} "
                       f"({p['parabench_samples_per_s']:,.0f} vs {p['hand_samples_per_s']:,.0f}"
                       f" samples/s, loss gap {p.get('loss_gap')})")
        else:
            out.append(f"{what}: hand loop {p.get('samples_per_s', 0):,.0f} samples/s, "
                       f"CUDA peak {_mb(p.get('peak_gpu_mb'))} MB")
    return out


def main(argv: list[str]) -> int:
    for arg in argv:
        path = Path(arg)
        if not path.exists():
            continue
        print("\n".join(runs(path) if path.name.startswith("runs") else peers(path)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
