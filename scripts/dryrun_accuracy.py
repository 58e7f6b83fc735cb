"""How right the dry run is: its estimated total against the wall time of the same run.

Usage::

    python scripts/dryrun_accuracy.py --workload mlp --method serial --profile tiny --epochs 1
    python scripts/dryrun_accuracy.py --json acc.json --learn-from results.jsonl --workload cnn \
        --method serial,ddp,pipeline,fsdp,fedavg --workers 1,2 --profile tiny --target-quality

Every argument but ``--json`` and ``--learn-from`` is ``parabench run``'s. ``--learn-from
FILE`` first adds the ok results in FILE (with their ``wall_parts``) to this machine's cost
history, as if its sweeps had run with it (the history is deduplicated when read).

The script runs ``parabench run ARGS --dry-run`` first and reads its total (``estimated
2m41s ± 7 % (...)``: the estimate and the model's expected error; a total of declared guesses
has none), then ``parabench run ARGS``, timed by the script's own clock from starting the
command to its exit, and prints the estimate, the actual wall time, their difference in % of
the actual and whether it fell within the stated error and within the ±25 % the dry run aims
at. It also prints the cases' summed ``wall_s`` and what the sweep cost beyond them (the dry
run's ``SWEEP_OVERHEAD_S`` and ``CASE_OVERHEAD_S``). Without ``--out`` the results go to a
temporary file (the dry run then sees no earlier results there, only this machine's cost
history).

Run it on a quiet machine: it measures, and another job's load is the dry run's error too.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TOTAL = re.compile(r"estimated (?:(\d+)h(\d+)m|(\d+)m(\d+)s)(?: ± (\d+|\?) %?)?")


def parse_total(text: str) -> tuple[float, float | str]:
    """(estimated seconds, expected error as a fraction) from the dry run's text; in place of
    the error, why there is none: "unknown" (too few recorded cases) or "guessed"."""
    m = TOTAL.search(text)
    if m is None:
        raise SystemExit(f"no 'estimated ...' in the dry run's output:\n{text}")
    h, hm, m_, s, err = m.groups()
    seconds = int(h) * 3600 + int(hm) * 60 if h is not None else int(m_) * 60 + int(s)
    if err is None:
        return float(seconds), "guessed"
    return float(seconds), (int(err) / 100 if err != "?" else "unknown")


def out_path(args: list[str]) -> str | None:
    for i, a in enumerate(args):
        if a == "--out" and i + 1 < len(args):
            return args[i + 1]
        if a.startswith("--out="):
            return a.split("=", 1)[1]
    return None


def wall_sum(path: Path, skip: int) -> tuple[int, float]:
    """(cases, summed wall_s) of the results written past the first ``skip`` lines."""
    lines = path.read_text().splitlines()[skip:] if path.exists() else []
    walls = [json.loads(line).get("wall_s") or 0.0 for line in lines if line.strip()]
    return len(walls), sum(walls)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", help="also write the figures here")
    parser.add_argument("--learn-from", action="append", default=[], metavar="FILE",
                        help="results whose cases join this machine's cost history first")
    ours, run_args = parser.parse_known_args(argv)
    if ours.learn_from:
        from parabench.case.result import read_results
        from parabench.sweep.costs import append_costs, history_path

        for path in ours.learn_from:
            for result in read_results(path):
                if (problem := append_costs(result)) is not None:
                    raise SystemExit(f"the cost history {history_path()}: {problem}")
    with tempfile.TemporaryDirectory(prefix="dryrun-accuracy-") as tmp:
        if out_path(run_args) is None:
            run_args = [*run_args, "--out", str(Path(tmp) / "results.jsonl")]
        out = Path(out_path(run_args) or "")
        command = [sys.executable, "-m", "parabench", "run", *run_args]
        dry = subprocess.run([*command, "--dry-run"], capture_output=True, text=True,
                             check=False)
        if dry.returncode != 0:
            print(dry.stdout + dry.stderr, file=sys.stderr)
            return dry.returncode
        estimate, error = parse_total(dry.stdout)
        print(dry.stdout.rstrip().splitlines()[-1].strip())
        before = len(out.read_text().splitlines()) if out.exists() else 0
        start = time.perf_counter()
        real = subprocess.run(command, check=False)
        actual = time.perf_counter() - start
        cases, walls = wall_sum(out, before)
    off = (estimate - actual) / actual
    if isinstance(error, float):
        stated, within = f"± {error:.0%}", "yes" if abs(off) <= error else "no"
    else:
        stated, within = {"unknown": "error unknown: too few recorded cases",
                          "guessed": "no stated error: declared guesses"}[error], "n/a"
    print(f"\nestimated {estimate:.0f} s ({stated}); actual {actual:.1f} s by this script's "
          f"clock (exit {real.returncode}); off by {off:+.1%} of the actual")
    print(f"within the stated error: {within}; within ±25 %: "
          f"{'yes' if abs(off) <= 0.25 else 'no'}")
    print(f"{cases} case(s) summed {walls:.1f} s of wall_s; the sweep beyond them "
          f"{actual - walls:.1f} s")
    if ours.json:
        Path(ours.json).write_text(json.dumps({
            "args": run_args, "estimate_s": estimate, "expected_error": error,
            "actual_s": actual, "off": off, "cases": cases, "cases_wall_s": walls,
            "sweep_overhead_s": actual - walls, "exit": real.returncode}, indent=1) + "\n")
    return 0 if real.returncode == 0 else real.returncode


if __name__ == "__main__":
    sys.exit(main())
