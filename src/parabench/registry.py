"""Registries of workloads and methods, by name.

Usage::

    from parabench.registry import workloads, methods
    wl = workloads.get("mlp")          # UnknownNameError lists the valid names
    for name in methods.names(): ...

Built-in entries register when :mod:`parabench.workloads` / :mod:`parabench.methods` are
imported. Third-party packages add their own through entry points in the groups
``parabench.workloads`` and ``parabench.methods``; each entry point names a class (or a
zero-argument factory) whose instances have a ``name``. For local experiments, the modules
named in ``PARABENCH_PLUGINS`` (comma-separated) are imported too and register themselves.

This is the only place that looks anything up by method or workload name, and the one that
knows every option: :func:`option_specs` collects the options each registered method and
workload declares (``options``: name -> :class:`~parabench.config.OptionSpec`), and
:func:`declared_option` finds the declaration a case reads (its method's, else its workload's).
"""

from __future__ import annotations

import importlib
import os
import warnings
from collections.abc import Callable, Iterator, Mapping
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Generic, TypeVar

if TYPE_CHECKING:
    from parabench.config import OptionSpec
    from parabench.method import Method
    from parabench.workload import Workload

T = TypeVar("T")
#: comma-separated modules imported on first lookup: register without packaging a plugin
PLUGINS_ENV = "PARABENCH_PLUGINS"

#: retired method name -> its current name: the random-forest engines, namespaced so that none
#: reads as a training method (``--method torch`` grew a forest). Results recorded under the
#: old names are read under the new ones; the CLI refuses an old name, saying the new one
RENAMED_METHODS: dict[str, str] = {old: f"rf_{old}" for old in (
    "threads", "processes", "dask", "dask+threads", "mpi", "spark", "torch", "tf", "numba",
    "threads+torch", "torch+dask", "dask+threads+torch")}


def current_method(name: str) -> str:
    """The name a method recorded as ``name`` has now (``name`` itself unless renamed)."""
    return RENAMED_METHODS.get(name, name)


class UnknownNameError(KeyError):
    """A workload or method name that is not registered; the message lists the valid ones,
    or, for a renamed method, says its new name."""

    def __init__(self, kind: str, name: str, valid: list[str], renamed: str | None = None,
                 why: str = "") -> None:
        self.kind, self.name, self.valid = kind, name, valid
        if renamed is not None:  # one line: the new name and why
            message = f"{name!r} is now {renamed!r}" + (f" ({why})" if why else "")
        else:
            message = f"unknown {kind} {name!r}; valid: {', '.join(valid) or '(none)'}"
        super().__init__(message)

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0])


def import_submodules(package: str, path: list[str]) -> None:
    """Import every module of a package (used by the built-in workload/method packages)."""
    import pkgutil

    for info in sorted(pkgutil.iter_modules(path), key=lambda m: m.name):
        importlib.import_module(f"{package}.{info.name}")


class Registry(Generic[T]):
    """Name -> factory map, filled by built-in modules and by entry points on first use."""

    def __init__(self, kind: str, builtin_module: str, group: str,
                 renamed: Mapping[str, str] | None = None, renamed_why: str = "") -> None:
        self.kind = kind
        #: retired name -> current name: asking for a retired name says the current one (and
        #: ``renamed_why``)
        self.renamed, self._renamed_why = dict(renamed or {}), renamed_why
        self._builtin_module = builtin_module
        self._group = group
        self._factories: dict[str, Callable[[], T]] = {}
        self._instances: dict[str, T] = {}
        self._loaded = False

    def register(self, factory: Callable[[], T], name: str | None = None) -> Callable[[], T]:
        """Register a class or factory; usable as a class decorator."""
        key = name or getattr(factory, "name", None)
        if not isinstance(key, str) or not key:
            raise ValueError(f"{self.kind} {factory!r} has no name")
        existing = self._factories.get(key)
        if existing is not None and existing is not factory:
            raise ValueError(f"{self.kind} {key!r} is registered twice ({existing!r}, {factory!r})")
        self._factories[key] = factory
        return factory

    def _load(self) -> None:
        if self._loaded:
            return
        self._loaded = True
        importlib.import_module(self._builtin_module)
        for module in filter(None, os.environ.get(PLUGINS_ENV, "").split(",")):
            importlib.import_module(module.strip())
        for ep in entry_points(group=self._group):
            try:
                self.register(ep.load(), name=ep.name)
            except Exception as exc:  # a broken plugin must not take the tool down
                warnings.warn(
                    f"could not load {self.kind} plugin {ep.name!r} ({ep.value}): {exc}",
                    stacklevel=2,
                )

    def names(self) -> list[str]:
        self._load()
        return sorted(self._factories)

    def get(self, name: str) -> T:
        self._load()
        if name not in self._factories:
            raise UnknownNameError(self.kind, name, self.names(), self.renamed.get(name),
                                   self._renamed_why)
        if name not in self._instances:
            self._instances[name] = self._factories[name]()
        return self._instances[name]

    def __contains__(self, name: object) -> bool:
        self._load()
        return name in self._factories

    def __iter__(self) -> Iterator[T]:
        return (self.get(n) for n in self.names())

    def declarations(self) -> Iterator[tuple[str, object]]:
        """(name, class) of every entry, unbuilt where the factory is a class (its ``options``
        and other declarations are class attributes); a factory function's instance else."""
        self._load()
        for name in sorted(self._factories):
            factory = self._factories[name]
            yield name, factory if isinstance(factory, type) else self.get(name)

    def snapshot(self) -> tuple[tuple[str, Callable[[], T]], ...]:
        """What is registered now (a cache key for what derives from the entries)."""
        self._load()
        return tuple(self._factories.items())


workloads: Registry[Workload] = Registry("workload", "parabench.workloads", "parabench.workloads")
methods: Registry[Method] = Registry("method", "parabench.methods", "parabench.methods",
                                     renamed=RENAMED_METHODS,
                                     renamed_why="random-forest engines are namespaced")


def _options_of(owner: object) -> Mapping[str, OptionSpec]:
    options = getattr(owner, "options", None)
    return options if isinstance(options, Mapping) else {}


_specs_cache: tuple[tuple, dict[str, OptionSpec]] | None = None


def option_specs() -> dict[str, OptionSpec]:
    """Every option a registered workload or method declares, by name (sorted).

    One name may be declared by several owners, each with its own default and help; they must
    agree on the rest (type, valid values, what it changes), else this raises ValueError.
    """
    global _specs_cache
    registered = (workloads.snapshot(), methods.snapshot())
    if _specs_cache is not None and _specs_cache[0] == registered:
        return _specs_cache[1]
    specs: dict[str, OptionSpec] = {}
    owners: dict[str, str] = {}
    for registry in (workloads, methods):
        for owner, declared in registry.declarations():
            for name, spec in _options_of(declared).items():
                if name not in specs:
                    specs[name], owners[name] = spec, owner
                elif not specs[name].same_knob(spec):
                    raise ValueError(f"option {name!r} is declared differently by "
                                     f"{owners[name]} and {owner}")
    _specs_cache = registered, dict(sorted(specs.items()))
    return _specs_cache[1]


def declared_option(name: str, method: str | None = None,
                    workload: str | None = None) -> OptionSpec:
    """The declaration of option ``name`` a case reads: its method's, else its workload's,
    else any owner's. KeyError for a name nobody declares."""
    for registry, owner in ((methods, method), (workloads, workload)):
        if owner is not None and owner in registry:
            options = _options_of(registry.get(owner))
            if name in options:
                return options[name]
    specs = option_specs()
    if name not in specs:
        raise KeyError(f"unknown option {name!r}")
    return specs[name]
