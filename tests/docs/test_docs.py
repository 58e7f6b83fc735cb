"""The docs stay true: a short README, and no dated measurement in a module docstring.

Dated measurements (a time taken on this machine, under some load, on some day) belong in
docs/measurements.md with their command, date and load; a docstring that quotes one goes
stale the day the code changes. Design constants ("windows of about 0.5 s") are not dated.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.cpu
ROOT = Path(__file__).resolve().parents[2]
README_MAX_LINES = 150
#: a README code block's lines (commands, the main job's output) fit a terminal this wide
README_CODE_WIDTH = 120

_TIME = r"\d+(?:\.\d+)?\s?(?:ms|s|min|minutes|seconds)\b"
DATED = re.compile(
    r"\b20\d\d-\d\d-\d\d\b"                                   # a date
    r"|\bload (?:of )?\d"                                     # a load figure
    r"|\btook (?:about |~)?\d"                                # "took 11 s"
    r"|\bmeasured (?:here )?at \d"                            # "measured here at 8 ms"
    rf"|{_TIME}[^.;]{{0,40}}\b(?:alone|here|on (?:this|\d+)[- ]cores?|this machine)\b"
    rf"|\b(?:alone|here)\b[^.;]{{0,12}}{_TIME}"               # "(2.3 s here)", "here: 7 s"
)


def dated_figures(text: str) -> list[str]:
    """The dated measurements quoted in ``text`` (a docstring), one line each."""
    flat = " ".join(text.split())
    return [m.group(0) for m in DATED.finditer(flat)]


def module_docstrings() -> dict[str, str]:
    found = {}
    for path in sorted((ROOT / "src").rglob("*.py")):
        doc = ast.get_docstring(ast.parse(path.read_text()))
        if doc:
            found[str(path.relative_to(ROOT))] = doc
    return found


def test_readme_is_a_front_door_of_at_most_150_lines() -> None:
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, (
        f"README.md has {len(lines)} lines (at most {README_MAX_LINES}): move detail to docs/")


def test_no_readme_code_block_line_is_wider_than_120_columns() -> None:
    """Commands (split with a backslash) and the main job's output, as a terminal shows them."""
    wide, inside = [], False
    for n, line in enumerate((ROOT / "README.md").read_text().splitlines(), 1):
        if line.startswith("```"):
            inside = not inside
        elif inside and len(line) > README_CODE_WIDTH:
            wide.append(f"README.md:{n}: {len(line)} columns")
    assert not wide, wide


def test_no_module_docstring_quotes_a_dated_measurement() -> None:
    offenders = {path: hits for path, doc in module_docstrings().items()
                 if (hits := dated_figures(doc))}
    assert not offenders, ("dated figures in module docstrings (move them to "
                           f"docs/measurements.md with command, date and load): {offenders}")


@pytest.mark.parametrize("planted", [
    "the default run took 7 min 29 s",
    "3 min 19 s alone on this machine",
    "seeded tabular data (2.3 s here)",
    "at full width one epoch took 11 s on 2 cores",
    "measured 3.6 s for the classifier at load 2.5",
    "recorded by 2026-11-23",
    "measured here at 8 ms of CPU",
    "about 9 minutes\non 2 cores",
])
def test_a_planted_dated_figure_is_caught(planted: str) -> None:
    assert dated_figures(f'"""Usage::\n\n    f()\n\n{planted}, as it happens."""')


@pytest.mark.parametrize("constant", [
    "a window takes about 0.5 s",
    "samples every 50 ms in a daemon thread",
    "windows stop early, after 3, once they have taken 10 s",
])
def test_a_design_constant_is_not_a_dated_figure(constant: str) -> None:
    assert not dated_figures(constant)


def test_every_docs_page_is_linked_from_the_readme() -> None:
    readme = (ROOT / "README.md").read_text()
    for page in sorted((ROOT / "docs").glob("*.md")):
        assert f"docs/{page.name}" in readme, f"README does not lead to docs/{page.name}"


def test_every_module_docstring_starts_with_usage() -> None:
    """A Usage block right after the summary (within its first lines), so a reader sees how
    to use the module before how it works."""
    late = []
    for path, doc in module_docstrings().items():
        lines = doc.splitlines()
        at = next((i for i, line in enumerate(lines) if line.startswith("Usage")), None)
        if at is None or at > 5:
            late.append(path)
    assert not late, f"module docstrings without a Usage block near the top: {late}"


def _slug(heading: str) -> str:
    """GitHub's anchor for a Markdown heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def test_links_between_docs_resolve() -> None:
    """Every relative link of README.md and docs/ names a file that exists, and a heading in it."""
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    broken = []
    for page in pages:
        for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text()):
            if target.startswith(("http://", "https://")):
                continue
            path, _, anchor = target.partition("#")
            linked = (page.parent / path).resolve() if path else page
            if not linked.exists():
                broken.append(f"{page.name}: {target}")
            elif anchor and linked.suffix == ".md":
                headings = re.findall(r"^#+ (.*)$", linked.read_text(), re.M)
                if anchor not in {_slug(h) for h in headings}:
                    broken.append(f"{page.name}: {target} (no such heading)")
    assert not broken, broken
