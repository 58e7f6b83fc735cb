"""The shared shape of the torchvision image classifiers (``vgg11``, ``densenet121``).

Usage (a new image workload declares its sizes, model and stage sequence)::

    @workloads.register
    class ResNet18(ImageClassifierWorkload):
        name = "resnet18"
        sizes = {"tiny": (640, 32, 0.45, 1.0)}         # per profile: samples, side, noise,
                                                        # separation
        narrow = {"tiny": 4}                            # optional: a quarter of the widths
        def build_model(self, data, seed): ...
        def sequential(self, model): ...

Data is 3-channel, 10-class: seeded synthetic class images per profile, or an image folder
(``--data-dir``; a subclass may accept more layouts through :meth:`load_local`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING, ClassVar

from parabench.config import OptionSpec
from parabench.workload import CHANNELS_LAST, DATA_DIR, Dataset, TorchWorkload
from parabench.workloads.synthetic import class_images, image_tensors, image_train_size

if TYPE_CHECKING:
    import torch


class ImageClassifierWorkload(TorchWorkload):
    """Synthetic class images per profile, or a local dataset; tensors as images."""

    #: profile -> (synthetic samples, image side, pixel noise, class separation)
    sizes: ClassVar[dict[str, tuple[int, int, float, float]]]
    options: ClassVar[Mapping[str, OptionSpec]] = {"data_dir": DATA_DIR,  # real loader
                                                   "channels_last": CHANNELS_LAST}
    requires: ClassVar[frozenset[str]] = frozenset({"torch", "torchvision"})
    lr: ClassVar[float] = 0.02
    #: profile -> the model's width divisor (channels / divisor); 1 where unlisted. tiny is
    #: a smoke test that must take seconds: at full width one 3x32x32 sample of either model
    #: takes ~20 ms to train on 2 cores, 11 s for tiny's one epoch
    narrow: ClassVar[dict[str, int]] = {}

    def make_data(self, profile: str, seed: int, data_dir: str | None = None) -> Dataset:
        n, side, noise, separation = self.sizes[profile]
        if data_dir is None:
            data = class_images(
                n=n, classes=10, channels=3, size=side, seed=seed, noise=noise,
                separation=separation,
            )
        else:
            data = self.load_local(data_dir, side, seed)
        return dataclasses.replace(data, profile=profile)  # build_model reads the width

    def divisor(self, data: Dataset) -> int:
        """The width divisor of the model for ``data`` (:attr:`narrow` at its profile)."""
        return self.narrow.get(data.profile or "", 1)

    def load_local(self, data_dir: str, side: int, seed: int) -> Dataset:
        """A dataset from ``--data-dir``: an image folder, resized to ``side``."""
        from parabench.workloads.datasets import load_image_folder

        return load_image_folder(data_dir, size=side, seed=seed)

    def train_size(self, profile: str) -> int | None:
        return image_train_size(self.sizes[profile][0])

    def tensors(self, data: Dataset) -> tuple[torch.Tensor, ...]:
        return image_tensors(data)
