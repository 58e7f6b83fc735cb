"""Smoke mode (plain ``pytest``) runs one planned case per method; measuring runs them all."""

from __future__ import annotations

import pytest

from parabench.sweep.bench import smoke_cases
from parabench.sweep.plan import BenchCase


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not getattr(config.option, "benchmark_disable", False):
        return
    parametrized = [item for item in items if hasattr(item, "callspec")
                    and isinstance(item.callspec.params.get("case"), BenchCase)]
    keep = {c.id for c in smoke_cases([item.callspec.params["case"] for item in parametrized])}
    deselected = [item for item in parametrized if item.callspec.params["case"].id not in keep]
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = [item for item in items if item not in deselected]
