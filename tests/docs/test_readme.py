"""The README's commands are the ones CI runs and the CLI accepts."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.cpu
ROOT = Path(__file__).resolve().parents[2]


def test_ci_runs_the_readme_test_block() -> None:
    readme = (ROOT / "README.md").read_text()
    block = re.search(r"<!-- ci:test.*?-->\n```bash\n(.*?)```\n<!-- /ci:test -->", readme, re.S)
    assert block, "README lost its ci:test block"
    assert "pytest" in block.group(1) and 'pip install -e ".[all]"' in block.group(1)
    extracted = subprocess.run(
        ["bash", "-c", "sed -n '/<!-- ci:test/,/<!-- \\/ci:test -->/p' README.md"
                       " | grep -v -e '^```' -e '^<!--'"],
        cwd=ROOT, capture_output=True, text=True, check=True,
    ).stdout
    assert extracted == block.group(1)
    assert "sed -n '/<!-- ci:test/" in (ROOT / ".ci" / "run").read_text()


def test_readme_run_options_exist_in_the_cli() -> None:
    """The README's `parabench run` commands, and those of docs/ where its guide moved."""
    from parabench.cli import build_parser

    run_help = build_parser()._subparsers._group_actions[0].choices["run"].format_help()
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = page.read_text().replace("\\\n", " ")  # a command split over lines
        for option in set(re.findall(r"parabench run[^\n]*", text)):
            for flag in re.findall(r"--[a-z-]+", option):
                assert flag in run_help, f"{page.name} uses {flag}, which `parabench run` lacks"
