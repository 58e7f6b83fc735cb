"""torchvision's own dataset readers, pointed at a layout we have already checked.

Usage (from :mod:`parabench.workloads.datasets.vision` only; importing this module imports
torchvision)::

    mnist = LocalMNIST(raw_dir, train=True)     # raw_dir: the four idx files, already checked
    images, labels = mnist.data, mnist.targets

The subclass changes where the files are looked for and how their presence is checked, and
nothing else: parsing stays torchvision's (``read_image_file`` / ``read_label_file``). CIFAR-10
is not read through torchvision: its reader unpickles batch files with the plain unpickler
once the md5 check is off; :mod:`parabench.workloads.datasets.vision` reads them with a
restricted one.
"""

from __future__ import annotations

import os

from torchvision.datasets import MNIST


class LocalMNIST(MNIST):
    """MNIST read from ``raw_dir`` (the four uncompressed idx files), never downloaded."""

    def __init__(self, raw_dir: str, *, train: bool) -> None:
        self._raw_dir = raw_dir
        super().__init__(raw_dir, train=train, download=False)

    @property
    def raw_folder(self) -> str:
        return self._raw_dir

    def _check_legacy_exist(self) -> bool:
        return False  # one code path: the idx files, not an old torch.save cache beside them

    def _check_exists(self) -> bool:
        return all(
            os.path.isfile(os.path.join(self._raw_dir, os.path.splitext(name)[0]))
            for name, _ in self.resources
        )
