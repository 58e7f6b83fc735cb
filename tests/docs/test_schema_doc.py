"""docs/results-schema.md's field tables are what scripts/schema_doc.py makes of the dataclasses."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from script_module import load_script

pytestmark = pytest.mark.cpu
ROOT = Path(__file__).resolve().parents[2]


def _script():  # noqa: ANN202
    return load_script("schema_doc")


def test_results_schema_doc_matches_the_dataclasses() -> None:
    script = _script()
    doc = script.DOC.read_text()
    assert doc == script.render(doc, script.generate()), (
        "docs/results-schema.md is out of date: run python scripts/schema_doc.py")


def test_every_result_field_is_in_the_doc_with_a_meaning() -> None:
    from parabench.case.result import Result

    script = _script()
    generated = script.generate()
    for f in dataclasses.fields(Result):
        row = next(line for line in generated.splitlines() if line.startswith(f"| `{f.name}` |"))
        assert not row.endswith("|  |"), f"Result.{f.name} has no meaning: add a #: comment"


@dataclasses.dataclass(frozen=True, kw_only=True)
class Inner:
    #: how deep
    depth: int = 0


@dataclasses.dataclass(frozen=True, kw_only=True)
class Outer:
    #: the inner record
    inner: Inner | None = None
    items: list[Inner] = dataclasses.field(default_factory=list)


def test_nested_records_get_their_own_table() -> None:
    script = _script()

    tables = script.generate(Outer)
    assert "### `Outer`" in tables and "### `Inner`" in tables
    assert "| `depth` | `int` | `0` | how deep |" in tables
    assert "| `inner` | `Inner \\| None` | `None` | the inner record |" in tables


def test_a_stale_doc_is_reported(tmp_path, monkeypatch) -> None:
    script = _script()
    stale = tmp_path / "schema.md"
    stale.write_text(f"prose\n{script.BEGIN}\n| `gone` | old |\n{script.END}\n")
    monkeypatch.setattr(script, "DOC", stale)
    assert script.main(["--check"]) == 1
    assert script.main([]) == 0 and script.main(["--check"]) == 0
    assert stale.read_text().startswith("prose\n")
