"""``vgg11``: torchvision's VGG-11 with batch norm, its classifier sized for the input.

Usage::

    parabench run --method serial --workload vgg11 --profile quick
    parabench run --method serial --workload vgg11 --data-dir ~/data   # CIFAR-10 or folders

``torchvision.models.vgg11_bn(weights=None)`` (nothing is downloaded). Its five max-pools
divide the side by 32, so images must be at least 32x32. At 224x224 (full profile) the model
is torchvision's as is: 7x7 average pool and the 4096-wide classifier. Below that the
feature map is only (side / 32)^2 cells, so the 7x7 pool would just repeat them: it is
dropped and the classifier is 512-wide (as in the CIFAR versions of VGG). Dropout is set to
0 so every method draws the same computation (exact parity with serial stays possible).

Below 224 the model is built here (:func:`small_vgg11_bn`): torchvision's VGG-11-BN layer
recipe and initialisation with the 512-wide classifier, without importing torchvision and
initialising the 120 M-parameter 224 classifier only to replace it (seconds of a tiny
case's start-up; the measurement is in docs/measurements.md).

At tiny every width is a quarter (16 .. 128 channels, a 128-wide classifier): the same 11
layers, ~1/16 of the arithmetic, so the tiny smoke test takes seconds (full width's tiny
epoch: docs/measurements.md). quick and full keep VGG-11's widths.

Data: 3x32x32 synthetic class templates at tiny/quick, 3x224x224 at full; with
``--data-dir``, CIFAR-10 python batches (``DIR/cifar-10-batches-py``) or any class-per-folder
image tree, resized to the profile's side. Chance is 1 / classes (10 %).
"""

from __future__ import annotations

import functools
import os
from typing import TYPE_CHECKING, ClassVar

from parabench.registry import workloads
from parabench.workload import Dataset
from parabench.workloads.images import ImageClassifierWorkload
from parabench.workloads.synthetic import check_images

if TYPE_CHECKING:
    import torch

#: profile -> (synthetic samples, image side, pixel noise, class separation). tiny is
#: easy enough to learn in one short epoch; from quick on the classes share most of their
#: template, so accuracy climbs over several epochs instead of saturating in the first.
SIZES: dict[str, tuple[int, int, float, float]] = {
    "tiny": (960, 32, 0.35, 1.0),
    "quick": (5_000, 32, 0.9, 0.4),
    "full": (12_000, 224, 0.9, 0.4),
}


@workloads.register
class VGG11(ImageClassifierWorkload):
    name: ClassVar[str] = "vgg11"
    #: BatchNorm layers: a split batch is graded statistical (split_batch_grading)
    batchnorm: ClassVar[bool] = True
    tiny_epoch_guess_s: ClassVar[float | None] = 2.5
    smoke_rank: ClassVar[int | None] = 6
    #: serial, quick profile, 3 epochs (README): the default --target-quality's basis
    reference_quality: ClassVar[float | None] = 0.859
    sizes: ClassVar[dict[str, tuple[int, int, float, float]]] = SIZES
    description: ClassVar[str] = "torchvision vgg11_bn, 3x32x32 (224 at full), 10 classes"
    narrow: ClassVar[dict[str, int]] = {"tiny": 4}

    def load_local(self, data_dir: str, side: int, seed: int) -> Dataset:
        """CIFAR-10's python batches, or an image folder resized to ``side``."""
        from parabench.workloads.datasets import DatasetError, load_cifar10

        root = os.path.expanduser(data_dir)
        cifar = ("cifar-10-batches-py", "data_batch_1")
        if any(os.path.exists(os.path.join(root, name)) for name in cifar):
            return load_cifar10(root)
        try:
            return super().load_local(root, side, seed)
        except DatasetError as e:  # say that CIFAR-10 would have done as well
            raise DatasetError(
                f"{e}; or CIFAR-10 python batches in {os.path.join(root, cifar[0])}"
            ) from e

    def default_batch_size(self, profile: str) -> int | None:
        return 16 if profile == "tiny" else 64  # tiny: enough steps to learn in one epoch

    def build_model(self, data: Dataset, seed: int) -> torch.nn.Module:
        import torch

        check_images(self.name, data, channels=3, min_size=32)
        classes = data.n_classes or int(data.y_train.max()) + 1
        torch.manual_seed(seed)
        if min(data.x_train.shape[2:]) >= 7 * 32:
            from torchvision.models import vgg11_bn

            return vgg11_bn(weights=None, num_classes=classes, dropout=0.0)
        cells = (data.x_train.shape[2] // 32) * (data.x_train.shape[3] // 32)
        return small_vgg11_bn(cells, classes, self.divisor(data))

    def sequential(self, model: torch.nn.Module) -> torch.nn.Sequential:
        """features..., avgpool, flatten, classifier...: what ``VGG.forward`` does, in order."""
        from torch import nn

        return nn.Sequential(
            *model.features, model.avgpool, nn.Flatten(1), *model.classifier
        )


#: VGG-11 ("A"): conv widths, "M" a 2x2 max-pool (torchvision's ``cfgs["A"]``)
LAYERS: tuple[int | str, ...] = (64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M")


def small_vgg11_bn(cells: int, classes: int, divisor: int = 1) -> torch.nn.Module:
    """VGG-11-BN for sides below 224: ``features``, ``avgpool`` (identity), ``classifier``
    (512-wide, PyTorch's default Linear init), named and initialised as torchvision's; every
    width divided by ``divisor`` (tiny: 4)."""
    from torch import nn

    layers: list[nn.Module] = []
    channels = 3
    for width in LAYERS:
        if width == "M":
            layers.append(nn.MaxPool2d(kernel_size=2, stride=2))
            continue
        assert isinstance(width, int)
        width //= divisor
        conv = nn.Conv2d(channels, width, kernel_size=3, padding=1)
        nn.init.kaiming_normal_(conv.weight, mode="fan_out", nonlinearity="relu")
        nn.init.zeros_(conv.bias)
        layers += [conv, nn.BatchNorm2d(width), nn.ReLU(inplace=True)]
        channels = width
    wide = 512 // divisor
    return _small_vgg_class()(nn.Sequential(*layers), nn.Sequential(
        nn.Linear(wide * cells, wide), nn.ReLU(inplace=True),
        nn.Linear(wide, wide), nn.ReLU(inplace=True),
        nn.Linear(wide, classes)))


@functools.cache
def _small_vgg_class() -> type:
    from torch import nn

    class SmallVGG(nn.Module):
        def __init__(self, features: nn.Sequential, classifier: nn.Sequential) -> None:
            super().__init__()
            self.features, self.avgpool, self.classifier = features, nn.Identity(), classifier

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.classifier(self.avgpool(self.features(x)).flatten(1))

    return SmallVGG
