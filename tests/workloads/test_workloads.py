"""Baseline workloads: seeded data, held-out split, and serial training that really learns."""

from __future__ import annotations

import numpy as np
import pytest

from parabench.case.execute import execute
from parabench.config import RunConfig
from parabench.registry import workloads

pytestmark = pytest.mark.cpu


def test_same_seed_same_bytes_other_seed_other_data() -> None:
    wl = workloads.get("random_forest")
    a, b, c = wl.make_data("tiny", 0), wl.make_data("tiny", 0), wl.make_data("tiny", 1)
    assert a.x_train.tobytes() == b.x_train.tobytes()
    assert a.y_test.tobytes() == b.y_test.tobytes()
    assert a.x_train.tobytes() != c.x_train.tobytes()


@pytest.mark.parametrize("name", ["mlp", "random_forest"])
def test_held_out_rows_are_not_in_the_training_set(name: str) -> None:
    data = workloads.get(name).make_data("tiny", 0)
    train = {row.tobytes() for row in data.x_train}
    assert not any(row.tobytes() in train for row in data.x_test)
    assert len(data.x_test) >= 0.15 * (len(data.x_train) + len(data.x_test))


@pytest.mark.parametrize("profile", ["tiny", "quick", "full"])
def test_profiles_grow(profile: str) -> None:
    from parabench.workloads import mlp, random_forest

    assert mlp.SIZES["tiny"][0] < mlp.SIZES["quick"][0] < mlp.SIZES["full"][0]
    assert random_forest.SIZES["tiny"][0] < random_forest.SIZES["quick"][0]
    assert profile in mlp.SIZES and profile in random_forest.SIZES


def test_mlp_draws_the_same_data_at_every_seed() -> None:
    """The run's seed draws mlp's weights and batch order, not its data: serial's seed spread
    is then its training's, which the quality gate needs (mlp's module docstring)."""
    from parabench.workloads import mlp

    wl = workloads.get("mlp")
    one, other = wl.make_data("tiny", 0), wl.make_data("tiny", 7)
    for name in ("x_train", "y_train", "x_test", "y_test"):
        assert np.array_equal(getattr(one, name), getattr(other, name)), name
    assert (len(one.x_train), len(one.x_test)) == mlp.SIZES["tiny"][:2] == (2_048, 8_192)
    assert wl.train_size("tiny") == len(one.x_train)
    assert set(np.unique(one.y_test)) == {0, 1, 2, 3}


@pytest.mark.torch
def test_serial_mlp_learns_well_beyond_chance() -> None:
    r = execute(RunConfig(workload="mlp", method="serial", profile="tiny", epochs=3))
    assert r.status == "ok", r.reason
    chance = 1 / 4
    assert r.quality is not None and r.quality.value is not None
    assert r.quality.value > chance + 0.3, r.quality
    assert r.loss[-1] < r.loss[0]
    assert len(r.epoch_s) == 3 and all(t > 0 for t in r.epoch_s)
    assert r.batch_size == 64 and r.samples_per_epoch == 2048
    assert r.samples_per_s == pytest.approx(2048 / r.median_epoch_s)


def test_serial_random_forest_learns_well_beyond_chance() -> None:
    r = execute(RunConfig(workload="random_forest", method="serial", profile="tiny", epochs=2))
    assert r.status == "ok", r.reason
    assert r.quality is not None and r.quality.value is not None
    assert r.quality.value > 1 / 3 + 0.3
    assert r.threads_per_worker == 1  # n_jobs=1 is recorded as what it is


@pytest.mark.torch
def test_serial_mlp_is_deterministic_for_a_seed() -> None:
    cfg = RunConfig(workload="mlp", method="serial", profile="tiny", epochs=2)
    a, b = execute(cfg), execute(cfg)
    assert a.loss == b.loss and a.quality == b.quality


@pytest.mark.torch
def test_auto_batch_size_picks_a_power_of_two_within_the_data() -> None:
    r = execute(RunConfig(workload="mlp", method="serial", profile="tiny", epochs=1,
                          batch_size="auto"))
    assert r.status == "ok", r.reason
    assert isinstance(r.batch_size, int) and r.batch_size & (r.batch_size - 1) == 0
    assert 1 <= r.batch_size <= 2048
    assert r.extra["batch_size_auto_budget_mb"] > 0


@pytest.mark.torch
def test_auto_batch_size_too_big_for_budget_is_oom() -> None:
    import torch

    from parabench.torch.build import auto_batch_size

    model = torch.nn.Linear(8, 2)
    x, y = torch.randn(16, 8), torch.randint(0, 2, (16,))
    assert auto_batch_size(model, torch.nn.functional.cross_entropy, x, y,
                           budget_bytes=1e9, limit=16) == 16
    with pytest.raises(MemoryError, match="a batch of 1 needs"):
        auto_batch_size(model, torch.nn.functional.cross_entropy, x, y,
                        budget_bytes=10, limit=16)


@pytest.mark.cuda
def test_serial_mlp_on_cuda_learns_and_reports_gpu_peak() -> None:
    r = execute(RunConfig(workload="mlp", method="serial", device="cuda", profile="tiny",
                          epochs=2))
    assert r.status == "ok", r.reason
    assert r.quality is not None and r.quality.value is not None and r.quality.value > 0.55
    assert r.peak_gpu_mb is not None and r.peak_gpu_mb > 0


def test_estimator_workload_rejects_auto_batch_with_a_reason() -> None:
    r = execute(RunConfig(workload="random_forest", method="serial", profile="tiny",
                          batch_size="auto"))
    assert r.status == "skipped" and "mini-batch" in r.reason


def _nearest_mean_accuracy(x_train, y_train, x_test, y_test) -> float:
    """Accuracy of a nearest-class-mean classifier fitted on the training images."""
    import numpy as np

    flat = x_train.reshape(len(x_train), -1).astype(np.float32)
    means = np.stack([flat[y_train == c].mean(axis=0) for c in range(int(y_train.max()) + 1)])
    test = x_test.reshape(len(x_test), -1).astype(np.float32)
    dist = ((test[:, None, :] - means[None]) ** 2).sum(axis=2)
    return float((dist.argmin(axis=1) == y_test).mean())


def test_extra_held_out_images_come_from_the_same_templates_and_change_no_training_byte() -> None:
    from parabench.workloads.synthetic import class_images

    args = dict(n=600, classes=10, channels=1, size=28, seed=5, noise=0.45)
    plain, more = class_images(**args), class_images(**args, extra_held_out=300)
    assert more.x_train.tobytes() == plain.x_train.tobytes()
    assert more.y_train.tobytes() == plain.y_train.tobytes()
    first = len(plain.x_test)
    assert more.x_test[:first].tobytes() == plain.x_test[:first].tobytes()
    assert len(more.x_test) == first + 300
    train = {row.tobytes() for row in more.x_train}
    assert not any(row.tobytes() in train for row in more.x_test)
    # the same templates: a classifier fitted on the training images scores the extra images
    # as it scores the split's own (other templates would put it near chance, 0.1)
    own = _nearest_mean_accuracy(more.x_train, more.y_train, plain.x_test, plain.y_test)
    extra = _nearest_mean_accuracy(more.x_train, more.y_train, more.x_test[first:],
                                   more.y_test[first:])
    assert own > 0.8 and abs(extra - own) < 0.1, (own, extra)
    other = class_images(**{**args, "seed": 6})
    assert _nearest_mean_accuracy(more.x_train, more.y_train, other.x_test, other.y_test) < 0.5


def test_cnn_tiny_holds_out_720_images_and_the_autoencoder_keeps_its_split() -> None:
    cnn, ae = workloads.get("cnn").make_data("tiny", 0), workloads.get("conv_autoencoder")
    assert (len(cnn.x_train), len(cnn.x_test)) == (960, 720)
    assert len(ae.make_data("tiny", 0).x_test) == 240
