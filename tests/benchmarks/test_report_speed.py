"""``parabench report`` on a 200-case results file: <= 10 s and a report under 5 MB.

Usage::

    pytest tests/benchmarks/test_report_speed.py --benchmark-only   # measures, checks 10 s

The timed unit is the whole command as a user runs it (a subprocess: interpreter start,
imports, reading the file, statistics, every plot, HTML and Markdown). Plain ``pytest`` runs
it once, untimed (smoke mode), and still checks the size, which does not depend on load.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from sweepdata import sweep, write

pytestmark = [pytest.mark.cpu, pytest.mark.slow]

TARGET_S = 10.0
MAX_BYTES = 5 * 2**20
WORKLOADS = ("cnn", "mlp", "nbow", "seq2seq")
METHODS = ("serial", "ddp", "fsdp", "pipeline", "fedavg")


def test_report_on_200_cases(benchmark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    pytest.importorskip("matplotlib")
    results = sweep(workloads=WORKLOADS, methods=METHODS, workers=(1, 2, 4), repeats=4)
    assert len(results) >= 200
    src = write(tmp_path / "r.jsonl", results)
    out = tmp_path / "report"

    def report() -> None:
        subprocess.run([sys.executable, "-m", "parabench", "report", str(src), "--out",
                        str(out)], check=True, capture_output=True, timeout=300)

    benchmark.pedantic(report, rounds=3, warmup_rounds=0, iterations=1)
    size = sum(p.stat().st_size for p in out.iterdir())
    html = (out / "report.html").stat().st_size
    benchmark.extra_info.update(cases=len(results), report_bytes=size, html_bytes=html)
    assert size < MAX_BYTES, f"the report folder is {size / 2**20:.1f} MB"
    if benchmark.disabled:
        return  # smoke mode: ran once, untimed
    median = benchmark.stats.stats.median
    assert median <= TARGET_S, f"parabench report took {median:.1f} s on {len(results)} cases"
