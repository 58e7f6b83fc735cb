"""Test-suite wiring: hardware markers that skip with a reason, and benchmark smoke mode.

Markers: ``cpu`` and ``slow`` are registered in pyproject.toml; every requirement marker
(``cuda`` (>= 1 GPU), ``multigpu`` (>= 2), ``mpi`` (mpi4py + mpiexec), ``dask``, ``spark``
(pyspark + Java), ``tf``, ``numba``, ``torch``, ...) is registered here from
:data:`parabench.hardware.REQUIREMENTS`, the one table. A test whose hardware or engine is
missing is skipped with the probe's reason, never passed silently.

Benchmarks: plain ``pytest`` runs every benchmark body once, untimed (smoke mode, as
``--benchmark-disable``). ``--benchmark-only``, ``--benchmark-enable`` or any option that
saves/compares benchmark data measures for real.
"""

from __future__ import annotations

import pytest

from parabench import hardware

_MEASURING_OPTIONS = (
    "benchmark_only", "benchmark_enable", "benchmark_json", "benchmark_save",
    "benchmark_autosave", "benchmark_compare",
)


def pytest_addoption(parser: pytest.Parser) -> None:
    # here, not in tests/benchmarks/conftest.py, so it works from the repository's root
    parser.addoption("--cuda-all", action="store_true", default=False,
                     help="measure every cuda benchmark case, not the cuda selection "
                          "(also $PARABENCH_BENCH_ALL=1)")


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    for line in hardware.marker_lines():
        config.addinivalue_line("markers", line)
    if not hasattr(config.option, "benchmark_disable"):
        return  # pytest-benchmark not installed
    if not any(getattr(config.option, opt, None) for opt in _MEASURING_OPTIONS):
        config.option.benchmark_disable = True


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        for marker, requirement in hardware.markers().items():
            if item.get_closest_marker(marker) is None:
                continue
            if (reason := hardware.probe(requirement)) is not None:
                item.add_marker(pytest.mark.skip(reason=f"[{marker}] {reason}"))
                break


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    # `pytest -m mpi` on a tree with no such test yet is "nothing to run here", not an error.
    if exitstatus == pytest.ExitCode.NO_TESTS_COLLECTED and session.config.option.markexpr:
        session.exitstatus = pytest.ExitCode.OK
