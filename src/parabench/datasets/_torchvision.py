"""torchvision's own dataset readers, pointed at a layout we have already checked.

Usage (from :mod:`parabench.datasets.vision` only; importing this module imports torchvision)::

    images, labels = LocalMNIST(raw_dir, train=True).data, ...
    cifar = LocalCIFAR10(root, base_folder="cifar-10-batches-py", train=False)

The subclasses change where the files are looked for and how their presence is checked, and
nothing else: parsing stays torchvision's (``read_image_file`` / ``read_label_file`` for idx,
the pickle reader for CIFAR). torchvision compares CIFAR files against the md5 sums of the
official release, which would reject any other valid batch file (a subset, a re-export, the
tiny files of the tests), so the integrity check is replaced by our layout check.
"""

from __future__ import annotations

import os
import pickle

from torchvision.datasets import CIFAR10, MNIST


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


class LocalCIFAR10(CIFAR10):
    """CIFAR-10 python batches under ``root/base_folder``; presence checked, md5 not."""

    def __init__(self, root: str, *, base_folder: str, train: bool) -> None:
        self.base_folder = base_folder
        super().__init__(root, train=train, download=False)

    def _check_integrity(self) -> bool:
        return all(
            os.path.isfile(os.path.join(self.root, self.base_folder, name))
            for name, _ in self.train_list + self.test_list
        )

    def _load_meta(self) -> None:
        # batches.meta only names the classes; without it the ten ids stay anonymous
        path = os.path.join(self.root, self.base_folder, self.meta["filename"])
        if os.path.isfile(path):
            with open(path, "rb") as f:
                self.classes = list(pickle.load(f, encoding="latin1")[self.meta["key"]])
        else:
            self.classes = [str(i) for i in range(10)]
        self.class_to_idx = {name: i for i, name in enumerate(self.classes)}
