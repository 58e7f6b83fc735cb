"""parabench.cache: a hit returns what the computation returns, and nothing stale is ever read."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from parabench import cache


@pytest.fixture
def calls() -> list[int]:
    return []


def _make(calls: list[int], value: float = 1.5):
    def make() -> dict[str, np.ndarray]:
        calls.append(1)
        return {"x": np.arange(6, dtype=np.float32).reshape(2, 3) * value, "y": np.array([0, 1])}
    return make


def test_hit_returns_the_same_arrays_and_skips_the_work(tmp_path, monkeypatch, calls):
    monkeypatch.setenv("PARABENCH_CACHE_DIR", str(tmp_path))
    first = cache.cached_arrays("t", {"seed": 0}, _make(calls))
    second = cache.cached_arrays("t", {"seed": 0}, _make(calls))
    assert len(calls) == 1
    assert second.keys() == first.keys()
    for name in first:
        assert second[name].dtype == first[name].dtype
        np.testing.assert_array_equal(second[name], first[name])


def test_another_key_or_source_misses(tmp_path, monkeypatch, calls):
    monkeypatch.setenv("PARABENCH_CACHE_DIR", str(tmp_path))
    source = tmp_path / "gen.py"
    source.write_text("A = 1\n")
    cache.cached_arrays("t", {"seed": 0}, _make(calls), sources=[source])
    other = cache.cached_arrays("t", {"seed": 1}, _make(calls, 2.0), sources=[source])
    assert len(calls) == 2 and other["x"][1, 2] == 10.0
    source.write_text("A = 2\n")  # the generator's code changed: its old answer is not read
    again = cache.cached_arrays("t", {"seed": 0}, _make(calls, 3.0), sources=[source])
    assert len(calls) == 3 and again["x"][1, 2] == 15.0


def test_damaged_entry_is_recomputed_and_off_turns_it_off(tmp_path, monkeypatch, calls):
    monkeypatch.setenv("PARABENCH_CACHE_DIR", str(tmp_path))
    cache.cached_json("j", {"k": 1}, lambda: calls.append(1) or 7)
    (entry,) = tmp_path.glob("j-*.json")
    entry.write_text("{trunc")
    assert cache.cached_json("j", {"k": 1}, lambda: calls.append(1) or 7) == 7
    assert len(calls) == 2
    assert cache.cached_json("j", {"k": 1}, lambda: calls.append(1) or 8) == 7  # rewritten
    monkeypatch.setenv("PARABENCH_CACHE_DIR", "off")
    assert cache.cache_dir() is None
    assert cache.cached_json("j", {"k": 1}, lambda: calls.append(1) or 8) == 8
    assert len(calls) == 3


def test_default_location_follows_xdg(monkeypatch, tmp_path):
    monkeypatch.delenv("PARABENCH_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cache.cache_dir() == Path(tmp_path) / "parabench"


def test_cached_tabular_data_is_the_drawn_data(tmp_path, monkeypatch):
    from parabench.workloads.tabular import tabular_classification

    kw = {"n_samples": 300, "n_features": 8, "n_classes": 3, "seed": 4}
    monkeypatch.setenv("PARABENCH_CACHE_DIR", "off")
    drawn = tabular_classification(**kw)
    monkeypatch.setenv("PARABENCH_CACHE_DIR", str(tmp_path))
    tabular_classification(**kw)  # fills
    cached = tabular_classification(**kw)  # reads
    assert len(list(tmp_path.glob("tabular-*.npz"))) == 1
    for name in ("x_train", "y_train", "x_test", "y_test"):
        a, b = getattr(drawn, name), getattr(cached, name)
        assert a.dtype == b.dtype and a.flags["C_CONTIGUOUS"] == b.flags["C_CONTIGUOUS"]
        np.testing.assert_array_equal(a, b)
    assert cached.n_classes == 3
    other = tabular_classification(**{**kw, "seed": 5})
    assert not np.array_equal(other.x_train, cached.x_train)


def test_cached_flops_count_the_model_they_are_given(tmp_path, monkeypatch):
    import torch

    from parabench.torch.build import cached_flops_per_sample, flops_per_sample

    monkeypatch.setenv("PARABENCH_CACHE_DIR", str(tmp_path))
    loss = torch.nn.functional.cross_entropy
    x, y = torch.randn(8, 4), torch.randint(0, 3, (8,))
    for hidden in (8, 16, 8):  # 8 again: a hit, and it must still be 8's count
        model = torch.nn.Sequential(torch.nn.Linear(4, hidden), torch.nn.Linear(hidden, 3))
        assert cached_flops_per_sample(model, loss, x, y) == flops_per_sample(model, loss, x, y)
    # linear layers: forward 2*in*out per sample, backward twice that (input and weight grads)
    assert cached_flops_per_sample(model, loss, x, y) == 6 * (4 * 8 + 8 * 3) - 2 * 4 * 8
    assert len(list(tmp_path.glob("flops-*.json"))) == 2
