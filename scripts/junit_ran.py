"""Fail when a JUnit XML report ran no test: the GPU workflow's guard against a silent pass.

Usage::

    pytest -m "cuda or multigpu" --benchmark-disable --junitxml=gpu-tests.xml
    python scripts/junit_ran.py gpu-tests.xml        # exit 1 if every test was skipped

On a runner without a GPU (or with a broken driver) every ``cuda``/``multigpu`` test skips
and pytest exits 0; the correctness tests would then protect nothing while CI stays green.
This counts the test cases that ran (neither skipped nor deselected) and exits 1 when there is
none, printing the skip reasons so the runner's problem is visible.
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from collections import Counter


def count(path: str) -> tuple[int, Counter[str]]:
    """(test cases that ran, skip reasons with their counts) of one JUnit XML file."""
    ran, skipped = 0, Counter()
    for case in ET.parse(path).getroot().iter("testcase"):
        skip = case.find("skipped")
        if skip is None:
            ran += 1
        else:
            skipped[skip.get("message", "skipped")] += 1
    return ran, skipped


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python scripts/junit_ran.py REPORT.xml", file=sys.stderr)
        return 2
    ran, skipped = count(argv[0])
    print(f"{argv[0]}: {ran} test(s) ran, {sum(skipped.values())} skipped")
    if ran == 0:
        for reason, n in skipped.most_common(5):
            print(f"  {n} x {reason}")
        print("no test ran: is the GPU visible to this runner (nvidia-smi, torch.cuda)?")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
