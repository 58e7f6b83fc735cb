"""The six deep-learning workloads: learnable seeded data, real-format files, stage views.

Each case runs with one torch thread: the tests check learning, not speed, and other jobs on
a 2-core machine make a second spinning OpenMP thread far slower than none.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from parabench.case.execute import execute
from parabench.case.result import Result
from parabench.config import ConfigError, RunConfig
from parabench.registry import workloads
from parabench.workload import Dataset

pytestmark = pytest.mark.torch

DL = ["cnn", "conv_autoencoder", "vgg11", "densenet121", "nbow", "seq2seq"]
STAGED = ["cnn", "conv_autoencoder", "vgg11", "densenet121", "nbow"]


def run(name: str, epochs: int = 1, device: str = "cpu", **options: Any) -> Result:
    config = RunConfig(workload=name, method="serial", device=device, profile="tiny",
                       epochs=epochs, threads_per_worker=1, options=options)
    result = execute(config)
    assert result.status == "ok", f"{result.reason}\n{result.extra.get('traceback', '')}"
    assert result.quality is not None and result.quality.value is not None
    assert all(np.isfinite(result.loss))
    return result


def untrained_mse(name: str) -> float:
    """Held-out reconstruction error of the model before any training step."""
    import torch

    from parabench.torch.loop import predict

    wl = workloads.get(name)
    data = wl.make_data("tiny", 0)
    _, _, x_test, y_test = wl.tensors(data)
    torch.manual_seed(0)
    return wl.score(predict(wl.build_model(data, 0), x_test), y_test)


def majority_token_rate(data: Dataset) -> float:
    """Accuracy of always predicting the commonest held-out target token (padding ignored)."""
    targets = data.y_test[:, 1:]
    real = targets[targets != 0]
    return np.bincount(real).max() / len(real)


#: epochs a tiny run needs: densenet121 (random init, 121 BatchNorms, 16 steps of 32 an epoch)
#: is near chance after one epoch and at 0.74-0.91 after two (seeds 0-3, 2026-11-24)
TINY_EPOCHS = {"densenet121": 2}


@pytest.mark.parametrize("name", ["cnn", "vgg11", "densenet121", "nbow"])
def test_a_tiny_run_classifies_well_above_chance(name: str) -> None:
    data = workloads.get(name).make_data("tiny", 0)
    chance = 1 / data.n_classes
    r = run(name, epochs=TINY_EPOCHS.get(name, 1))
    assert r.quality.name == "accuracy"
    assert r.quality.value > chance + 0.25, (r.quality.value, chance)


def test_one_tiny_epoch_of_seq2seq_beats_the_commonest_token() -> None:
    baseline = majority_token_rate(workloads.get("seq2seq").make_data("tiny", 0))
    r = run("seq2seq")
    assert r.quality.name == "token_accuracy"
    assert r.quality.value > baseline + 0.2, (r.quality.value, baseline)


def test_one_tiny_epoch_of_the_autoencoder_reconstructs_better_than_untrained() -> None:
    before = untrained_mse("conv_autoencoder")
    r = run("conv_autoencoder")
    assert r.quality.name == "reconstruction_mse" and not r.quality.higher_is_better
    assert r.quality.value < 0.75 * before, (r.quality.value, before)


@pytest.mark.cuda
@pytest.mark.parametrize("name", DL)
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_a_tiny_run_on_cuda_learns_too(name: str, precision: str) -> None:
    r = run(name, epochs=TINY_EPOCHS.get(name, 1), device="cuda", precision=precision)
    if name == "conv_autoencoder":
        assert r.quality.value < 0.75 * untrained_mse(name)
    elif name == "seq2seq":
        assert r.quality.value > majority_token_rate(workloads.get(name).make_data("tiny", 0))
    else:
        assert r.quality.value > 1 / workloads.get(name).make_data("tiny", 0).n_classes + 0.25
    assert r.peak_gpu_mb is not None and r.peak_gpu_mb > 0


def test_autoencoder_targets_are_its_inputs() -> None:
    wl = workloads.get("conv_autoencoder")
    x, y, x_test, y_test = wl.tensors(wl.make_data("tiny", 0))
    assert y is x and y_test is x_test
    assert float(x.min()) >= 0.0 and float(x.max()) <= 1.0  # the decoder ends in a sigmoid


@pytest.mark.parametrize("name", DL)
def test_same_seed_same_bytes_other_seed_other_data(name: str) -> None:
    wl = workloads.get(name)
    a, b, c = wl.make_data("tiny", 0), wl.make_data("tiny", 0), wl.make_data("tiny", 1)
    for field in ("x_train", "y_train", "x_test", "y_test"):
        assert getattr(a, field).tobytes() == getattr(b, field).tobytes(), field
    assert a.x_train.tobytes() != c.x_train.tobytes()


@pytest.mark.parametrize("name", DL)
def test_held_out_inputs_are_never_training_inputs(name: str) -> None:
    data = workloads.get(name).make_data("tiny", 0)
    train = {row.tobytes() for row in data.x_train}
    assert not any(row.tobytes() in train for row in data.x_test)
    from parabench.workloads.cnn import EXTRA_HELD_OUT  # cnn holds out more images, drawn apart

    split = len(data.x_test) - (EXTRA_HELD_OUT.get("tiny", 0) if name == "cnn" else 0)
    assert 0.15 <= split / (len(data.x_train) + split) <= 0.25


def test_synthetic_classes_are_balanced_and_text_is_padded_token_ids() -> None:
    images = workloads.get("cnn").make_data("tiny", 0)
    counts = np.bincount(images.y_train, minlength=10)
    assert images.x_train.dtype == np.uint8 and images.x_train.shape[1:] == (1, 28, 28)
    assert counts.min() > 0.7 * counts.mean()
    text = workloads.get("nbow").make_data("tiny", 0)
    assert text.x_train.dtype == np.int64 and text.x_train.max() < len(text.vocab)
    assert (text.x_train[:, -1] == 0).any() and (text.x_train[:, 0] != 0).all()


def test_seq2seq_targets_are_the_reversed_sources() -> None:
    data = workloads.get("seq2seq").make_data("tiny", 0)
    for src, tgt in zip(data.x_train[:50], data.y_train[:50], strict=True):
        words = src[src != 0]
        assert tgt[0] == data.bos_id and tgt[len(words) + 1] == data.eos_id
        assert (tgt[1 : len(words) + 1] == words[::-1]).all()


def test_image_sides_follow_the_profile() -> None:
    from parabench.workloads import densenet121, vgg11

    assert [densenet121.SIZES[p][1] for p in ("tiny", "quick", "full")] == [32, 64, 224]
    assert [vgg11.SIZES[p][1] for p in ("tiny", "quick", "full")] == [32, 32, 224]
    assert workloads.get("densenet121").make_data("tiny", 0).x_train.shape[1:] == (3, 32, 32)


@pytest.mark.parametrize("name", STAGED)
def test_sequential_view_computes_the_model_with_its_parameters(name: str) -> None:
    import torch

    wl = workloads.get(name)
    data = wl.make_data("tiny", 0)
    model = wl.build_model(data, 0).eval()
    seq = wl.sequential(model)
    assert isinstance(seq, torch.nn.Sequential) and len(seq) >= 2
    assert {id(p) for p in seq.parameters()} == {id(p) for p in model.parameters()}
    x = wl.tensors(data)[2][:4]
    with torch.no_grad():
        assert torch.equal(seq(x), model(x))


def test_seq2seq_has_no_sequential_view() -> None:
    wl = workloads.get("seq2seq")
    assert wl.sequential(wl.build_model(wl.make_data("tiny", 0), 0)) is None


def images(side: int, channels: int = 3, n: int = 4) -> Dataset:
    x = np.zeros((n, channels, side, side), np.uint8)
    return Dataset(x_train=x, y_train=np.arange(n) % 2, x_test=x[:2], y_test=np.arange(2),
                   n_classes=2)


@pytest.mark.parametrize(("side", "features"), [(32, 512), (64, 512 * 4), (224, 512 * 49)])
def test_vgg11_classifier_is_sized_for_the_input(side: int, features: int) -> None:
    import torch

    with torch.device("meta"):  # shapes only: the 224 classifier alone is 400 MB
        model = workloads.get("vgg11").build_model(images(side), 0)
    assert model.classifier[0].in_features == features
    if side == 224:  # torchvision's own head: 7x7 average pool, 4096 wide
        assert model.classifier[0].out_features == 4096


@pytest.mark.parametrize(
    ("name", "shape", "needed"),
    [
        ("vgg11", (3, 8, 8), "H, W >= 32"),
        ("densenet121", (3, 16, 16), "H, W >= 32"),
        ("cnn", (3, 28, 28), "1xHxW"),
        ("conv_autoencoder", (1, 30, 30), "divisible by 4"),
    ],
)
def test_impossible_image_shapes_say_what_is_needed(
    name: str, shape: tuple[int, ...], needed: str
) -> None:
    with pytest.raises(ConfigError, match="x".join(map(str, shape))) as err:
        workloads.get(name).build_model(images(shape[1], shape[0]), 0)
    assert needed in str(err.value)


@pytest.mark.parametrize("name", DL)
def test_an_empty_data_dir_is_a_config_error_naming_it(name: str, tmp_path: Path) -> None:
    # no dataset of any kind (and a directory where text workloads want a file)
    with pytest.raises(ConfigError, match=str(tmp_path)):
        workloads.get(name).make_data("tiny", 0, data_dir=str(tmp_path))


# --- real formats, through the loaders (tests/datafiles.py writes the tiny files) -------------


def test_cnn_and_autoencoder_train_on_mnist_idx_files(tmp_path: Path) -> None:
    from datafiles import write_mnist

    root = write_mnist(tmp_path, 300, n_test=60)
    r = run("cnn", epochs=2, data_dir=str(root))
    assert r.samples_per_epoch == 300 and r.quality.value > 0.5
    before = r.loss[0]
    r = run("conv_autoencoder", epochs=2, data_dir=str(root))
    assert r.loss[-1] < before and r.samples_per_epoch == 300


def test_vgg11_trains_on_cifar10_batches_and_on_an_image_folder(tmp_path: Path) -> None:
    from datafiles import write_cifar10, write_image_folder

    r = run("vgg11", data_dir=str(write_cifar10(tmp_path / "cifar", 80, n_test=20)))
    assert r.samples_per_epoch == 80
    r = run("vgg11", data_dir=str(write_image_folder(tmp_path / "folder", 2, 12, 20)))
    assert r.samples_per_epoch == 20  # 24 images, a fifth of each class held out


def test_vgg11_with_no_dataset_names_both_layouts(tmp_path: Path) -> None:
    r = execute(RunConfig(workload="vgg11", method="serial", profile="tiny", epochs=1,
                          options={"data_dir": str(tmp_path)}))
    assert r.status == "failed" and "DatasetError" in r.reason
    assert "cifar-10-batches-py" in r.reason and "class" in r.reason


def test_densenet121_trains_on_an_imagenette_tree(tmp_path: Path) -> None:
    from datafiles import write_image_folder

    root = write_image_folder(tmp_path, 3, 8, 24, split=True, n_val=2, fmt="jpeg")
    r = run("densenet121", data_dir=str(root))
    assert r.samples_per_epoch == 24


def test_nbow_trains_on_a_labelled_text_file(tmp_path: Path) -> None:
    from datafiles import write_labeled_text

    path = write_labeled_text(tmp_path / "reviews.tsv", 400)
    r = run("nbow", epochs=3, data_dir=str(path))
    assert r.quality.value > 0.75  # two classes, each with its own keywords


def test_seq2seq_trains_on_a_pairs_file(tmp_path: Path) -> None:
    from datafiles import write_text_pairs
    from parabench.workloads.datasets import load_text_pairs

    path = write_text_pairs(tmp_path / "pairs.tsv", 600)
    data = load_text_pairs(str(path), seed=0, max_len=8)
    r = run("seq2seq", epochs=2, data_dir=str(path))
    assert r.quality.value > majority_token_rate(data) + 0.1


@pytest.mark.parametrize(("name", "first", "layers"), [("vgg11", 64, 8), ("densenet121", 64, 120)])
def test_tiny_is_the_same_architecture_a_quarter_as_wide(name: str, first: int,
                                                         layers: int) -> None:
    """tiny divides every width by 4 (seconds, not minutes); quick keeps the real widths;
    the layers (convolutions, BatchNorms) and the stage view stay the same."""
    import torch
    from torch import nn

    wl = workloads.get(name)
    with torch.device("meta"):
        tiny = wl.build_model(wl.make_data("tiny", 0), 0)
        quick = wl.build_model(dataclasses.replace(wl.make_data("tiny", 0), profile="quick"), 0)

    def convs(model: nn.Module) -> list[nn.Conv2d]:
        return [m for m in model.modules() if isinstance(m, nn.Conv2d)]

    assert len(convs(tiny)) == len(convs(quick)) == layers
    assert convs(quick)[0].out_channels == first and convs(tiny)[0].out_channels == first // 4
    assert sum(isinstance(m, nn.BatchNorm2d) for m in tiny.modules()) == sum(
        isinstance(m, nn.BatchNorm2d) for m in quick.modules())
    assert len(wl.sequential(tiny)) == len(wl.sequential(quick))
    params = [sum(p.numel() for p in m.parameters()) for m in (tiny, quick)]
    assert params[0] < params[1] / 8, params


def test_small_vgg11_is_torchvisions_recipe() -> None:
    """The hand-built tiny/quick VGG-11-BN: torchvision's layers (names, shapes, init) with the
    512-wide classifier, built without torchvision's 224 classifier."""
    import torch
    from torch import nn
    from torchvision.models import vgg11_bn

    from parabench.workloads.vgg11 import small_vgg11_bn

    reference = vgg11_bn(weights=None, num_classes=10, dropout=0.0)
    reference.classifier = nn.Sequential(nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 512),
                                         nn.ReLU(), nn.Linear(512, 10))
    ours = small_vgg11_bn(cells=1, classes=10)
    shapes = {k: v.shape for k, v in ours.state_dict().items()}
    assert shapes == {k: v.shape for k, v in reference.state_dict().items()}
    conv = ours.features[0]
    assert isinstance(conv, nn.Conv2d) and float(conv.bias.abs().sum()) == 0.0
    std = (2.0 / (64 * 9)) ** 0.5  # kaiming_normal_, fan_out, relu: torchvision's VGG init
    assert abs(float(conv.weight.std()) - std) < 0.2 * std
    assert ours(torch.zeros(2, 3, 32, 32)).shape == (2, 10)
