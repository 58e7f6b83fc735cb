"""Image datasets from a local path (nothing downloaded): MNIST and image folders through
torchvision's own readers, CIFAR-10 through a pickle reader that resolves no code.

Usage::

    from parabench.workloads.datasets import load_cifar10, load_image_folder, load_mnist

    data = load_mnist("~/data")            # x uint8 (N, 1, 28, 28), official train/test split
    data = load_cifar10("~/data")          # x uint8 (N, 3, 32, 32), official train/test split
    data = load_image_folder("~/imagenette2-160", size=64, seed=0)   # x uint8 (N, 3, 64, 64)

Every problem with the files (missing, wrong layout, wrong magic number, truncated, cannot be
decoded, one class only) is a :class:`DatasetError` naming the path and the expected layout.

CIFAR-10's python batches are pickles, and unpickling runs whatever callables a file names.
torchvision guards them with the official release's md5 sums, which would also refuse every
other valid batch (a subset, a re-export, the tests' tiny files). Here every batch file,
official or not, goes through an unpickler that resolves nothing but NumPy's array rebuilders
(:class:`_BatchUnpickler`), so a file is read as data or refused with the reason
("it references posix.system, which a CIFAR-10 batch never holds ..."): no file can run code,
and no opt-out switch exists that could be left on.
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

from parabench.workload import Dataset
from parabench.workloads.datasets.common import DatasetError, require_classes, stratified_split

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
    from parabench.workloads.datasets._torchvision import LocalMNIST

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
    folder = os.path.join(root, base)
    names = CIFAR_FILES[:-1] if train else CIFAR_FILES[-1:]
    parts = [_read_cifar_batch(os.path.join(folder, name), layout) for name in names]
    where = os.path.join(folder, "data_batch_1..5" if train else "test_batch")
    x = np.concatenate([data for data, _ in parts]).reshape(-1, 3, 32, 32)  # rows are CHW
    y = np.concatenate([labels for _, labels in parts])
    n_classes = len(_cifar_classes(folder, layout))
    _check_labels(x, y, n_classes, where, layout)
    return np.ascontiguousarray(x), y, n_classes


class _BatchUnpickler(pickle.Unpickler):
    """Unpickles only what a CIFAR batch holds: containers, strings, numbers, NumPy arrays.

    A pickle can name any importable callable and have it called (``os.system`` is one
    line), so a batch file from an untrusted source could run code as the benchmark user.
    This reader resolves no global but NumPy's array/dtype rebuilders (which build data and
    call nothing else) and ``_codecs.encode`` (how protocol-2 pickles store bytes), so any
    file, official or not, is read as data or refused.
    """

    ALLOWED = frozenset({
        ("numpy", "ndarray"), ("numpy", "dtype"),
        ("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
        ("numpy.core.multiarray", "scalar"), ("numpy._core.multiarray", "scalar"),
        ("numpy.core.numeric", "_frombuffer"), ("numpy._core.numeric", "_frombuffer"),
        ("_codecs", "encode"),
    })

    def find_class(self, module: str, name: str) -> object:
        if (module, name) not in self.ALLOWED:
            raise pickle.UnpicklingError(
                f"it references {module}.{name}, which a CIFAR-10 batch never holds "
                "(unpickling it could run code), so it was not unpickled"
            )
        return super().find_class(module, name)


def _unpickle_batch(path: str, layout: str) -> object:
    try:
        with open(path, "rb") as f:
            return _BatchUnpickler(f, encoding="latin1").load()
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, IndexError, KeyError,
            AttributeError, MemoryError, OSError) as e:
        raise DatasetError(f"{path}: not a CIFAR-10 python batch ({e}); {layout}") from e


def _read_cifar_batch(path: str, layout: str) -> tuple[np.ndarray, np.ndarray]:
    """(uint8 rows of 3072 channel-major bytes, int64 labels) of one batch file."""
    entry = _unpickle_batch(path, layout)
    data = entry.get("data") if isinstance(entry, dict) else None
    labels = entry.get("labels") if isinstance(entry, dict) else None
    if not isinstance(data, np.ndarray) or data.dtype != np.uint8 or data.ndim != 2 \
            or data.shape[1] != 3072:
        got = f"{data.dtype} {data.shape}" if isinstance(data, np.ndarray) else type(data).__name__
        raise DatasetError(
            f"{path}: not a CIFAR-10 python batch ('data' must be uint8 rows of 3072 bytes, "
            f"got {got}); {layout}"
        )
    try:
        y = np.asarray(labels, dtype=np.int64).reshape(-1)
    except (TypeError, ValueError) as e:
        raise DatasetError(
            f"{path}: not a CIFAR-10 python batch ('labels' must be integers: {e}); {layout}"
        ) from e
    if len(y) != len(data):
        raise DatasetError(f"{path}: {len(data)} images but {len(y)} labels; {layout}")
    return data, y


def _cifar_classes(folder: str, layout: str) -> list[str]:
    """The class names from batches.meta; without it the ten ids stay anonymous."""
    path = os.path.join(folder, "batches.meta")
    if not os.path.isfile(path):
        return [str(i) for i in range(10)]
    meta = _unpickle_batch(path, layout)
    names = meta.get("label_names") if isinstance(meta, dict) else None
    if not isinstance(names, list) or not names:
        raise DatasetError(f"{path}: no 'label_names' list; {layout}")
    return [str(name) for name in names]


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
