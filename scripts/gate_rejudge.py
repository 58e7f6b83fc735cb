"""Judge the gate harness's recorded interleaved rounds again, with today's ``compare``.

Usage::

    PYTHONPATH=src python scripts/gate_rejudge.py                 # docs/gate/rejudged.md
    PYTHONPATH=src python scripts/gate_rejudge.py --out /tmp/r.md --threshold 0.05
    PYTHONPATH=src python scripts/gate_rejudge.py --resample 2000   # and resampled rates

Every interleaved record of ``scripts/gate_harness.py`` keeps its rounds' NEW/BASE ratios
(``round_ratios``: each run's samples/s, the median of its steady windows, so a ratio is the
round's difference the paired test uses). Those measured rounds are judged again by
:func:`parabench.analysis.compare.judge_speed`, paired, as ``compare --rerun`` judges them
now; nothing is measured and no figure is edited. The table sets each cell's rate as it was
recorded beside the rate today's test gives on the same rounds. Records with a round that
failed (a None ratio) are left out: ``compare`` judges those unpaired, from windows the
record does not keep. So are records of fewer than ``MIN_ROUNDS`` rounds: today's test for
them is still the t test, which also reads each run's windows, and the record has none.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections import defaultdict
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gate_harness import (  # noqa: E402  (scripts/)
    DEFAULT_OUT,
    RECORDS,
    _slowdown_label,
    mode_label,
    plant,
    read_records,
)

from parabench.analysis.compare import judge_speed, speed_verdict  # noqa: E402
from parabench.analysis.signflip import MIN_ROUNDS, p_value, trimmed_mean  # noqa: E402
from parabench.analysis.stats import wilson  # noqa: E402

OUT = DEFAULT_OUT / "rejudged.md"


def rejudge_ok(record: Mapping[str, Any]) -> bool:
    """Whether the record is a complete paired comparison of MIN_ROUNDS rounds or more."""
    ratios = record.get("round_ratios")
    return (record["mode"] == "interleaved" and bool(ratios) and None not in ratios
            and len(ratios) >= MIN_ROUNDS)


def rejudge(record: Mapping[str, Any], threshold: float) -> dict[str, Any] | None:
    """The record's rounds judged by today's paired test (None: not :func:`rejudge_ok`)."""
    if not rejudge_ok(record):
        return None
    ratios = record["round_ratios"]
    speed = judge_speed([[1.0]] * len(ratios), [[r] for r in ratios], threshold, paired=True)
    return {"verdict": speed.verdict, "regressed": speed.regressed, "ratio": speed.ratio,
            "p": speed.estimate.p, "test": speed.estimate.test}


def table(sources: Iterable[Path], threshold: float) -> str:
    groups: dict[tuple, list[tuple[Mapping[str, Any], dict[str, Any]]]] = defaultdict(list)
    for source in sources:
        for r in read_records(source / RECORDS):
            now = rejudge(r, threshold)
            if now is None or r["settings"].get("threshold") != threshold:
                continue
            rounds = len(r["round_ratios"])
            groups[(source.name, mode_label(r), rounds, r["condition"], float(r["slowdown"]),
                    plant(r))].append((r, now))
    lines = ["| records | judged then by | rounds | condition | injected slowdown | "
             "flagged as recorded | flagged by today's test | today's test | load before "
             "(1 min) |", "|---|---|---|---|---|---|---|---|---|"]
    for (source, mode, rounds, condition, slowdown, how), pairs in sorted(groups.items()):
        was = sum(bool(r["regressed"]) for r, _ in pairs)
        now = sum(bool(n["regressed"]) for _, n in pairs)
        tests = sorted({n["test"] for _, n in pairs})
        before = [float(r["load_before"].split()[0]) for r, _ in pairs]
        lines.append(f"| {source} | {mode.removeprefix('interleaved, ')} | {rounds} | "
                     f"{condition} | {_slowdown_label(slowdown, how)} | {was}/{len(pairs)} | "
                     f"{now}/{len(pairs)} | {'; '.join(tests)} | "
                     f"{min(before):.2f}-{max(before):.2f} |")
    return "\n".join([
        "# The gate's recorded rounds, judged again", "",
        "Written by `scripts/gate_rejudge.py` (threshold "
        f"{threshold:.0%}): the interleaved records of `scripts/gate_harness.py` under "
        "docs/gate, their measured rounds judged again by today's `compare --rerun` test. "
        "A/A rows count false alarms, the others detections. Same rounds, same plant; only "
        "the test differs.", "", *lines, ""])


def resampled(sources: Iterable[Path], threshold: float, draws: int, seed: int = 0) -> str:
    """Rates of today's test on comparisons resampled from the measured rounds: each draw
    picks one recorded comparison of the cell at random and draws its rounds' count of rounds
    from it with replacement (so a draw keeps the spread of the comparison it came from), then
    judges them as ``compare --rerun`` would (SLOWER: past the threshold and p < 0.05)."""
    rng = np.random.default_rng(seed)
    cells: dict[tuple, list[list[float]]] = defaultdict(list)
    for source in sources:
        for r in read_records(source / RECORDS):
            if rejudge_ok(r) and r["settings"].get("threshold") == threshold:
                cells[(r["condition"], float(r["slowdown"]), plant(r))].append(
                    [math.log(x) for x in r["round_ratios"]])
    lines = ["| condition | injected slowdown | recorded comparisons (rounds) | resampled "
             "comparisons | flagged SLOWER | 95% interval of the rate |",
             "|---|---|---|---|---|---|"]
    for (condition, slowdown, how), comparisons in sorted(cells.items()):
        hits = 0
        for _ in range(draws):
            logs = np.asarray(comparisons[rng.integers(len(comparisons))])
            diffs = rng.choice(logs, size=len(logs), replace=True)
            ratio = math.exp(float(trimmed_mean(diffs)))
            hits += speed_verdict(ratio, p_value(diffs), threshold).startswith("SLOWER")
        lo, hi = wilson(hits, draws)
        rounds = sum(len(c) for c in comparisons)
        lines.append(f"| {condition} | {_slowdown_label(slowdown, how)} | {len(comparisons)} "
                     f"({rounds}) | {draws} | {hits / draws:.2%} | {lo:.2%}-{hi:.2%} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--records", type=Path, nargs="+", metavar="DIR",
                   help="harness output directories (default: docs/gate and its subfolders)")
    p.add_argument("--threshold", type=float, default=0.05)
    p.add_argument("--out", type=Path, default=OUT)
    p.add_argument("--resample", type=int, default=0, metavar="N",
                   help="also N comparisons per cell resampled from the measured rounds")
    args = p.parse_args(argv)
    sources = args.records or sorted(d for d in (DEFAULT_OUT, *DEFAULT_OUT.iterdir())
                                     if (d / RECORDS).is_file())
    text = table(sources, args.threshold)
    if args.resample:
        how = " ".join(resampled.__doc__.split(":", 1)[1].split())
        text += "\n".join([
            "", "## Resampled from the measured rounds (a prediction, not a measurement)", "",
            f"`--resample {args.resample}`: {how} The "
            "draws assume a comparison's rounds are exchangeable. A draw is centred on its "
            "comparison's own estimate, not on the truth, which about doubles the variance "
            "of its estimate: the rates overstate false alarms and understate detection. "
            "The interval is the draws' own; the recorded comparisons are few, and that "
            "limits it more.",
            "", resampled(sources, args.threshold, args.resample), ""])
    args.out.write_text(text)
    print(args.out.read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
