"""The gate harness's asv mode: the ``asv-gate`` workflow's command, A/A, one record per benchmark.

Usage (through the harness)::

    PYTHONPATH=src python scripts/gate_harness.py --mode asv --count 10

    with asv_twin(scratch) as twin:                # a clone of HEAD plus an empty twin commit
        records = run_asv(work, args, twin)       # asv continuous HEAD~1 HEAD, its table read
    asv_rows(asv_stdout)                           # the benchmarks asv compared

Kept apart from ``scripts/gate_harness.py`` (which imports it) so the harness reads as its
three modes' shared loop.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
#: asv's cheap selection, the one the asv workflow gates pull requests with
ASV_BENCH = r"Window\.time_window\('mlp', '(serial', 'cpu', 1|ddp', 'cpu', 2)\)"
#: asv compare's change marks (a blank one: the same)
ASV_MARKS = {"+": "worse", "-": "better", "x": "failed", "!": "failed", "*": "n/a"}


@contextmanager
def asv_twin(scratch: Path) -> Iterator[tuple[Path, Path, dict[str, str]]]:
    """A clone of HEAD with an empty commit on top (same code, another hash: asv keeps results
    by commit, so HEAD against itself would compare one result with itself), an asv config
    whose repo, environments and results live in ``scratch``, and an environment whose HOME
    (asv's machine file) is there too."""
    clone = scratch / "asv-clone"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    subprocess.run(["git", "-C", str(clone), "-c", "user.name=gate", "-c",
                    "user.email=gate@example.invalid", "commit", "-q", "--allow-empty", "-m",
                    "A/A twin of HEAD"], check=True)
    conf = json.loads((ROOT / "asv.conf.json").read_text())
    conf.update(repo=str(clone), benchmark_dir=str(ROOT / "benchmarks"),
                branches=["HEAD"], env_dir=str(scratch / "asv-env"),
                results_dir=str(scratch / "asv-results"), html_dir=str(scratch / "asv-html"))
    conf_path = scratch / "asv.conf.json"
    conf_path.write_text(json.dumps(conf))
    env = {**os.environ, "HOME": str(scratch / "home"), "PARABENCH_ASV_PROFILE": "tiny"}
    (scratch / "home").mkdir(exist_ok=True)
    subprocess.run([sys.executable, "-m", "asv", "--config", str(conf_path), "machine",
                    "--yes"], env=env, capture_output=True, check=True)
    yield clone, conf_path, env


def run_asv(work: Path, args: argparse.Namespace, twin: tuple[Path, Path, dict[str, str]]
            ) -> list[dict[str, Any]]:
    """The asv-gate workflow's command, HEAD~1 (HEAD) against HEAD (its empty twin), with
    ``--no-only-changed`` so asv's table lists every benchmark (output only: the decision is
    the workflow's): one record per benchmark parameter set, flagged where asv marks it
    ``+`` (worse)."""
    clone, conf, env = twin
    cmd = [sys.executable, "-m", "asv", "--config", str(conf), "continuous",
           "--interleave-rounds", "-a", f"rounds={args.asv_rounds}", "--no-only-changed",
           "--factor", str(1 + args.threshold), "-b", args.asv_bench, "HEAD~1", "HEAD"]
    done = subprocess.run(cmd, cwd=clone, env=env, capture_output=True, text=True, check=False)
    (work / "asv.log").write_text(done.stdout + done.stderr)
    worse = "PERFORMANCE DECREASED" in done.stdout
    if done.returncode not in (0, 1) or (done.returncode == 1 and not worse):
        raise RuntimeError(f"asv continuous failed (exit {done.returncode}); see "
                           f"{work / 'asv.log'}:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    rows = asv_rows(done.stdout)
    if not rows:  # nothing parsed: asv's one verdict for the whole selection
        return [{"case": args.asv_bench, "verdict": "asv: PERFORMANCE DECREASED" if worse
                 else "asv: not decreased", "regressed": worse, "ratio": None, "p": None,
                 "samples": f"{args.asv_rounds} rounds"}]
    return [{**row, "p": None, "samples": f"{args.asv_rounds} rounds"} for row in rows]


def asv_rows(text: str) -> list[dict[str, Any]]:
    """The benchmarks run in ``asv continuous``'s (github-style) comparison table (it lists
    every parameter set; those not selected read n/a on both sides): ``case`` (the
    parameters), ``verdict`` (asv's mark and ratio), ``regressed`` (marked ``+``: slower),
    ``ratio`` (NEW's rate over BASE's: BEFORE's time / AFTER's, as the other modes report)."""
    rows = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 5 or "(" not in cells[4] or cells[0] not in {"", *ASV_MARKS}:
            continue
        mark, before, after, ratio, bench = cells
        if before == after == "n/a":  # a parameter set -b did not select: listed, not run
            continue
        params = bench[bench.index("(") + 1 : bench.rindex(")")].replace("'", "")
        try:
            value = float(ratio.lstrip("~"))
        except ValueError:
            value = None
        rows.append({"case": params, "regressed": mark == "+",
                     "verdict": f"asv: {ASV_MARKS.get(mark, 'same')} ({ratio or 'n/a'})",
                     "ratio": 1 / value if value else None})
    return rows
