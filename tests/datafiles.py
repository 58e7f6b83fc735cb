"""Tiny datasets written in each real on-disk format, learnable, for loader and workload tests.

Usage (pytest's rootdir puts ``tests/`` on ``sys.path``)::

    from datafiles import write_mnist

    root = write_mnist(tmp_path, 40)             # tmp_path/MNIST/raw/*-ubyte
    data = workloads.get("cnn").make_data("tiny", 0, data_dir=str(root))

Every writer is seeded (same arguments, same bytes) and returns the path to hand a loader.
The classes are easy to tell apart (a bright square at a class-specific place, a class
colour, class keywords, reversed sequences), so a model trained on them beats chance.
"""

from __future__ import annotations

import gzip
import pickle
from collections.abc import Sequence
from pathlib import Path

import numpy as np

MNIST_IMAGES, MNIST_LABELS = 0x00000803, 0x00000801
PALETTE = np.array(  # one RGB colour per class (10 classes at most for the image writers)
    [[230, 25, 75], [60, 180, 75], [255, 225, 25], [0, 130, 200], [245, 130, 48],
     [145, 30, 180], [70, 240, 240], [240, 50, 230], [210, 245, 60], [128, 128, 128]],
    dtype=np.int16,
)


def _labels(n: int, n_classes: int, rng: np.random.Generator) -> np.ndarray:
    """Every class present (when n >= n_classes), in shuffled order."""
    return rng.permutation(np.arange(n) % n_classes).astype(np.uint8)


def digit_images(labels: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """28x28 uint8 images: noise plus a bright 8x8 square whose place encodes the label."""
    x = rng.integers(0, 60, size=(len(labels), 28, 28), dtype=np.uint8)
    for i, c in enumerate(labels):
        r, col = 2 + (int(c) // 4) * 9, 1 + (int(c) % 4) * 7
        x[i, r : r + 8, col : col + 6] = 255
    return x


def write_idx(path: Path, array: np.ndarray, magic: int, *, gz: bool = False) -> Path:
    """An idx file: big-endian magic, one big-endian uint32 per dimension, raw uint8 data."""
    header = magic.to_bytes(4, "big") + b"".join(d.to_bytes(4, "big") for d in array.shape)
    payload = header + np.ascontiguousarray(array, dtype=np.uint8).tobytes()
    path = path.with_name(path.name + ".gz") if gz else path
    path.write_bytes(gzip.compress(payload, mtime=0) if gz else payload)
    return path


def write_mnist(
    directory: str | Path, n: int, *, n_test: int | None = None, seed: int = 0,
    gz: bool = False, subdir: str = "MNIST/raw",
) -> Path:
    """``n`` training and ``n_test`` (default ``max(n // 4, 10)``) held-out digits.

    Files go to ``directory/subdir`` (torchvision's ``MNIST/raw`` by default), gzipped as
    ``NAME.gz`` when ``gz``. Returns ``directory``: the root to hand ``load_mnist``.
    """
    rng = np.random.default_rng(seed)
    raw = Path(directory) / subdir
    raw.mkdir(parents=True, exist_ok=True)
    for prefix, count in (("train", n), ("t10k", n_test or max(n // 4, 10))):
        labels = _labels(count, 10, rng)
        write_idx(raw / f"{prefix}-images-idx3-ubyte", digit_images(labels, rng), MNIST_IMAGES,
                  gz=gz)
        write_idx(raw / f"{prefix}-labels-idx1-ubyte", labels, MNIST_LABELS, gz=gz)
    return Path(directory)


def colour_images(labels: np.ndarray, height: int, width: int, rng: np.random.Generator):
    """uint8 (N, height, width, 3): each image its class colour plus noise."""
    noise = rng.integers(-40, 41, size=(len(labels), height, width, 3), dtype=np.int16)
    return np.clip(PALETTE[labels.astype(np.int64)][:, None, None, :] + noise, 0, 255).astype(
        np.uint8
    )


def write_cifar10(
    directory: str | Path, n: int, *, n_test: int | None = None, seed: int = 0,
    meta: bool = True,
) -> Path:
    """CIFAR-10 python batches: ``n`` training images over data_batch_1..5, ``n_test`` in
    test_batch (default ``max(n // 4, 10)``), pickled like the official release (rows of
    3072 bytes, channel-major). Returns ``directory``: the root to hand ``load_cifar10``.
    """
    rng = np.random.default_rng(seed)
    folder = Path(directory) / "cifar-10-batches-py"
    folder.mkdir(parents=True, exist_ok=True)
    train = _labels(n, 10, rng)
    batches = [(f"data_batch_{i + 1}", part) for i, part in enumerate(np.array_split(train, 5))]
    for name, labels in batches + [("test_batch", _labels(n_test or max(n // 4, 10), 10, rng))]:
        hwc = colour_images(labels, 32, 32, rng)
        entry = {
            "batch_label": name,
            "labels": [int(c) for c in labels],
            "data": hwc.transpose(0, 3, 1, 2).reshape(len(labels), 3072),
            "filenames": [f"{name}_{i}.png" for i in range(len(labels))],
        }
        (folder / name).write_bytes(pickle.dumps(entry, protocol=2))
    if meta:
        names = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse",
                 "ship", "truck"]
        meta_entry = {"label_names": names, "num_cases_per_batch": 10000, "num_vis": 3072}
        (folder / "batches.meta").write_bytes(pickle.dumps(meta_entry, protocol=2))
    return Path(directory)


def write_image_folder(
    directory: str | Path, classes: int | Sequence[str], n: int, size: int, *,
    split: bool = False, n_val: int | None = None, fmt: str = "png", seed: int = 0,
) -> Path:
    """``n`` images per class in ``directory/<class>/`` (or ``train/`` + ``val/`` when ``split``,
    Imagenette's layout, ``n_val`` per class in val, default ``max(n // 4, 1)``).

    Images are ``size`` high and ``1.5 * size`` wide (so resize + centre crop has work to do),
    saved with PIL as ``fmt`` ("png" or "jpeg", the latter as ``.JPEG`` like Imagenette).
    ``classes`` is a count (names ``class0``, ...) or the folder names. Returns the root.
    """
    from PIL import Image

    names = [f"class{i}" for i in range(classes)] if isinstance(classes, int) else list(classes)
    rng = np.random.default_rng(seed)
    root = Path(directory)
    parts = [("train", n), ("val", n_val or max(n // 4, 1))] if split else [("", n)]
    ext = ".JPEG" if fmt.lower() in ("jpeg", "jpg") else f".{fmt.lower()}"
    for part, count in parts:
        for c, name in enumerate(names):
            folder = root / part / name
            folder.mkdir(parents=True, exist_ok=True)
            images = colour_images(np.full(count, c % len(PALETTE)), size, size * 3 // 2, rng)
            for i, image in enumerate(images):
                Image.fromarray(image).save(folder / f"{name}_{i}{ext}")
    return root


FILLER = ("the", "a", "movie", "film", "was", "it", "and", "plot", "actors", "really", "this")
KEYWORDS = (
    ("awful", "boring", "bad", "dull", "worst"),
    ("great", "superb", "fun", "good", "best"),
    ("odd", "strange", "weird", "unusual", "curious"),
    ("long", "slow", "lengthy", "endless", "tedious"),
)


def write_labeled_text(
    path: str | Path, n: int, *, classes: Sequence[str] = ("negative", "positive"),
    seed: int = 0,
) -> Path:
    """``n`` lines of ``label<TAB>text``: filler words plus two keywords of the line's class.

    Up to four classes (one keyword set each); every class appears when ``n >= classes``.
    """
    if len(classes) > len(KEYWORDS):
        raise ValueError(f"at most {len(KEYWORDS)} classes")
    rng = np.random.default_rng(seed)
    lines = []
    for c in _labels(n, len(classes), rng):
        words = list(rng.choice(FILLER, size=int(rng.integers(3, 8))))
        words += list(rng.choice(KEYWORDS[c], size=2))
        lines.append(f"{classes[c]}\t{' '.join(rng.permutation(words))}")
    path = Path(path)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def write_text_pairs(
    path: str | Path, n: int, *, seed: int = 0, vocab: int = 12, max_tokens: int = 6
) -> Path:
    """``n`` lines of ``source<TAB>target``: the target is the source sequence reversed.

    Sources are 2..``max_tokens`` tokens drawn from ``t0 .. t{vocab-1}``.
    """
    rng = np.random.default_rng(seed)
    lines = []
    for _ in range(n):
        length = int(rng.integers(2, max_tokens + 1))
        src = [f"t{int(i)}" for i in rng.integers(0, vocab, size=length)]
        lines.append(f"{' '.join(src)}\t{' '.join(reversed(src))}")
    path = Path(path)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path
