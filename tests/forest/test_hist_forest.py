"""Histogram random forests: kernels against the NumPy reference, identical trees across
backends, quality against sklearn's ``serial`` forest, the numba CUDA kernels under the
simulator, and every method end to end through ``execute``.

    python -m pytest -q tests/forest/test_hist_forest.py

Quality margin. Serial's own seed-to-seed spread, measured as the standard deviation of
held-out accuracy over five forest seeds (random_state 0-4) on the seed-0 data, which these
tests use: tiny sigma = 0.0119 (0.845-0.875 on 200 held-out rows), quick sigma = 0.0023
(0.834-0.8398 on 4000 rows); on the seed-1 data it was 0.0428 and 0.0032. Two independent
runs each with that spread differ by sigma*sqrt(2) in standard deviation, so one
histogram-forest run may sit at most ``3 * sqrt(2) * sigma`` below one serial run (tiny
0.050, quick 0.0098), and a mean over five seeds at most ``3 * sqrt(2 / 5) * sigma`` below
serial's mean over five (tiny 0.023). Measured the same way, the 32-bin histogram forest
averaged 0.855 (tiny) and 0.8351 (quick) against serial's 0.856 and 0.8361 on the seed-0
data, and 0.8206 against 0.8238 (quick) on the seed-1 data.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import textwrap
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from parabench.case.execute import execute
from parabench.config import RunConfig
from parabench.forest import Binner, Forest, ForestParams, Prepared, grow_trees, make_kernel
from parabench.forest import grow as grow_module  # the module (the function is grow_trees)
from parabench.registry import methods, workloads

SERIAL_SIGMA = {"tiny": 0.0119, "quick": 0.0023}
SINGLE_RUN_MARGIN = {p: 3 * math.sqrt(2) * s for p, s in SERIAL_SIGMA.items()}
MEAN_OF_5_MARGIN = {p: 3 * math.sqrt(2 / 5) * s for p, s in SERIAL_SIGMA.items()}

BACKENDS = [
    pytest.param("torch", marks=pytest.mark.torch),
    pytest.param("tf", marks=pytest.mark.tf),
    pytest.param("numba", marks=pytest.mark.numba),
]
TREE_ARRAYS = ("offsets", "feature", "bin", "left", "right", "counts", "threshold")


def _random_level(seed: int, n: int = 300, features: int = 7, bins: int = 6, classes: int = 3,
                  nodes: int = 5, slots: int = 3) -> dict:
    rng = np.random.default_rng(seed)
    return {
        "xbin": rng.integers(0, bins, (n, features)).astype(np.uint8),
        "y": rng.integers(0, classes, n).astype(np.int64),
        "rows": rng.integers(0, n, 2 * n).astype(np.int64),
        "node": rng.integers(-1, nodes, 2 * n).astype(np.int64),  # -1: a finished row
        "feats": np.stack([rng.permutation(features)[:slots] for _ in range(nodes)]),
        "bins": bins, "classes": classes, "nodes": nodes,
    }


def _level_outputs(kernel, level: dict, lo: int, hi: int) -> list[np.ndarray]:
    """Histograms, best splits and routing of one level, as host arrays."""
    k = kernel
    xb, y, rows, node = (k.put(level[n]) for n in ("xbin", "y", "rows", "node"))
    hist = k.histograms(xb, y, rows, node, k.put(level["feats"][lo:hi]), lo, hi,
                        level["bins"], level["classes"])
    splits = [k.get(a) for a in k.best_splits(hist, 2)]
    out = [k.get(hist), *splits]
    if (lo, hi) == (0, level["nodes"]):
        feature = level["feats"][np.arange(hi), splits[0]]
        nxt = np.where(splits[3][:, None], np.arange(2 * hi).reshape(hi, 2), -1)
        kept = level["node"] >= 0  # rows of finished nodes are not routed again
        r, nd = k.route(xb, k.put(level["rows"][kept]), k.put(level["node"][kept]),
                        k.put(feature), k.put(splits[1]), k.put(nxt[:, 0]), k.put(nxt[:, 1]))
        r, nd = k.get(r), k.get(nd)
        # backends may keep -1 rows and may reorder: compare the routed (node, row) pairs
        order = np.lexsort((r, nd))
        out += [r[order][nd[order] >= 0], nd[order][nd[order] >= 0]]
    return out


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_kernel_matches_numpy_reference_exactly(backend: str, seed: int) -> None:
    level = _random_level(seed)
    if seed == 2:  # rows grouped by node, as routing leaves them (numba's fast path)
        order = np.argsort(level["node"], kind="stable")
        level["rows"], level["node"] = level["rows"][order], level["node"][order]
    ref, other = make_kernel("numpy"), make_kernel(backend)
    for lo, hi in ((0, level["nodes"]), (1, 4)):  # the whole frontier, and a chunk of it
        expected = _level_outputs(ref, level, lo, hi)
        got = _level_outputs(other, level, lo, hi)
        assert expected[0].sum() > 0
        for e, g in zip(expected, got, strict=True):
            np.testing.assert_array_equal(g, e)


@pytest.mark.parametrize("backend", ["numpy", *BACKENDS])
def test_split_prefers_the_first_of_equal_scores(backend: str) -> None:
    # both slots see the same counts, and bins 0-2 all separate the classes perfectly:
    # slot 0 and its lowest bin must win; a node with one occupied bin has no split
    hist = np.zeros((2, 2, 2, 4), np.int64)
    hist[0, :, 0, 0] = hist[0, :, 1, 3] = 5
    hist[1, :, :, 2] = 3
    k = make_kernel(backend)
    slot, b, left, found = (k.get(a) for a in k.best_splits(k.put(hist), 1))
    assert (slot[0], b[0], bool(found[0]), bool(found[1])) == (0, 0, True, False)
    np.testing.assert_array_equal(left[0], [5, 0])


def _small_data(rows: int = 300) -> tuple[np.ndarray, np.ndarray]:
    data = workloads.get("random_forest").make_data("tiny", 0)
    return data.x_train[:rows], data.y_train[:rows]


def _forest(kernel_name: str, params: ForestParams, ids=None) -> Forest:
    x, y = _small_data()
    prepared = Prepared.from_data(x, y, params.n_bins)
    return grow_trees(make_kernel(kernel_name), prepared, params, ids or range(params.n_estimators))


def _assert_same_forest(a: Forest, b: Forest) -> None:
    assert a.n_nodes == b.n_nodes
    np.testing.assert_array_equal(a.tree_ids, b.tree_ids)
    for name in TREE_ARRAYS:
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)


@pytest.mark.parametrize("backend", BACKENDS)
def test_backends_grow_identical_trees(backend: str) -> None:
    params = ForestParams(n_estimators=3, n_bins=16, seed=7)
    reference = _forest("numpy", params)
    assert reference.n_nodes > 3 * 20  # real trees, not stumps
    _assert_same_forest(_forest(backend, params), reference)
    # histograms in chunks of a few nodes (the memory bound) change nothing
    chunked = replace(params, max_cells=3 * 4 * 16 * 3)
    _assert_same_forest(_forest(backend, chunked), reference)


def test_trees_do_not_depend_on_batching_or_split(monkeypatch: pytest.MonkeyPatch) -> None:
    params = ForestParams(n_estimators=4, n_bins=16, seed=3)
    whole = _forest("numpy", params)
    parts = Forest.concat([_forest("numpy", params, [2, 3]), _forest("numpy", params, [0, 1])])
    _assert_same_forest(parts, whole)
    monkeypatch.setattr(grow_module, "ROWS_PER_BATCH", 1)  # one tree per batch
    _assert_same_forest(_forest("numpy", params), whole)
    assert not np.array_equal(_forest("numpy", replace(params, seed=4)).feature, whole.feature)


def test_float_thresholds_route_rows_like_their_bins() -> None:
    x, y = _small_data()
    params = ForestParams(n_estimators=2, n_bins=8, seed=1)
    prepared = Prepared.from_data(x, y, params.n_bins)
    forest = grow_trees(make_kernel("numpy"), prepared, params, range(2))
    leaves = forest.apply(x)
    for t in range(forest.n_trees):  # walk each tree on the bins instead of the floats
        node = np.full(len(x), forest.offsets[t])
        while (inner := forest.left[node] >= 0).any():
            go = prepared.xbin[np.arange(len(x)), np.maximum(forest.feature[node], 0)]
            child = np.where(go <= forest.bin[node], forest.left[node], forest.right[node])
            node = np.where(inner, child, node)
        np.testing.assert_array_equal(node, leaves[:, t])
    proba = forest.predict_proba(x)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0)


def test_binner_keeps_low_cardinality_features_exact() -> None:
    x = np.array([[0.0, 1.5], [1.0, 2.5], [2.0, 3.5], [1.0, 9.0]])
    binner = Binner.fit(x, n_bins=4)
    np.testing.assert_array_equal(binner.transform(x)[:, 0], [0, 1, 2, 1])
    assert binner.n_bins == 4
    with pytest.raises(ValueError, match="n_bins"):
        Binner.fit(x, n_bins=1000)


def test_quality_within_serial_spread_over_five_seeds() -> None:
    workload = workloads.get("random_forest")
    data = workload.make_data("tiny", 0)
    serial, hist = [], []
    for seed in range(5):
        est = workload.build_estimator("tiny", seed, n_jobs=1).fit(data.x_train, data.y_train)
        serial.append(workload.score(est, data.x_test, data.y_test))
        params = ForestParams.from_sklearn(est)
        prepared = Prepared.from_data(data.x_train, data.y_train, params.n_bins)
        forest = grow_trees(make_kernel("numpy"), prepared, params, range(params.n_estimators))
        hist.append(workload.score(forest, data.x_test, data.y_test))
    assert np.mean(hist) >= np.mean(serial) - MEAN_OF_5_MARGIN["tiny"], (hist, serial)
    assert min(hist) > 1 / data.n_classes + 0.3  # far above chance: it really learned


CUDASIM_SCRIPT = """
import numpy as np
from parabench.forest import ForestParams, Prepared, grow_trees, make_kernel
from tests.forest.test_hist_forest import _level_outputs, _random_level
level = _random_level(5, n=24, features=4, bins=4, classes=2, nodes=3, slots=2)
ref, gpu = make_kernel("numpy"), make_kernel("numba-cuda", "cuda")
gpu.warm_up()
for lo, hi in ((0, 3), (1, 2)):
    for e, g in zip(_level_outputs(ref, level, lo, hi), _level_outputs(gpu, level, lo, hi)):
        np.testing.assert_array_equal(g, e)
rng = np.random.default_rng(0)
x, y = rng.normal(size=(40, 3)), rng.integers(0, 2, 40)
data, params = Prepared.from_data(x, y, 4), ForestParams(n_estimators=1, n_bins=4, seed=2)
a, b = grow_trees(ref, data, params, [0]), grow_trees(gpu, data, params, [0])
assert a.n_nodes > 3 and a.n_nodes == b.n_nodes, (a.n_nodes, b.n_nodes)
for name in ("feature", "bin", "left", "right", "counts"):
    np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
print("cudasim ok", a.n_nodes)
"""


@pytest.mark.numba
def test_numba_cuda_kernels_under_the_simulator() -> None:
    root = Path(__file__).resolve().parents[2]
    env = os.environ | {"NUMBA_ENABLE_CUDASIM": "1"}  # read when numba is imported
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(CUDASIM_SCRIPT)], env=env,
                          capture_output=True, text=True, timeout=300, cwd=root)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "cudasim ok" in proc.stdout


def _method_marks(name: str) -> list:
    marks = [getattr(pytest.mark, r) for r in sorted(methods.get(name).requires)]
    return marks + ([pytest.mark.slow] if "dask" in name else [])  # a cluster: ~10-20 s


@pytest.fixture(scope="module")
def tiny_results() -> dict[str, object]:
    """``serial`` and ``rf_torch`` at tiny, run once for the module."""
    out = {}
    for name in ("serial", "rf_torch"):
        if methods.get(name).unavailable() is None:
            out[name] = execute(RunConfig(workload="random_forest", method=name, profile="tiny",
                                          epochs=2))
    return out


@pytest.mark.parametrize("method", [pytest.param(m, marks=_method_marks(m)) for m in
                                    ("rf_torch", "rf_tf", "rf_numba", "rf_threads+torch",
                                     "rf_torch+dask", "rf_dask+threads+torch")])
def test_method_runs_end_to_end_at_tiny(method: str, tiny_results: dict) -> None:
    workers = 1 if method in ("rf_torch", "rf_tf", "rf_numba") else 2
    config = RunConfig(workload="random_forest", method=method, profile="tiny", epochs=2,
                       workers=workers)
    result = tiny_results.get(method) or execute(config)
    assert result.status == "ok", (result.reason, result.extra.get("traceback"))
    assert len(result.epoch_s) == 2 and all(s > 0 for s in result.epoch_s)
    assert result.startup_s is not None and result.startup_s > 0
    serial = tiny_results["serial"].quality.value
    assert result.quality.value >= serial - SINGLE_RUN_MARGIN["tiny"]
    assert methods.get(method).parity == "statistical"
    if "rf_torch" in tiny_results and method != "rf_torch":
        # same seeds, same algorithm: the hybrids grow torch's very forest
        if "torch" in method:
            assert result.quality.value == tiny_results["rf_torch"].quality.value
            assert result.loss == tiny_results["rf_torch"].loss


def test_hist_methods_only_train_random_forests() -> None:
    for name in ("rf_torch", "rf_tf", "rf_numba", "rf_threads+torch", "rf_torch+dask",
                 "rf_dask+threads+torch"):
        method = methods.get(name)
        assert method.supports(workloads.get("random_forest"))
        assert not method.supports(workloads.get("mlp"))
