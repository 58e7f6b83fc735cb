"""Which planned benchmark cases run: smoke mode, the cuda selection, or every case.

    pytest tests/benchmarks                                    # smoke: one case per method
    pytest -m cuda --benchmark-only                            # the cuda selection
    pytest -m cuda --benchmark-only tests/benchmarks --cuda-all   # every cuda case
    PARABENCH_BENCH_ALL=1 pytest -m cuda --benchmark-only      # the same, from anywhere

Smoke mode (plain ``pytest``) runs one planned case per (method, device). Measuring runs every
cpu case, and of the cuda cases the cuda selection
(:func:`parabench.sweep.bench.cuda_selection`: one case per method family at a GPU-meaningful
size, each carrying its :class:`~parabench.sweep.bench.BenchRun` in the ``bench_run`` marker,
which test_methods.py reads) unless ``--cuda-all`` or ``$PARABENCH_BENCH_ALL`` asks for every one,
or ``$PARABENCH_WORKLOADS`` / ``$PARABENCH_METHODS`` name the cases (all of those then run).
``--cuda-all`` is registered here, so pytest knows it only when this folder is named on its
command line; ``$PARABENCH_BENCH_ALL=1`` works from anywhere. Measuring runs share one sweep
folder (:func:`sweep_folder`), so the selection's vgg11 cases make its data once.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from parabench.core.tempdirs import SWEEP_DIR_ENV, runner_tempdir
from parabench.sweep.bench import kept_cases
from parabench.sweep.plan import SELECT_ENV, BenchCase

#: the marker that carries a selected case's BenchRun to test_methods.py
BENCH_RUN = "bench_run"
ALL_ENV = "PARABENCH_BENCH_ALL"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", f"{BENCH_RUN}(run): how a cuda-selected case runs "
                                       "(parabench.sweep.bench.BenchRun)")


@pytest.fixture(scope="session", autouse=True)
def sweep_folder(request: pytest.FixtureRequest) -> Iterator[None]:
    """Measuring, the session's cases share one sweep folder, as a ``parabench run``'s do
    (:func:`parabench.core.tempdirs.sweep_dir`): data made once, not once a case (vgg11's
    224-px images take tens of seconds), and the matmul peak an MFU is against. Gone after."""
    if (getattr(request.config.option, "benchmark_disable", False)
            or os.environ.get(SWEEP_DIR_ENV)):
        yield
        return
    with runner_tempdir() as folder, pytest.MonkeyPatch.context() as patch:
        patch.setenv(SWEEP_DIR_ENV, str(folder))
        yield


def cuda_all(config: pytest.Config) -> bool:
    """Whether every cuda case is asked for: the option, the variable, or named cases."""
    named = any(os.environ.get(var, "").strip() for var in SELECT_ENV.values())
    flag = os.environ.get(ALL_ENV, "").strip().lower() not in ("", "0", "false", "no")
    return bool(config.getoption("cuda_all", default=False)) or flag or named


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    parametrized = [item for item in items if hasattr(item, "callspec")
                    and isinstance(item.callspec.params.get("case"), BenchCase)]
    if not parametrized:
        return
    # picked from every planned case collected, so `-m` and `-k` filter one fixed set
    kept = kept_cases([item.callspec.params["case"] for item in parametrized],
                      smoke=bool(getattr(config.option, "benchmark_disable", False)),
                      every_cuda=cuda_all(config))
    drop = []
    for item in parametrized:
        case_id = item.callspec.params["case"].id
        if case_id not in kept:
            drop.append(item)
        elif (run := kept[case_id]) is not None:
            item.add_marker(getattr(pytest.mark, BENCH_RUN)(run))
    if drop:
        config.hook.pytest_deselected(items=drop)
        gone = set(map(id, drop))
        items[:] = [item for item in items if id(item) not in gone]
