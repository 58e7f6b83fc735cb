"""``--batch-size auto``'s search (:mod:`parabench.torch.autobatch`): doubling, the record of
every size tried, why it stopped, the time budget (with fake ``fits`` and a fake clock), and
that a search leaves no trace on training."""

from __future__ import annotations

import json
import time

import pytest

from parabench.torch.autobatch import search_batch

pytestmark = pytest.mark.torch


class FakeClock:
    """A clock that only the fake ``fits`` moves: ``cost(batch)`` seconds a try."""

    def __init__(self, cost) -> None:
        self.now, self.cost = 0.0, cost

    def fits_below(self, most: int):
        def fits(batch: int) -> bool:
            self.now += self.cost(batch)
            return batch <= most
        return fits


def test_the_search_keeps_the_largest_power_of_two_and_records_every_try() -> None:
    clock = FakeClock(lambda batch: 0.5)
    search = search_batch(clock.fits_below(48), limit=1000, budget_s=30.0,
                          timer=lambda: clock.now)
    assert search.batch == 32 and search.stop == "oom"
    assert search.tried == [(1, "fit", 0.5), (2, "fit", 0.5), (4, "fit", 0.5), (8, "fit", 0.5),
                            (16, "fit", 0.5), (32, "fit", 0.5), (64, "oom", 0.5)]
    notes = search.notes()
    assert notes["batch_size_auto_tried"][-1] == [64, "oom", 0.5]
    assert notes["batch_size_auto_stop"] == "oom" and notes["batch_size_auto_s"] == 3.5
    assert json.loads(json.dumps(notes)) == notes  # a result's extra is JSON


def test_the_search_stops_below_the_limit() -> None:
    search = search_batch(lambda batch: True, limit=100)
    assert search.batch == 64 and search.stop == "limit"
    assert [b for b, _, _ in search.tried] == [1, 2, 4, 8, 16, 32, 64]


def test_no_batch_of_one_is_a_memory_error_with_the_reason() -> None:
    with pytest.raises(MemoryError, match="use more devices"):
        search_batch(lambda batch: False, limit=100, too_big="1 is too big; use more devices")


def test_the_time_budget_stops_doubling_and_keeps_what_fit() -> None:
    # a try costs its batch in seconds: 1 + 2 + 4 = 7 s, 8 is expected to take 8 (twice the
    # last try): 7 + 8 <= 20, tried; 16 would end near 15 + 16 > 20: not started
    clock = FakeClock(lambda batch: float(batch))
    search = search_batch(clock.fits_below(10**6), limit=10**6, budget_s=20.0,
                          timer=lambda: clock.now)
    assert search.stop == "time budget" and search.batch == 8
    assert [b for b, _, _ in search.tried] == [1, 2, 4, 8]
    assert search.notes()["batch_size_auto_budget_s"] == 20.0


def test_a_slow_fits_is_stopped_by_the_real_clock() -> None:
    calls = []

    def slow(batch: int) -> bool:
        calls.append(batch)
        time.sleep(0.05)
        return True

    search = search_batch(slow, limit=2**30, budget_s=0.3)
    assert search.stop == "time budget"
    assert len(calls) < 31 and search.batch == calls[-1]  # 31 tries reach the limit


def test_without_a_budget_only_oom_or_the_limit_stop_it() -> None:
    clock = FakeClock(lambda batch: 100.0)
    search = search_batch(clock.fits_below(2**12), limit=2**20, budget_s=None,
                          timer=lambda: clock.now)
    assert search.batch == 2**12 and search.stop == "oom"


def _bn_dropout_model():
    """Batch-norm statistics and dropout's RNG: what a search must leave as it found them
    (inputs N x 2 x 4, so that batch norm takes a batch of one)."""
    import torch
    from torch import nn

    torch.manual_seed(0)
    return nn.Sequential(nn.Conv1d(2, 4, 3, padding=1), nn.BatchNorm1d(4), nn.Dropout(0.5),
                         nn.Flatten(), nn.Linear(16, 2))


def test_the_cpu_search_leaves_buffers_and_rng_as_they_were() -> None:
    import torch

    from parabench.torch.autobatch import cpu_search

    model = _bn_dropout_model()
    x, y = torch.randn(64, 2, 4), torch.randint(0, 2, (64,))
    before = {k: b.clone() for k, b in model.state_dict().items()}
    rng = torch.get_rng_state()
    search = cpu_search(model, torch.nn.functional.cross_entropy, x, y, budget_bytes=1e9,
                        limit=64)
    assert search.batch == 64 and search.stop == "limit"
    assert all(torch.equal(before[k], b) for k, b in model.state_dict().items())
    assert torch.equal(torch.get_rng_state(), rng)


def test_the_cpu_estimate_says_over_budget_and_why_one_does_not_fit() -> None:
    import torch

    from parabench.torch.autobatch import cpu_search

    model = torch.nn.Linear(8, 2)
    x, y = torch.randn(1024, 8), torch.randint(0, 2, (1024,))
    params = sum(p.numel() * p.element_size() for p in model.parameters()) * 4
    search = cpu_search(model, torch.nn.functional.cross_entropy, x, y,
                        budget_bytes=params + 4096, limit=1024)
    assert search.stop == "over budget" and search.tried[-1][1] == "over budget"
    assert 1 <= search.batch < 1024
    with pytest.raises(MemoryError, match="a batch of 1 needs"):
        cpu_search(model, torch.nn.functional.cross_entropy, x, y, budget_bytes=10, limit=16)


def test_an_auto_batch_case_notes_what_it_tried() -> None:
    from parabench.case.execute import execute
    from parabench.config import RunConfig

    r = execute(RunConfig(workload="mlp", method="serial", profile="tiny", epochs=1,
                          batch_size="auto", steps=2, windows=2))
    assert r.status == "ok", r.reason
    tried = r.extra["batch_size_auto_tried"]
    assert [b for b, _, _ in tried][:3] == [1, 2, 4]
    assert tried[-1][0] in (r.batch_size, 2 * r.batch_size)
    assert r.extra["batch_size_auto_stop"] in ("limit", "over budget")


def test_the_cuda_search_stops_at_out_of_memory_and_cleans_up(monkeypatch) -> None:
    """cuda_search's own logic on the CPU: a loss that raises CUDA's out-of-memory above 24
    samples stands for the GPU (synchronising is a no-op here)."""
    import torch

    from parabench.torch import autobatch

    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    model = _bn_dropout_model()
    x, y = torch.randn(200, 2, 4), torch.randint(0, 2, (200,))
    before = {k: b.clone() for k, b in model.state_dict().items()}
    seen: list[int] = []

    def loss_fn(out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        seen.append(len(target))
        if len(target) > 24:
            raise torch.OutOfMemoryError("CUDA out of memory (fake)")
        return torch.nn.functional.cross_entropy(out, target)

    fits = autobatch.CudaFits(model=model, loss_fn=loss_fn, x=x, y=y, precision="bf16")
    monkeypatch.setattr(autobatch, "CudaFits", lambda **kwargs: fits)
    search = autobatch.cuda_search(model, loss_fn, x, y, limit=200, precision="bf16")
    assert search.batch == 16 and search.stop == "oom" and seen == [1, 2, 4, 8, 16, 32]
    assert [outcome for _, outcome, _ in search.tried] == ["fit"] * 5 + ["oom"]
    assert fits.reserve == [] and all(p.grad is None for p in model.parameters())
    assert all(torch.equal(before[k], b) for k, b in model.state_dict().items())


@pytest.mark.cuda
def test_the_cuda_search_fits_restores_and_records() -> None:
    import torch

    from parabench.torch.autobatch import cuda_search

    model = _bn_dropout_model().cuda()
    x, y = torch.randn(256, 2, 4, device="cuda"), torch.randint(0, 2, (256,), device="cuda")
    before = {k: b.clone() for k, b in model.state_dict().items()}
    rng = torch.cuda.get_rng_state_all()
    search = cuda_search(model, torch.nn.functional.cross_entropy, x, y, limit=256,
                         precision="bf16")
    assert search.batch == 256 and search.stop == "limit" and len(search.tried) == 9
    assert all(torch.equal(before[k], b) for k, b in model.state_dict().items())
    assert all(torch.equal(a, b) for a, b in zip(torch.cuda.get_rng_state_all(), rng, strict=True))
