"""Real datasets from a local path (the ``--data-dir`` option); nothing is ever downloaded.

Usage (in a workload's ``make_data``)::

    from parabench.workloads.datasets import load_mnist

    def make_data(self, profile, seed, data_dir=None):
        if data_dir is not None:
            return load_mnist(data_dir)
        ...

Loaders and the layout each expects:

==========================  ===========================================================
``load_mnist(root)``        ``root/MNIST/raw/{train,t10k}-{images-idx3,labels-idx1}-ubyte``
                            (or ``.gz``; or those files in ``root/raw`` or ``root``)
``load_cifar10(root)``      ``root/cifar-10-batches-py/{data_batch_1..5,test_batch}``
``load_image_folder(...)``  ``root/train/<class>/*`` + ``root/val/<class>/*`` (Imagenette),
                            or ``root/<class>/*`` split by seed
``load_labeled_text(...)``  a file of ``label<TAB>text`` lines
``load_text_pairs(...)``    a file of ``source<TAB>target`` lines
``load_char_text(...)``     a UTF-8 ``.txt`` file (or a directory of them): characters
==========================  ===========================================================

Image loaders go through torchvision's readers (``MNIST``, ``CIFAR10``, ``ImageFolder``) and
return uint8 ``x`` (N, C, H, W) with int64 labels; text loaders return a :class:`TextDataset`.
A missing or malformed dataset raises :class:`DatasetError` (a ``ConfigError``: the CLI
prints one line naming the path and the expected layout and exits 2). torch and torchvision
are imported only when an image loader runs.
"""

from __future__ import annotations

from parabench.workloads.datasets.chars import load_char_text
from parabench.workloads.datasets.common import DatasetError, TextDataset
from parabench.workloads.datasets.text import load_labeled_text, load_text_pairs, tokenize
from parabench.workloads.datasets.vision import load_cifar10, load_image_folder, load_mnist

__all__ = [
    "DatasetError",
    "TextDataset",
    "load_char_text",
    "load_cifar10",
    "load_image_folder",
    "load_labeled_text",
    "load_mnist",
    "load_text_pairs",
    "tokenize",
]
