"""How close each real case's figures came to their evidence: the A/A side of the checks at
the file (:mod:`parabench.case.audit`), read from results files.

Usage::

    python scripts/audit_agreement.py results.jsonl [more.jsonl ...]

One line per ok result with evidence: the case's cores and the runner's outside reading, their
difference against the tolerance (``margin``: the share of the tolerance used; over 1.0 would
fail the case), the steady windows' share of their span, and whether every served count
matched. The last lines count the results checked, the largest margin, and the results that
failed the checks (``figures disagree``) with their reasons.
"""

from __future__ import annotations

import argparse
import sys

from parabench.case.audit import CORES_ABS, CORES_REL, MIN_SPAN_S, audit
from parabench.case.result import Result, read_results


def row(r: Result) -> tuple[str, float | None]:
    """The line for ``r`` and its cores margin (None: not compared)."""
    ev = r.evidence
    assert ev is not None
    label = f"{r.workload}/{r.method} {r.workers}x{r.threads_per_worker}"
    span = ev.windows_span[1] - ev.windows_span[0] if ev.windows_span else None
    skip = r.window.warmup if r.window else 0
    share = sum(r.window_s[skip:]) / span if span else None
    margin = None
    inside, outside = r.window_cores, ev.outside_cores
    if inside is not None and outside is not None and span and span >= MIN_SPAN_S:
        margin = abs(inside - outside) / (CORES_ABS + CORES_REL * max(inside, outside))
    served = [n for n in ev.window_served if n is not None]
    counts = ("served ok" if served and served == r.window_samples else
              "no served count" if not served else "served differs")
    text = (f"{label:40} cores {_f(inside)} / outside {_f(outside)}  margin {_f(margin)}  "
            f"span {_f(span, 1)} s  windows {_f(share, 0, pct=True)} of it  {counts}")
    return text, margin


def _f(value: float | None, digits: int = 2, pct: bool = False) -> str:
    if value is None:
        return "-"
    return f"{value:.0%}" if pct else f"{value:.{digits}f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="+")
    args = parser.parse_args(argv)
    results = [r for f in args.files for r in read_results(f)]
    margins, failed = [], []
    for r in results:
        if r.status == "failed" and r.reason.startswith("figures disagree"):
            failed.append(f"{r.workload}/{r.method} {r.workers}x{r.threads_per_worker}: {r.reason}")
        if r.status != "ok" or r.evidence is None:
            continue
        text, margin = row(r)
        print(text)
        if margin is not None:
            margins.append(margin)
        if problems := audit(r):  # recorded before a check existed, say
            failed.append(f"{r.workload}/{r.method}: would fail now: {'; '.join(problems)}")
    checked = sum(1 for r in results if r.status == "ok" and r.evidence is not None)
    print(f"{checked} ok results with evidence; cores compared on {len(margins)}, largest "
          f"margin {_f(max(margins) if margins else None)} (1.0 fails)")
    print(f"{len(failed)} failed the checks at the file")
    for line in failed:
        print(f"  {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
