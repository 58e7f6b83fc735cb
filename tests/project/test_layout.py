"""The shape of the source tree that docs/architecture.md promises, checked on every run.

No module-level import cycle, every import (module level and inside functions) going down the
layer order (:data:`LAYERS`) or sideways within a layer, files small enough to read in one
sitting, method files that are declarations, and one clock: only ``parabench.core.clock``
reads a timer, also through a helper.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "parabench"
MAX_LINES = 400
MAX_METHOD_LINES = 90  # declarations; a long docstring or option mapping may pass 60

#: The layers, top first: a module may import from its own layer and the layers below it.
#: A module belongs to the layer of the longest prefix naming it (``parabench.cli`` is a
#: front end, the other top-level modules are bottom). docs/architecture.md ("Layers") says
#: the same in words.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    # front ends: the CLI, and torchrun's entry point, which parses like `parabench run`
    ("front ends", ("parabench.cli", "parabench.__main__")),
    ("sweep", ("parabench.sweep",)),  # plan, run, report, site, tensorboard, bench, ...
    ("analysis", ("parabench.analysis",)),  # the one reader of results
    ("case", ("parabench.case",)),  # lifecycle, execute, result, isolate, measure, ...
    ("methods", ("parabench.methods",)),  # declarations
    ("engines", ("parabench.torch", "parabench.forest", "parabench.tf", "parabench.engines")),
    # core: the process and clock machinery (clock, pool, rank, launcher, tempdirs) and the
    # typed sub-records of a Result (records), plain data that sessions fill; and the
    # declarations everything names: config, stopping, identity, method, workload(s), registry
    ("bottom", ("parabench", "parabench.core", "parabench.workloads")),
]


def layer_of(module: str) -> int:
    """The index in :data:`LAYERS` of ``module``'s layer (its longest matching prefix)."""
    best, index = "", -1
    for i, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > len(best):
                best, index = prefix, i
    assert index >= 0, f"{module} is in no layer"
    return index


def _modules() -> dict[str, Path]:
    out = {}
    for path in SRC.rglob("*.py"):
        parts = path.relative_to(SRC.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


def _type_checking(node: ast.AST) -> bool:
    test = getattr(node, "test", None)
    return isinstance(node, ast.If) and (
        (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING")
        or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"))


def _imports(tree: ast.Module, modules: dict[str, Path], everywhere: bool
             ) -> list[tuple[str, int]]:
    """(imported parabench module, line) for the module's imports: its top-level statements
    only, or (``everywhere``) every import in it, inside functions too; TYPE_CHECKING blocks
    are left out either way (they do not run)."""
    out: list[tuple[str, int]] = []
    stack: list[ast.AST] = list(tree.body)
    while stack:
        node = stack.pop()
        if _type_checking(node):
            stack.extend(getattr(node, "orelse", []))
            continue
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (
                node.module or "").startswith("parabench"):
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                out.append((sub if sub in modules else node.module, node.lineno))
        elif isinstance(node, ast.Import):
            out += [(a.name, node.lineno) for a in node.names if a.name.startswith("parabench")]
        elif everywhere:
            stack.extend(ast.iter_child_nodes(node))
    return [(m, line) for m, line in out if m in modules]


def import_graph(modules: dict[str, Path], everywhere: bool = False) -> dict[str, set[str]]:
    """Module -> the parabench modules it imports at module level (``everywhere``: also
    inside functions); TYPE_CHECKING left out."""
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        deps = {m for m, _ in _imports(ast.parse(path.read_text()), modules, everywhere)}
        graph[name] = deps - {name}
    return graph


def upward_imports(modules: dict[str, Path], root: Path = SRC) -> list[str]:
    """Every import, at module level or inside a function, that goes up the layer order."""
    found = []
    for name, path in sorted(modules.items()):
        for dep, line in _imports(ast.parse(path.read_text()), modules, everywhere=True):
            if layer_of(dep) < layer_of(name):
                found.append(f"{path.relative_to(root)}:{line} ({LAYERS[layer_of(name)][0]}) "
                             f"imports {dep} ({LAYERS[layer_of(dep)][0]})")
    return found


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


def test_no_import_cycle_even_counting_imports_inside_functions() -> None:
    """A late import is still a dependency: no circle at module level, nor with them."""
    modules = _modules()
    assert len(modules) > 50, "the tree was not found"
    assert find_cycle(import_graph(modules)) is None
    assert find_cycle(import_graph(modules, everywhere=True)) is None


def test_the_layer_check_finds_a_planted_upward_import_inside_a_function(tmp_path: Path) -> None:
    pkg = tmp_path / "parabench"
    files = {"case/execute.py": ("import os\n\n\ndef f():\n"
                                 "    from parabench.sweep.run import run_grid\n"),
             "sweep/run.py": "from parabench.case.execute import execute\n",
             "core/clock.py": "", "torch/loop.py": ("from typing import TYPE_CHECKING\n"
                                                    "if TYPE_CHECKING:\n"
                                                    "    from parabench.case.result import R\n")}
    for rel, text in files.items():
        (pkg / rel).parent.mkdir(parents=True, exist_ok=True)
        (pkg / rel).write_text(text)
    modules = {"parabench." + rel[:-3].replace("/", "."): pkg / rel for rel in files}
    assert upward_imports(modules, root=pkg) == [
        "case/execute.py:5 (case) imports parabench.sweep.run (sweep)"]  # TYPE_CHECKING: exempt
    assert import_graph(modules)["parabench.case.execute"] == set()  # module level only
    assert import_graph(modules, everywhere=True)["parabench.case.execute"] == {
        "parabench.sweep.run"}


def test_the_layers_are_those_the_docs_name() -> None:
    assert [layer_of(m) for m in ("parabench.cli", "parabench.cli.torchrun",
                                  "parabench.sweep.site.plots", "parabench.analysis.parity",
                                  "parabench.case.lifecycle", "parabench.methods.ddp",
                                  "parabench.torch.loop", "parabench.core.clock",
                                  "parabench.workloads.mlp")] == [0, 0, 1, 2, 3, 4, 5, 6, 6]


def test_every_import_goes_down_the_layers_or_sideways() -> None:
    """Also imports inside functions: a lazy import is still a dependency."""
    modules = _modules()
    assert not (found := upward_imports(modules)), "\n".join(found)
    assert all(layer_of(m) >= 0 for m in modules)


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
    assert readers in ([], ["core/clock.py"]), readers


# --- one clock, also through helpers ---------------------------------------------------------

#: the timers a figure is read from. Deadlines and time stamps (``time.monotonic`` for a
#: timeout, ``time.time`` for an event's wall time, ``datetime``) are not figures: not checked.
TIMERS = {"perf_counter", "perf_counter_ns", "process_time", "process_time_ns", "thread_time",
          "thread_time_ns"}
CLOCK = "parabench.core.clock"


def _bound_modules(tree: ast.Module) -> dict[str, str]:
    """Local name -> the module it is bound to (``import time``, ``from parabench.case import
    clock``, ``import parabench.core.clock as c``)."""
    out = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                out[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(
                    ".")[0]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            for a in node.names:
                out.setdefault(a.asname or a.name, f"{node.module}.{a.name}")
    return out


def _timer_names(tree: ast.Module, helpers: set[tuple[str, str]]) -> set[str]:
    """Local names that are a timer here: imported timers of ``time`` and imported helpers."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            for a in node.names:
                if (node.module == "time" and a.name in TIMERS) or (node.module, a.name) in helpers:
                    names.add(a.asname or a.name)
    return names


def _reads(node: ast.AST, timers: set[str], bound: dict[str, str],
           helpers: set[tuple[str, str]]) -> bool:
    """Whether ``node`` (a function, or a whole module) reads a timer, called or aliased."""
    for n in ast.walk(node):
        if isinstance(n, ast.Name) and n.id in timers:
            return True
        if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name):
            module = bound.get(n.value.id)
            if (module == "time" and n.attr in TIMERS) or (module, n.attr) in helpers:
                return True
        if isinstance(n, ast.ImportFrom) and n.module == "time" and any(
                a.name in TIMERS for a in n.names):
            return True
    return False


def timer_readers(modules: dict[str, Path]) -> list[str]:
    """Modules that read a timer: directly, or through a helper (a top-level function or
    alias of any parabench module that reads one, found to a fixed point: a helper of a helper
    counts). :data:`CLOCK`'s ``now`` is such a helper; its classes (Clock, Spans, Stopwatch)
    are not, they are how the others time."""
    trees = {name: ast.parse(path.read_text()) for name, path in modules.items()}
    bound = {name: _bound_modules(tree) for name, tree in trees.items()}
    helpers: set[tuple[str, str]] = set()
    while True:
        found = set(helpers)
        for name, tree in trees.items():
            timers = _timer_names(tree, helpers)
            for node in tree.body:
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    targets = [node.name]
                elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                    sides = node.targets if isinstance(node, ast.Assign) else [node.target]
                    targets = [t.id for t in sides if isinstance(t, ast.Name)]
                else:
                    continue
                if _reads(node, timers, bound[name], helpers):
                    found |= {(name, t) for t in targets}
        if found == helpers:
            break
        helpers = found
    return sorted(name for name, tree in trees.items()
                  if _reads(tree, _timer_names(tree, helpers), bound[name], helpers))


def test_the_timer_check_finds_planted_reads_through_helpers(tmp_path: Path) -> None:
    files = {
        "core/clock.py": "import time\n\n\ndef now():\n    return time.perf_counter()\n",
        "case/ok.py": "from parabench.core.clock import Stopwatch\n\nw = Stopwatch()\n",
        "forest/session.py": "from parabench.core.clock import now\n\n\ndef f():\n    t0 = now()\n",
        "forest/helper.py": ("from time import perf_counter as pc\n\n\ndef tick():\n"
                             "    return pc\n"),
        "forest/user.py": "from parabench.forest import helper\n\nx = helper.tick()\n",
        "torch/alias.py": "import time\n\nlater = time.process_time\n",
        "torch/deadline.py": "import time\n\nend = time.monotonic() + 5\n",
    }
    modules = {}
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
        modules["parabench." + rel[:-3].replace("/", ".")] = tmp_path / rel
    assert timer_readers(modules) == [
        "parabench.core.clock", "parabench.forest.helper", "parabench.forest.session",
        "parabench.forest.user", "parabench.torch.alias"]


def test_only_the_clock_reads_a_timer_also_through_a_helper() -> None:
    """Everything else times through the clock's objects: Clock, Spans, Stopwatch."""
    assert timer_readers(_modules()) == [CLOCK]
