"""A workload's version: a short fingerprint of what defines its model and data.

Usage::

    workload_version(workloads.get("mlp"))         # 'a1b2c3d4e5f6', the same in every process
    workload_version(workloads.get("mlp"), libs={"sklearn": "1.9.1"})  # as with that library
    defining_modules(type(workloads.get("mlp")))   # {'parabench.workloads.mlp': Path, ...}
    versions_differ(["a1b2c3d4e5f6"], ["0f9e8d7c6b5a"])   # True: both sides known, unequal

Every result records it (``Result.workload_version``); ``parabench compare`` does not compare
a case whose two sides ran different versions, ``--resume`` runs such a case again, and the
sweep's data cache (:mod:`parabench.workloads.datacache`) keys its entries by it, so the one
rule of what a workload *is* lives here.

What it covers: the bytes of the modules that define the workload, found without running it:
the modules of its classes (the base classes' too: :mod:`parabench.workload` holds the loss,
the optimizer and the evaluation), then, transitively, every module those import (at module
level or inside a function) from :mod:`parabench.workloads` or the workload's own top-level
package (a plugin's); and the version of each other library they import, torch and numpy
aside. So mlp's version is ``mlp.py``, ``tabular.py``, ``workload.py`` and scikit-learn's
version; densenet121's includes ``synthetic.py``, ``images.py`` and torchvision's version;
gpt2's ``gpt.py`` and ``models/gpt.py``. The hidden width 64 -> 256 (an edit of ``mlp.py``)
is a new version; so is any edit of those files' code (the data cache must never read data
an edited generator would not make), while comments, docstrings and layout are left out (the
files are hashed as parsed), so a commit that only documents a workload still compares.

What it leaves out, and why: the rest of parabench (the CLI, the case lifecycle, the methods
and their engines: *how* a workload is trained and timed), which is exactly what a
regression gate between two commits (``compare --rerun``) exists to measure, so an edit there
must still compare; the other workloads' modules, so an edit of gpt2 leaves mlp comparable;
file paths (the two sides of a rerun are two checkouts in two folders); torch's and numpy's
versions, the runtime rather than the definition (``Result.env`` records them, and compare
already refuses a speed verdict across torch versions). A result written before versions
were recorded has None: unknown, compared as before.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import importlib.util
import json
import sys
from collections.abc import Iterable, Iterator
from importlib.metadata import PackageNotFoundError, packages_distributions, version
from pathlib import Path
from typing import TYPE_CHECKING

from parabench.cache import cached_json

if TYPE_CHECKING:
    from parabench.workload import Workload

#: hex digits of a version
LENGTH = 12
#: packages of parabench whose imports are followed: the workloads, their base classes and
#: the data container they fill
FOLLOWED = ("parabench.workloads", "parabench.workload", "parabench.dataset")
#: modules of the workloads package that define no workload: the data cache keeps data
#: between cases (how it is kept, not what it is), and this module
MACHINERY = frozenset({"parabench.workloads.datacache", "parabench.workloads.version"})
#: libraries whose version is not part of a workload's: the runtime the model runs on
RUNTIME = frozenset({"torch", "numpy"})
#: import names whose distribution is named otherwise (others: looked up, slowly, once)
DISTRIBUTIONS = {"sklearn": "scikit-learn"}


def workload_version(workload: Workload | type,
                     libs: dict[str, str | None] | None = None) -> str:
    """The workload's version: :data:`LENGTH` hex digits of the sha256 of its name, its
    defining modules' names and parsed code, and the versions of the libraries they import
    (``libs``: those instead of the installed ones, to ask whether the *code* is what a
    recorded version was made of, as :func:`workload_libraries` recorded them)."""
    cls = workload if isinstance(workload, type) else type(workload)
    modules = defining_modules(cls)
    h = hashlib.sha256(json.dumps([getattr(cls, "name", ""), cls.__qualname__,
                                   libraries(modules) if libs is None else libs]).encode())
    for name, path in sorted(modules.items()):
        h.update(name.encode())
        stat = path.stat()
        h.update(_code_digest(path, stat.st_mtime_ns, stat.st_size).encode())
    return h.hexdigest()[:LENGTH]


@functools.lru_cache(maxsize=256)
def _code_digest(path: Path, mtime_ns: int, size: int) -> str:
    """The sha256 of ``path``'s code as parsed (``ast.dump``: no comments, no docstrings, no
    line numbers), so a comment or docstring edit is not a new version while any edit that
    changes what runs is; kept like :func:`_parsed_imports`."""
    return cached_json("code", {}, lambda: {"sha256": _code_sha(path)},
                       sources=[path])["sha256"]


def _code_sha(path: Path) -> str:
    tree = ast.parse(path.read_bytes(), filename=str(path))
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
                and body and isinstance(body[0], ast.Expr)
                and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)):
            node.body = body[1:] or [ast.Pass()]
    return hashlib.sha256(ast.dump(tree).encode()).hexdigest()


def versions_differ(base: Iterable[str | None], new: Iterable[str | None]) -> bool:
    """Whether two sides' results (of one case) ran different versions of their workload:
    each side knows some and the known ones differ. A result without a version (written
    before versions were recorded) is unknown, taken to be the same."""
    known_base, known_new = set(base) - {None}, set(new) - {None}
    return bool(known_base and known_new and known_base != known_new)


def defining_modules(cls: type) -> dict[str, Path]:
    """Module name -> source file of every module that defines ``cls`` (module docstring)."""
    homes = [k.__module__ for k in cls.__mro__ if not _stdlib(k.__module__)]
    # parabench's own imports are followed into the workloads only; a plugin's, in its package
    prefixes = (*FOLLOWED, *sorted({h.split(".")[0] for h in homes} - {"parabench"}))
    found: dict[str, Path] = {}
    todo = list(homes)
    while todo:
        name = todo.pop()
        if name in found or name in MACHINERY or (path := _source(name)) is None:
            continue
        found[name] = path
        todo.extend(m for m in _imports(path, name)
                    if any(m == p or m.startswith(p + ".") for p in prefixes))
    return found


def workload_libraries(workload: Workload | type) -> dict[str, str | None]:
    """The library versions :func:`workload_version` hashes for ``workload`` now."""
    return libraries(defining_modules(workload if isinstance(workload, type)
                                      else type(workload)))


def libraries(modules: dict[str, Path]) -> dict[str, str | None]:
    """Import name -> installed version (None: not installed) of each library ``modules``
    import, the standard library, their own packages and :data:`RUNTIME` aside."""
    tops = {name.split(".")[0] for name in modules}
    names = {m.split(".")[0] for name, path in modules.items() for m in _imports(path, name)}
    return {n: _library_version(n) for n in sorted(names - tops - RUNTIME)
            if not _stdlib(n) and n not in ("parabench", "")}


def _stdlib(module: str) -> bool:
    return module.split(".")[0] in sys.stdlib_module_names


def _source(module: str) -> Path | None:
    """The ``.py`` file of ``module``, found without importing anything (a parent package's
    import may be slow: torchvision); None when it has none (compiled, unknown, an attribute)."""
    loaded = getattr(sys.modules.get(module), "__file__", None)
    if loaded is not None:
        return Path(loaded) if loaded.endswith(".py") else None
    top, *rest = module.split(".")
    try:
        spec = importlib.util.find_spec(top)  # a top-level name: imports nothing
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        return None
    path = Path(spec.origin)
    for part in rest:
        if path.name != "__init__.py":
            return None  # below a plain module: an attribute, not a module
        package = path.parent / part
        path = package / "__init__.py" if package.is_dir() else package.with_suffix(".py")
    return path if path.is_file() else None


@functools.lru_cache(maxsize=256)
def _parsed_imports(path: Path, mtime_ns: int, size: int, package: str) -> tuple[str, ...]:
    """The absolute names of the modules ``path`` imports (anywhere in it; ``from X import
    y`` names X and X.y, one of which is a module), relative imports resolved in ``package``.
    Keyed by the file's mtime and size here, by its bytes in :mod:`parabench.cache`: parsing
    the files of a workload costs a fresh case ~10 ms each, inside its timed start-up."""
    return tuple(cached_json("imports", {"package": package},
                             lambda: _scan(path, package), sources=[path]))


def _scan(path: Path, package: str) -> list[str]:
    tree = ast.parse(path.read_bytes(), filename=str(path))
    out: list[str] = []
    for node in _statements(tree.body):
        if isinstance(node, ast.Import):
            out.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parent = ".".join(parts[:len(parts) - node.level + 1])
                base = f"{parent}.{base}" if base else parent
            out.append(base)
            out.extend(f"{base}.{alias.name}" for alias in node.names if alias.name != "*")
    return out


def _statements(nodes: Iterable[ast.AST]) -> Iterator[ast.AST]:
    """Every statement in ``nodes``, nested ones too (an import is a statement: walking only
    statements, not every expression, takes a fraction of ``ast.walk``'s time)."""
    for node in nodes:
        yield node
        for field in ("body", "orelse", "finalbody", "handlers", "cases"):
            children = getattr(node, field, None)
            if isinstance(children, list):
                yield from _statements(children)


def _imports(path: Path, module: str) -> tuple[str, ...]:
    stat = path.stat()
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    return _parsed_imports(path, stat.st_mtime_ns, stat.st_size, package)


@functools.cache
def _library_version(name: str) -> str | None:
    """The installed version of the library imported as ``name`` (metadata only, never an
    import, so every process finds the same whatever it has imported)."""
    found = _installed(DISTRIBUTIONS.get(name, name))
    if found is None and _importable(name):  # installed under another distribution's name
        for dist in _distributions().get(name, []):
            found = found or _installed(dist)
    return found


def _importable(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None  # a top-level name: imports nothing
    except (ImportError, ValueError):
        return False


def _installed(dist: str) -> str | None:
    try:
        return version(dist)
    except (PackageNotFoundError, ValueError):
        return None


@functools.cache
def _distributions() -> dict[str, list[str]]:
    """Import name -> distributions (scans every installed one: ~0.5 s, only for an installed
    library whose distribution is neither its import name nor in :data:`DISTRIBUTIONS`)."""
    return dict(packages_distributions())
