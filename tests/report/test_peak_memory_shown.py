"""Peak memory shown everywhere through one helper: PSS when recorded, else RSS marked ``rss``.

Run: ``pytest tests/report/test_peak_memory_shown.py`` (crafted results: a second).
"""

from __future__ import annotations

import dataclasses

from parabench.analysis.figures import peak_memory
from parabench.analysis.recommend import describe, recommend
from parabench.sweep.table import format_table, summarize
from parabench.sweep.tensorboard import scalars
from sweepdata import case


def test_table_recommend_and_tensorboard_show_pss_and_mark_rss() -> None:
    serial = dataclasses.replace(case("mlp", "serial", 1), peak_rss_mb=900.0, peak_pss_mb=500.0)
    ddp = case("mlp", "ddp", 2)  # RSS only (an older result): 1100 MB
    assert peak_memory([serial]) == (500.0, False)
    assert peak_memory([ddp]) == (1100.0, True)
    table = format_table(summarize([serial, ddp]), wide=True)  # columns as in the header
    assert "peak MB (PSS)" in table.splitlines()[0]
    lines = {ln.split()[1]: ln for ln in table.splitlines()[2:4]}
    assert " 500 " in lines["serial"] and "900" not in lines["serial"]
    assert "1,100 rss" in lines["ddp"]
    assert "rss: RSS sum" in table
    text = "\n".join(line for rec in recommend([serial]) for line in describe(rec))
    assert "500 MB RAM (PSS)" in text
    tags = {tag: v for tag, _step, v in scalars(serial)}
    assert tags["peak_mb"] == 500.0 and tags["peak_rss_mb"] == 900.0
