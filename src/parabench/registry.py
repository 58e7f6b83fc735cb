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

This is the only place that looks anything up by method or workload name.
"""

from __future__ import annotations

import importlib
import os
import warnings
from collections.abc import Callable, Iterator
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Generic, TypeVar

if TYPE_CHECKING:
    from parabench.method import Method
    from parabench.workload import Workload

T = TypeVar("T")
#: comma-separated modules imported on first lookup: register without packaging a plugin
PLUGINS_ENV = "PARABENCH_PLUGINS"


class UnknownNameError(KeyError):
    """A workload or method name that is not registered; the message lists the valid ones."""

    def __init__(self, kind: str, name: str, valid: list[str]) -> None:
        self.kind, self.name, self.valid = kind, name, valid
        super().__init__(f"unknown {kind} {name!r}; valid: {', '.join(valid) or '(none)'}")

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0])


def import_submodules(package: str, path: list[str]) -> None:
    """Import every module of a package (used by the built-in workload/method packages)."""
    import pkgutil

    for info in sorted(pkgutil.iter_modules(path), key=lambda m: m.name):
        importlib.import_module(f"{package}.{info.name}")


class Registry(Generic[T]):
    """Name -> factory map, filled by built-in modules and by entry points on first use."""

    def __init__(self, kind: str, builtin_module: str, group: str) -> None:
        self.kind = kind
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
            raise UnknownNameError(self.kind, name, self.names())
        if name not in self._instances:
            self._instances[name] = self._factories[name]()
        return self._instances[name]

    def __contains__(self, name: object) -> bool:
        self._load()
        return name in self._factories

    def __iter__(self) -> Iterator[T]:
        return (self.get(n) for n in self.names())


workloads: Registry[Workload] = Registry("workload", "parabench.workloads", "parabench.workloads")
methods: Registry[Method] = Registry("method", "parabench.methods", "parabench.methods")
