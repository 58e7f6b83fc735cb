"""Image datasets from a local path, read by torchvision's own readers (nothing downloaded).

Usage::

    from parabench.datasets import load_cifar10, load_image_folder, load_mnist

    data = load_mnist("~/data")            # x uint8 (N, 1, 28, 28), official train/test split
    data = load_cifar10("~/data")          # x uint8 (N, 3, 32, 32), official train/test split
    data = load_image_folder("~/imagenette2-160", size=64, seed=0)   # x uint8 (N, 3, 64, 64)

Every problem with the files (missing, wrong layout, wrong magic number, truncated, cannot be
decoded, one class only) is a :class:`DatasetError` naming the path and the expected layout.
"""

from __future__ import annotations

import gzip
import os
import pickle
import shutil
import tempfile
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from parabench.datasets.common import DatasetError, require_classes, stratified_split
from parabench.workload import Dataset

MNIST_FILES = {  # name -> idx magic number (uint8 data; 3 dims for images, 1 for labels)
    "train-images-idx3-ubyte": 0x00000803,
    "train-labels-idx1-ubyte": 0x00000801,
    "t10k-images-idx3-ubyte": 0x00000803,
    "t10k-labels-idx1-ubyte": 0x00000801,
}
CIFAR_FOLDER = "cifar-10-batches-py"
CIFAR_FILES = tuple(f"data_batch_{i}" for i in range(1, 6)) + ("test_batch",)
IMAGE_SPLITS = ("train", "val")


def mnist_layout(root: str) -> str:
    return (
        f"expected MNIST idx files in {os.path.join(root, 'MNIST', 'raw')}: "
        f"{', '.join(MNIST_FILES)} (torchvision's layout; each may also be gzipped as NAME.gz, "
        f"and the folder may be {root} itself or {os.path.join(root, 'raw')})"
    )


def cifar_layout(root: str) -> str:
    return (
        f"expected the CIFAR-10 python batches in {os.path.join(root, CIFAR_FOLDER)}: "
        f"{', '.join(CIFAR_FILES)} (+ optional batches.meta), as unpacked from "
        "cifar-10-python.tar.gz"
    )


def image_folder_layout(root: str) -> str:
    return (
        f"expected an Imagenette-style tree {root}/train/<class>/*.JPEG + "
        f"{root}/val/<class>/*.JPEG "
        f"(same class folders in both), or one class-per-folder tree {root}/<class>/<image> "
        "(.jpg .jpeg .png .ppm .bmp .pgm .tif .tiff .webp) split by seed"
    )


def _existing_dir(root: str, layout: str) -> str:
    root = os.path.expanduser(str(root))
    if not os.path.isdir(root):
        raise DatasetError(f"{root}: no such directory; {layout}")
    return root


# ---- MNIST ---------------------------------------------------------------------------------


def load_mnist(root: str) -> Dataset:
    """MNIST's official 60k/10k split from idx files (plain or gzip) under ``root``."""
    root = _existing_dir(root, mnist_layout(str(root)))
    files = _find_mnist_files(root)
    for name, path in files.items():
        _check_idx_magic(path, MNIST_FILES[name], mnist_layout(root))
    with tempfile.TemporaryDirectory(prefix="parabench-mnist-") as tmp:
        raw_dir = _uncompressed_dir(files, tmp)
        x_train, y_train = _read_mnist_split(raw_dir, train=True, root=root)
        x_test, y_test = _read_mnist_split(raw_dir, train=False, root=root)
    return Dataset(x_train=x_train, y_train=y_train, x_test=x_test, y_test=y_test, n_classes=10)


def _find_mnist_files(root: str) -> dict[str, str]:
    """The four idx files from the first candidate folder that holds any of them."""
    for folder in (os.path.join(root, "MNIST", "raw"), os.path.join(root, "raw"), root):
        found = {name: _plain_or_gz(os.path.join(folder, name)) for name in MNIST_FILES}
        present = {name: path for name, path in found.items() if path is not None}
        if len(present) == len(MNIST_FILES):
            return present
        if present:
            missing = sorted(set(MNIST_FILES) - set(present))
            raise DatasetError(f"{folder}: missing {', '.join(missing)}; {mnist_layout(root)}")
    raise DatasetError(f"{root}: no MNIST idx files found; {mnist_layout(root)}")


def _plain_or_gz(path: str) -> str | None:
    for candidate in (path, path + ".gz"):
        if os.path.isfile(candidate):
            return candidate
    return None


def _open_maybe_gz(path: str):  # noqa: ANN202 - a binary file object either way
    return gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb")


def _check_idx_magic(path: str, magic: int, layout: str) -> None:
    # torchvision derives the dtype and rank from these 4 bytes and trusts them blindly
    try:
        with _open_maybe_gz(path) as f:
            head = f.read(4)
    except OSError as e:  # gzip.BadGzipFile is an OSError
        raise DatasetError(f"{path}: cannot be read ({e}); {layout}") from e
    if int.from_bytes(head, "big") != magic or len(head) < 4:
        raise DatasetError(
            f"{path}: not an idx file of this kind (magic {head.hex() or 'missing'}, "
            f"expected {magic:08x}); {layout}"
        )


def _uncompressed_dir(files: dict[str, str], tmp: str) -> str:
    """The folder torchvision reads: the original one, or ``tmp`` with .gz files inflated."""
    if not any(path.endswith(".gz") for path in files.values()):
        return os.path.dirname(next(iter(files.values())))
    for name, path in files.items():
        with _open_maybe_gz(path) as src, open(os.path.join(tmp, name), "wb") as dst:
            shutil.copyfileobj(src, dst)
    return tmp


def _read_mnist_split(raw_dir: str, *, train: bool, root: str) -> tuple[np.ndarray, np.ndarray]:
    from parabench.datasets._torchvision import LocalMNIST

    split = "train" if train else "t10k"
    try:
        ds = LocalMNIST(raw_dir, train=train)
    except (RuntimeError, ValueError, TypeError, KeyError, AssertionError, EOFError) as e:
        raise DatasetError(
            f"{root}: the {split} idx files are malformed or truncated ({e}); {mnist_layout(root)}"
        ) from e
    x, y = ds.data.numpy(), ds.targets.numpy().astype(np.int64)
    where = f"{root}: {split} idx files"
    _check_labels(x, y, 10, where, mnist_layout(root))
    if x.shape[1:] != (28, 28):
        raise DatasetError(
            f"{where}: images are {x.shape[1:]}, expected 28x28; {mnist_layout(root)}"
        )
    return np.ascontiguousarray(x[:, None]), y


def _check_labels(x: np.ndarray, y: np.ndarray, n_classes: int, where: str, layout: str) -> None:
    if len(x) != len(y):
        raise DatasetError(f"{where}: {len(x)} images but {len(y)} labels; {layout}")
    if len(y) == 0:
        raise DatasetError(f"{where}: no samples; {layout}")
    if y.min() < 0 or y.max() >= n_classes:
        raise DatasetError(f"{where}: labels outside 0..{n_classes - 1}; {layout}")


# ---- CIFAR-10 ------------------------------------------------------------------------------


def load_cifar10(root: str) -> Dataset:
    """CIFAR-10's official 50k/10k split from ``root/cifar-10-batches-py`` (or ``root``)."""
    root = _existing_dir(root, cifar_layout(str(root)))
    layout = cifar_layout(root)
    base = CIFAR_FOLDER if os.path.isdir(os.path.join(root, CIFAR_FOLDER)) else ""
    folder = os.path.join(root, base)
    missing = [name for name in CIFAR_FILES if not os.path.isfile(os.path.join(folder, name))]
    if missing:
        raise DatasetError(f"{folder}: missing {', '.join(missing)}; {layout}")
    x_train, y_train, n_classes = _read_cifar_split(root, base, train=True, layout=layout)
    x_test, y_test, _ = _read_cifar_split(root, base, train=False, layout=layout)
    return Dataset(
        x_train=x_train, y_train=y_train, x_test=x_test, y_test=y_test, n_classes=n_classes
    )


def _read_cifar_split(
    root: str, base: str, *, train: bool, layout: str
) -> tuple[np.ndarray, np.ndarray, int]:
    from parabench.datasets._torchvision import LocalCIFAR10

    where = os.path.join(root, base, "data_batch_1..5" if train else "test_batch")
    try:
        ds = LocalCIFAR10(root, base_folder=base, train=train)
    except (pickle.UnpicklingError, EOFError, KeyError, ValueError, TypeError, IndexError,
            AttributeError) as e:
        raise DatasetError(f"{where}: not a CIFAR-10 python batch ({e!r}); {layout}") from e
    # torchvision hands out HWC for PIL; the models take CHW
    x = np.ascontiguousarray(np.asarray(ds.data, dtype=np.uint8).transpose(0, 3, 1, 2))
    y = np.asarray(ds.targets, dtype=np.int64)
    _check_labels(x, y, len(ds.classes), where, layout)
    return x, y, len(ds.classes)


# ---- Image folders (Imagenette or any class-per-folder tree) --------------------------------


def load_image_folder(root: str, size: int, seed: int, test_fraction: float = 0.2) -> Dataset:
    """Class-per-folder images, shorter side resized to ``size`` then centre-cropped square.

    ``root/train`` + ``root/val`` is taken as the official split (Imagenette); any other tree
    of class folders is split by ``seed``, ``test_fraction`` of each class held out. Samples
    come back in a seeded shuffled order either way (ImageFolder lists them class by class).
    """
    root = _existing_dir(root, image_folder_layout(str(root)))
    layout = image_folder_layout(root)
    if size < 1:
        raise DatasetError(f"image size must be at least 1, got {size}")
    splits = [name for name in IMAGE_SPLITS if os.path.isdir(os.path.join(root, name))]
    if len(splits) == 1:
        raise DatasetError(
            f"{root}: has {splits[0]}/ but not the other of train/ and val/; {layout}"
        )
    rng = np.random.default_rng(seed)
    if splits:
        train_dir, val_dir = (os.path.join(root, name) for name in IMAGE_SPLITS)
        # the same class folders on both sides, or one class id would mean two classes
        if (classes := _class_folders(train_dir)) != (val_classes := _class_folders(val_dir)):
            raise DatasetError(
                f"{root}: train/ has classes {classes} but val/ has {val_classes}; {layout}"
            )
        x_train, y_train, _ = _read_image_tree(train_dir, size, layout)
        x_test, y_test, _ = _read_image_tree(val_dir, size, layout)
        tr, te = rng.permutation(len(y_train)), rng.permutation(len(y_test))
        return Dataset(x_train=x_train[tr], y_train=y_train[tr], x_test=x_test[te],
                       y_test=y_test[te], n_classes=len(classes))
    x, y, classes = _read_image_tree(root, size, layout)
    tr, te = stratified_split(y, seed=seed, test_fraction=test_fraction, where=root,
                              layout=layout)
    return Dataset(x_train=x[tr], y_train=y[tr], x_test=x[te], y_test=y[te],
                   n_classes=len(classes))


def _class_folders(folder: str) -> list[str]:
    """Class names as ImageFolder finds them: the sorted sub-folder names."""
    return sorted(entry.name for entry in os.scandir(folder) if entry.is_dir())


def _read_image_tree(
    folder: str, size: int, layout: str
) -> tuple[np.ndarray, np.ndarray, Sequence[str]]:
    from torchvision import transforms
    from torchvision.datasets import ImageFolder

    transform = transforms.Compose(
        [transforms.Resize(size), transforms.CenterCrop(size), transforms.PILToTensor()]
    )
    try:
        ds = ImageFolder(folder, transform=transform)
    except FileNotFoundError as e:  # no class folders, or class folders without images
        raise DatasetError(f"{folder}: {e}; {layout}") from e
    require_classes(len(ds.classes), folder, layout)
    x = np.empty((len(ds), 3, size, size), dtype=np.uint8)

    def decode(i: int) -> None:
        try:
            x[i] = ds[i][0].numpy()
        except (OSError, ValueError, SyntaxError) as e:  # PIL: unidentified / truncated image
            raise DatasetError(f"{ds.samples[i][0]}: cannot decode ({e}); {layout}") from e

    # PIL decodes and resizes outside the GIL, so threads scale on a many-core machine
    with ThreadPoolExecutor(max_workers=min(8, os.cpu_count() or 1)) as pool:
        list(pool.map(decode, range(len(ds))))
    y = np.asarray(ds.targets, dtype=np.int64)
    return x, y, list(ds.classes)
