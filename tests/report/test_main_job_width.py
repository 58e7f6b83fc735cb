"""The README's main job prints within 120 columns, in every table mode, answer included.

``data/main_job_tiny.jsonl`` holds the results of a real run of the README's main job
(``parabench run --workload cnn --method serial,ddp,pipeline,fsdp,fedavg --workers 1,2
--profile tiny --target-quality``, on a loaded 2-core CPU: the figures are not a record, the
shape is what is tested). The renderer is fed them as they are (to target) and without their
time to target (the fixed-epochs table); one real CLI run of two methods checks the whole
output, answer included. ``--wide`` and the report may be wider, and show the pipeline bubble.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest

from parabench.analysis.recommend import describe, recommend
from parabench.case.result import read_results
from parabench.sweep.table import BUBBLE, TABLE_WIDTH, format_table, summarize, wrap_lines

pytestmark = pytest.mark.cpu
MAIN_JOB = Path(__file__).parents[1] / "data" / "main_job_tiny.jsonl"


def _too_wide(text: str | list[str]) -> list[str]:
    lines = text.splitlines() if isinstance(text, str) else text
    return [f"{len(ln)}: {ln}" for ln in lines if len(ln) > TABLE_WIDTH]


@pytest.fixture(scope="module")
def to_target() -> list:
    results = list(read_results(MAIN_JOB))
    assert len(results) == 10 and all(r.time_to_target for r in results)
    return results


@pytest.fixture(scope="module")
def fixed_epochs(to_target: list) -> list:
    return [dataclasses.replace(r, time_to_target=None) for r in to_target]


@pytest.mark.parametrize("mode", ["to_target", "fixed_epochs"])
def test_the_compact_table_and_the_answer_fit_120_columns(mode: str,
                                                          request: pytest.FixtureRequest) -> None:
    results = request.getfixturevalue(mode)
    rows = summarize(results)
    assert (mode == "to_target") == any("to target" in r.extra for r in rows)
    compact = format_table(rows)
    assert not _too_wide(compact)
    assert compact.splitlines()[0] == "cnn · cpu · profile tiny · batch 64 · 1 repeat"
    assert "--wide shows every column" in compact and BUBBLE not in compact.splitlines()[1]
    [rec] = recommend(results)
    answer = describe(rec)
    assert _too_wide(answer), "the unwrapped answer is wider than 120: nothing tested"
    assert not _too_wide(wrap_lines(answer))
    assert " ".join(" ".join(wrap_lines(answer)).split()) == " ".join(" ".join(answer).split())


def test_the_to_target_compact_cell_keeps_the_seconds_and_wide_the_samples(
        to_target: list) -> None:
    rows = summarize(to_target)
    compact, wide = format_table(rows), format_table(rows, wide=True)
    derived = next(r for r in rows if r.method == "ddp")
    assert derived.extra_short["to target"] in compact and "derived" in compact
    assert derived.extra["to target"] in wide and " samples derived, +" in wide
    assert "to target's samples and start-up" in compact.splitlines()[-2] + compact
    assert _too_wide(wide)  # --wide may exceed 120: it is every column


def test_wide_and_the_report_show_the_pipeline_bubble(to_target: list, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from parabench.sweep.site import write_report

    rows = summarize(to_target)
    pipes = [r for r in rows if r.method == "pipeline"]
    assert len(pipes) == 2 and all(r.extra[BUBBLE].endswith("%)") for r in pipes)
    two = next(r for r in pipes if r.workers == 2)
    assert "(ideal 20%)" in two.extra[BUBBLE]  # 2 stages, 4 micro-batches: 1/5
    assert all(BUBBLE not in r.extra for r in rows if r.method != "pipeline")
    wide = format_table(rows, wide=True)
    assert BUBBLE in wide.splitlines()[0] and two.extra[BUBBLE] in wide
    assert "bubble: a pipeline row's stages' mean idle share" in wide
    files = write_report(to_target, tmp_path / "report")
    for page in (files.html, files.markdown):
        text = page.read_text()
        assert BUBBLE in text and two.extra[BUBBLE] in text


@pytest.mark.slow
@pytest.mark.torch
def test_a_real_run_prints_within_120_columns_answer_included(tmp_path: Path) -> None:
    """The main job's shape through the CLI, smaller: two methods to mlp's measured target
    at tiny, with the report (whose answer the terminal prints wrapped)."""
    pytest.importorskip("torch")
    pytest.importorskip("matplotlib")
    out = tmp_path / "r.jsonl"
    proc = subprocess.run(
        [sys.executable, "-m", "parabench", "run", "--workload", "mlp", "--method",
         "serial,pipeline", "--workers", "2", "--profile", "tiny", "--target-quality",
         "--out", str(out), "--report", str(tmp_path / "report")],
        capture_output=True, text=True, timeout=900, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    assert "to target" in proc.stdout and "mlp on cpu (tiny): " in proc.stdout
    assert not _too_wide(proc.stdout), proc.stdout
    wide = format_table(summarize(read_results(out)), wide=True)
    assert BUBBLE in wide.splitlines()[0]
