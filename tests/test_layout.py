"""The shape of the source tree that docs/architecture.md promises, checked on every run.

No module-level import cycle, files small enough to read in one sitting, method files that are
declarations, and one clock: only ``parabench.case.clock`` reads ``time.perf_counter``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "parabench"
MAX_LINES = 400
MAX_METHOD_LINES = 90  # declarations; a long docstring or option mapping may pass 60


def _modules() -> dict[str, Path]:
    out = {}
    for path in SRC.rglob("*.py"):
        parts = path.relative_to(SRC.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


def import_graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    """Module -> the parabench modules it imports at module level (TYPE_CHECKING left out)."""
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        deps: set[str] = set()
        for node in ast.parse(path.read_text()).body:  # top level only: lazy imports are fine
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("parabench"):
                for alias in node.names:
                    sub = f"{node.module}.{alias.name}"
                    deps.add(sub if sub in modules else node.module)
            elif isinstance(node, ast.Import):
                deps |= {a.name for a in node.names if a.name.startswith("parabench")}
        graph[name] = {d for d in deps if d in modules and d != name}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as a path (first == last), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(node: str, path: list[str]) -> list[str] | None:
        state[node] = 1
        for dep in sorted(graph[node]):
            if state.get(dep) == 1:
                return path[path.index(dep):] + [dep] if dep in path else [node, dep, node]
            if dep not in state and (found := visit(dep, [*path, dep])):
                return found
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (found := visit(start, [start])):
            return found
    return None


def test_the_cycle_finder_finds_a_planted_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}
    assert find_cycle(graph) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_no_module_level_import_cycle() -> None:
    modules = _modules()
    assert len(modules) > 50, "the tree was not found"
    assert find_cycle(import_graph(modules)) is None


def test_no_source_file_is_longer_than_one_sitting() -> None:
    long = {str(p.relative_to(SRC)): n for p in SRC.rglob("*.py")
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, f"files over {MAX_LINES} lines: {long}"


def test_method_files_are_declarations() -> None:
    long = {p.name: n for p in (SRC / "methods").glob("*.py")
            if (n := len(p.read_text().splitlines())) > MAX_METHOD_LINES}
    assert not long, f"method files over {MAX_METHOD_LINES} lines: {long}"


@pytest.mark.parametrize("timer", ["perf_counter", "process_time"])
def test_only_the_case_clock_reads_a_timer(timer: str) -> None:
    readers = sorted(str(p.relative_to(SRC)) for p in SRC.rglob("*.py")
                     if f"time.{timer}(" in p.read_text() or f"{timer}()" in p.read_text())
    assert readers in ([], ["case/clock.py"]), readers
