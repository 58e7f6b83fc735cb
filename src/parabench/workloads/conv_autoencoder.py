"""``conv_autoencoder``: a convolutional encoder/decoder that reconstructs 1x28x28 images.

Usage::

    parabench run --method serial --workload conv_autoencoder --profile quick
    parabench run --method serial --workload conv_autoencoder --data-dir ~/data   # MNIST

Encoder: two stride-2 convolutions (28 -> 14 -> 7) and a 7x7 convolution down to a 64-number
code; decoder: the mirror image in transposed convolutions back to 28x28, then a sigmoid; all
one ``nn.Sequential``. The code is far smaller than the image, so the model has to learn the
data's structure rather than copy pixels. Pixels are scaled to [0, 1] and the
targets *are* the inputs (``tensors`` returns the same tensor object for x and y, so a
loader keeps one copy). Loss and quality are the mean squared reconstruction error (lower
is better); a useful reference is the error of the untrained model.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, ClassVar

from parabench.config import OptionSpec
from parabench.registry import workloads
from parabench.workload import CHANNELS_LAST, DATA_DIR, Dataset, Quality, TorchWorkload
from parabench.workloads.cnn import SIZES, load_digits
from parabench.workloads.synthetic import check_images, image_tensors, image_train_size

if TYPE_CHECKING:
    from collections.abc import Callable

    import torch

#: width of the bottleneck code (an image is 784 numbers)
CODE = 64


@workloads.register
class ConvAutoencoder(TorchWorkload):
    name: ClassVar[str] = "conv_autoencoder"
    tiny_epoch_guess_s: ClassVar[float | None] = 8.0
    smoke_rank: ClassVar[int | None] = 4
    #: serial, quick profile, 3 epochs (README): the default --target-quality's basis
    reference_quality: ClassVar[float | None] = 0.013
    options: ClassVar[Mapping[str, OptionSpec]] = {"data_dir": DATA_DIR,  # real loader
                                                   "channels_last": CHANNELS_LAST}
    description: ClassVar[str] = "conv encoder/decoder reconstructing 1x28x28 images (MSE)"
    quality: ClassVar[Quality] = Quality(name="reconstruction_mse", higher_is_better=False,
                                         bounds=(0, float("inf")))
    lr: ClassVar[float] = 3e-3

    def make_data(self, profile: str, seed: int, data_dir: str | None = None) -> Dataset:
        # less pixel noise than cnn's: noise cannot be reconstructed, shapes can
        return load_digits(profile, seed, data_dir, noise=0.15)

    def train_size(self, profile: str) -> int | None:
        return image_train_size(SIZES[profile][0])

    def tensors(self, data: Dataset) -> tuple[torch.Tensor, ...]:
        x, _, x_test, _ = image_tensors(data, standardise=False)  # [0, 1], like the sigmoid
        return x, x, x_test, x_test

    def loss_fn(self) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
        import torch

        return torch.nn.functional.mse_loss

    def make_optimizer(self, params: object) -> torch.optim.Optimizer:
        import torch

        return torch.optim.Adam(params, lr=self.lr)  # type: ignore[arg-type]

    def score(self, outputs: torch.Tensor, targets: torch.Tensor) -> float:
        import torch

        return float(torch.nn.functional.mse_loss(outputs.float(), targets.float()).item())

    def build_model(self, data: Dataset, seed: int) -> torch.nn.Module:
        import torch
        from torch import nn

        # two stride-2 stages down and back up: only sizes divisible by 4 come back whole
        check_images(self.name, data, channels=1, min_size=8, multiple=4)
        cells = data.x_train.shape[2] // 4, data.x_train.shape[3] // 4
        torch.manual_seed(seed)
        return nn.Sequential(
            nn.Conv2d(1, 16, 3, stride=2, padding=1),
            nn.ReLU(),
            nn.Conv2d(16, 32, 3, stride=2, padding=1),
            nn.ReLU(),
            nn.Conv2d(32, CODE, cells),  # the code: CODE numbers per image
            nn.ReLU(),
            nn.ConvTranspose2d(CODE, 32, cells),
            nn.ReLU(),
            nn.ConvTranspose2d(32, 16, 3, stride=2, padding=1, output_padding=1),
            nn.ReLU(),
            nn.ConvTranspose2d(16, 1, 3, stride=2, padding=1, output_padding=1),
            nn.Sigmoid(),
        )
