"""Seeded, learnable synthetic data for the deep-learning workloads (registers nothing).

Usage::

    data = class_images(n=1000, classes=10, channels=1, size=28, seed=0)      # uint8 images
    text = class_texts(n=1000, classes=4, vocab_size=500, max_len=32, seed=0)
    pairs = reversal_pairs(n=1000, vocab_size=16, max_len=8, seed=0)
    lm = copy_markov_sequences(n=1000, vocab_size=32, seq_len=32, seed=0)    # next tokens
    x_train, y_train, x_test, y_test = image_tensors(data)                     # normalised

Each generator has real structure a model can learn, so a run that stays at chance is a bug:

* images: every class has a smooth random template (upsampled low-resolution noise, partly
  shared between classes); a sample is its class template, randomly shifted, with random
  contrast and pixel noise;
* texts: every class has its own topic words mixed into a shared Zipf background;
* pairs: the target is the source reversed (a real sequence task for an encoder-decoder);
* copy-Markov sequences: a span walked from a seeded Markov chain, a ``<copy>`` marker, then
  the span again: the first half rewards learning the chain, the second attending back
  many positions (a language-model task where attention matters).

The same arguments give the same bytes. Duplicate inputs are dropped before the seeded
train / held-out split, so a held-out sample is never also a training sample. Token ids
follow the real-data loaders (:mod:`parabench.workloads.datasets`): 0 is padding, 1 unknown.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

from parabench.config import ConfigError
from parabench.workload import Dataset

PAD, UNK, BOS, EOS = 0, 1, 2, 3
#: the marker of :func:`copy_markov_sequences` (the id ``<eos>`` has elsewhere)
COPY = 3


@dataclass(frozen=True, kw_only=True)
class TokenDataset(Dataset):
    """Token-id data with the fields of the loaders' ``TextDataset`` (duck-typed alike)."""

    vocab: tuple[str, ...]
    pad_id: int = PAD
    bos_id: int | None = None
    eos_id: int | None = None


def _split(
    x: np.ndarray, y: np.ndarray, rng: np.random.Generator, test_fraction: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Drop repeated inputs, shuffle, split: no held-out input is also a training input."""
    first: dict[bytes, int] = {}
    for i, row in enumerate(x):  # keyed by a digest: a copy of every row is gigabytes at full
        first.setdefault(_digest(row), i)
    keep = rng.permutation(np.fromiter(first.values(), dtype=np.int64))
    n_test = max(1, int(round(len(keep) * test_fraction)))
    test, train = keep[:n_test], keep[n_test:]
    return x[train], y[train], x[test], y[test]


def _digest(row: np.ndarray) -> bytes:
    """A 256-bit digest of ``row``'s bytes: equal rows give equal digests, distinct ones
    (short of a SHA-256 collision) distinct ones."""
    return hashlib.sha256(np.ascontiguousarray(row)).digest()


def image_train_size(n: int, test_fraction: float = 0.2) -> int:
    """Training images :func:`class_images` keeps from ``n`` (its noise makes every image
    distinct, so :func:`_split` drops none), known without generating them."""
    return n - max(1, int(round(n * test_fraction)))


def _labels(n: int, classes: int, rng: np.random.Generator) -> np.ndarray:
    """Balanced class labels in seeded order."""
    return rng.permutation(np.arange(n) % classes).astype(np.int64)


def _upsample(grid: np.ndarray, size: int) -> np.ndarray:
    """Bilinear upsampling of the last two axes of ``grid`` to ``size`` x ``size``."""
    g = grid.shape[-1]
    pos = np.linspace(0, g - 1, size)
    lo = np.floor(pos).astype(int).clip(0, g - 2)
    w = (pos - lo).astype(np.float32)
    rows = grid[..., lo, :] * (1 - w)[:, None] + grid[..., lo + 1, :] * w[:, None]
    return rows[..., lo] * (1 - w) + rows[..., lo + 1] * w


def class_images(
    *,
    n: int,
    classes: int,
    channels: int,
    size: int,
    seed: int,
    noise: float = 0.45,
    separation: float = 1.0,
    shift: float = 0.1,
    test_fraction: float = 0.2,
    extra_held_out: int = 0,
) -> Dataset:
    """``n`` uint8 images (N, channels, size, size) drawn around one template per class.

    ``noise`` is the pixel-noise standard deviation relative to the template's range;
    ``separation`` in (0, 1] the share of each template that is the class's own (the rest
    is common to all classes: lower is harder); ``shift`` the largest random translation as
    a fraction of ``size`` (wrapping around). ``extra_held_out`` more images from the same
    templates join the held-out set, drawn from a stream of their own: the training set and
    the first held-out images are the bytes they are without them (a larger held-out set
    measures quality more precisely, and trains nothing differently).
    """
    rng = np.random.default_rng([seed, 0x1A6E])
    grid = max(3, min(7, size // 4))
    common = rng.random((1, channels, grid, grid), dtype=np.float32)
    own = rng.random((classes, channels, grid, grid), dtype=np.float32)
    low = (1 - separation) * common + separation * own
    templates = _upsample(low, size)
    # per template, keep the brightest ~40 %: distinct blobs on a dark background
    cut = np.quantile(templates, 0.6, axis=(1, 2, 3), keepdims=True)
    top = templates.max(axis=(1, 2, 3), keepdims=True)
    templates = np.clip((templates - cut) / (top - cut + 1e-6), 0, 1).astype(np.float32)
    draw = _ImageDraw(templates=templates, noise=noise, most=max(1, int(size * shift)))
    x, y = draw(n, rng)
    x_tr, y_tr, x_te, y_te = _split(x, y, rng, test_fraction)
    if extra_held_out > 0:
        more_x, more_y = draw(extra_held_out, np.random.default_rng([seed, 0x1A6E, 1]))
        seen = {_digest(row) for row in (*x_tr, *x_te)}
        keep = np.array([_digest(row) not in seen for row in more_x], dtype=bool)
        x_te, y_te = np.concatenate([x_te, more_x[keep]]), np.concatenate([y_te, more_y[keep]])
    return Dataset(x_train=x_tr, y_train=y_tr, x_test=x_te, y_test=y_te, n_classes=classes)


@dataclass(frozen=True)
class _ImageDraw:
    """Images around ``templates`` (one per class): a class template, shifted by up to
    ``most`` pixels (wrapping), with random contrast and pixel ``noise``."""

    templates: np.ndarray
    noise: float
    most: int

    def __call__(self, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        classes, channels, size, _ = self.templates.shape
        y = _labels(n, classes, rng)
        shifts = rng.integers(-self.most, self.most + 1, size=(n, 2))
        contrast = rng.uniform(0.7, 1.3, size=n).astype(np.float32)
        # np.roll(template, shift) is the size x size window of the template tiled 2 x 2 that
        # starts at -shift: a view, where np.roll copied every image's template twice
        tiled = np.tile(self.templates, (1, 1, 2, 2))
        origin = -shifts % size
        x = np.empty((n, channels, size, size), dtype=np.uint8)
        for start in range(0, n, 256):  # in chunks: full-profile noise would not fit as float
            stop = min(n, start + 256)
            pix = rng.standard_normal((stop - start, channels, size, size), dtype=np.float32)
            pix *= self.noise
            for j, i in enumerate(range(start, stop)):
                r, c = origin[i]
                pix[j] += contrast[i] * tiled[y[i], :, r : r + size, c : c + size]
            pix *= 180  # in place: the same float32 arithmetic as clip(pix * 180 + 40) with
            pix += 40  # no chunk-sized temporaries
            x[start:stop] = np.clip(pix, 0, 255, out=pix)  # float32 -> uint8, as astype
        return x, y


def _vocab(size: int) -> tuple[str, ...]:
    return ("<pad>", "<unk>", "<bos>", "<eos>", *(f"w{i}" for i in range(4, size)))


def class_texts(
    *,
    n: int,
    classes: int,
    vocab_size: int,
    max_len: int,
    seed: int,
    topic_rate: float = 0.2,
    test_fraction: float = 0.2,
) -> TokenDataset:
    """Padded token ids (N, max_len): a Zipf background plus each class's topic words.

    Every token is, with probability ``topic_rate``, one of the class's own topic words
    (disjoint per class), else a background word shared by all classes.
    """
    words = np.arange(4, vocab_size)
    if len(words) < 4 * classes:
        raise ConfigError(f"vocab_size {vocab_size} is too small for {classes} classes")
    rng = np.random.default_rng([seed, 0x7E47])
    background = 1.0 / np.arange(1, len(words) + 1)
    background = rng.permutation(background / background.sum())
    per_class = max(2, len(words) // (4 * classes))
    topics = rng.permutation(words)[: per_class * classes].reshape(classes, per_class)
    y = _labels(n, classes, rng)
    lengths = rng.integers(max(4, max_len // 3), max_len + 1, size=n)
    from_topic = rng.random((n, max_len)) < topic_rate
    bg = rng.choice(words, size=(n, max_len), p=background)
    topic = topics[y[:, None], rng.integers(0, per_class, size=(n, max_len))]
    x = np.where(from_topic, topic, bg)
    x[np.arange(max_len)[None, :] >= lengths[:, None]] = PAD
    x_tr, y_tr, x_te, y_te = _split(x.astype(np.int64), y, rng, test_fraction)
    return TokenDataset(
        x_train=x_tr, y_train=y_tr, x_test=x_te, y_test=y_te, n_classes=classes,
        vocab=_vocab(vocab_size),
    )


def reversal_pairs(
    *, n: int, vocab_size: int, max_len: int, seed: int, test_fraction: float = 0.2
) -> TokenDataset:
    """Source (N, max_len) and target (N, max_len + 1) = BOS, reversed source, EOS, PAD...

    Sources hold 2 .. max_len - 1 words so the target with BOS and EOS fits; the layout is
    the one :func:`parabench.workloads.datasets.load_text_pairs` gives for a
    ``source<TAB>target`` file.
    """
    if max_len < 3 or vocab_size < 6:
        raise ConfigError("reversal pairs need max_len >= 3 and vocab_size >= 6")
    rng = np.random.default_rng([seed, 0x5E95])
    lengths = rng.integers(2, max_len, size=n)
    src = rng.integers(4, vocab_size, size=(n, max_len))
    pos = np.arange(max_len)[None, :]
    src[pos >= lengths[:, None]] = PAD
    tgt = np.full((n, max_len + 1), PAD, dtype=np.int64)
    tgt[:, 0] = BOS
    for i, length in enumerate(lengths):
        tgt[i, 1 : length + 1] = src[i, :length][::-1]
        tgt[i, length + 1] = EOS
    x_tr, y_tr, x_te, y_te = _split(src.astype(np.int64), tgt, rng, test_fraction)
    return TokenDataset(
        x_train=x_tr, y_train=y_tr, x_test=x_te, y_test=y_te,
        vocab=_vocab(vocab_size), bos_id=BOS, eos_id=EOS,
    )


def copy_markov_sequences(
    *, n: int, vocab_size: int, seq_len: int, seed: int, concentration: float = 0.3,
    test_fraction: float = 0.2,
) -> TokenDataset:
    """Language-model inputs (N, seq_len) and their next tokens (N, seq_len), all int64.

    Each sequence is ``seq_len + 1`` tokens: ``<bos>``, a span of ``m`` words (``m`` uniform
    in [seq_len / 3, seq_len / 2]) walked from a first-order Markov chain over the words
    4 .. vocab_size - 1, ``<copy>``, then the span repeated from its start until the sequence
    is full; ``x`` is the sequence without its last token, ``y`` without its first. Every
    word's successor distribution is a Dirichlet(``concentration``) draw fixed by ``seed``
    (lower: a more predictable chain). A bigram model can predict the walk only as well as
    the chain allows; after ``<copy>`` every token is determined by one ``m + 1`` positions
    back, which only attention finds. No padding: every position is a real token.
    """
    if seq_len < 6 or vocab_size < 8:
        raise ConfigError("copy-Markov sequences need seq_len >= 6 and vocab_size >= 8")
    rng = np.random.default_rng([seed, 0xC0B1])
    words = vocab_size - 4
    successors = rng.dirichlet(np.full(words, concentration), size=words)
    cumulative = np.cumsum(successors, axis=1)
    spans = rng.integers(seq_len // 3, seq_len // 2 + 1, size=n)
    seq = np.empty((n, seq_len + 1), dtype=np.int64)
    seq[:, 0] = BOS
    walk = np.empty((n, seq_len // 2 + 1), dtype=np.int64)
    walk[:, 0] = rng.integers(0, words, size=n)
    draws = rng.random((n, walk.shape[1]))
    for j in range(1, walk.shape[1]):  # vectorised over sequences: one step of every walk
        row = cumulative[walk[:, j - 1]]
        walk[:, j] = np.minimum((row < draws[:, j, None]).sum(axis=1), words - 1)
    walk += 4
    pos = np.arange(seq_len + 1)
    for i, m in enumerate(spans):
        seq[i, 1 : m + 1] = walk[i, :m]
        seq[i, m + 1] = COPY
        seq[i, m + 2 :] = walk[i, (pos[m + 2 :] - m - 2) % m]
    x_tr, y_tr, x_te, y_te = _split(seq[:, :-1].copy(), seq[:, 1:].copy(), rng, test_fraction)
    vocab = ("<pad>", "<unk>", "<bos>", "<copy>", *(f"w{i}" for i in range(4, vocab_size)))
    return TokenDataset(x_train=x_tr, y_train=y_tr, x_test=x_te, y_test=y_te,
                        n_classes=vocab_size, vocab=vocab, bos_id=BOS)


# --- shared by the image workloads -------------------------------------------------------


def check_images(
    workload: str, data: Dataset, *, channels: int, min_size: int, multiple: int = 1
) -> None:
    """A ConfigError saying what the model needs when the images cannot go through it."""
    shape = tuple(data.x_train.shape[1:])
    ok = (
        len(shape) == 3
        and shape[0] == channels
        and min(shape[1:]) >= min_size
        and shape[1] % multiple == 0
        and shape[2] % multiple == 0
    )
    if not ok:
        need = f"{channels}xHxW images with H, W >= {min_size}"
        if multiple > 1:
            need += f" and divisible by {multiple}"
        got = "x".join(map(str, shape))
        raise ConfigError(f"workload {workload} needs {need}; the data has {got}")


def image_tensors(data: Dataset, *, standardise: bool = True) -> tuple:
    """(x_train, y_train, x_test, y_test) with images as float32.

    Pixels are scaled to [0, 1]; with ``standardise`` each channel is then shifted and
    scaled by the *training* set's mean and standard deviation (never the held-out set's).
    """
    import torch

    x_tr = torch.as_tensor(data.x_train).float().div_(255)
    x_te = torch.as_tensor(data.x_test).float().div_(255)
    if standardise:
        mean = x_tr.mean(dim=(0, 2, 3), keepdim=True)
        std = x_tr.std(dim=(0, 2, 3), keepdim=True).clamp_min(1e-3)
        for x in (x_tr, x_te):  # in place: a full-profile float copy is gigabytes
            x.sub_(mean).div_(std)
    y_tr = torch.as_tensor(data.y_train, dtype=torch.long)
    y_te = torch.as_tensor(data.y_test, dtype=torch.long)
    return x_tr, y_tr, x_te, y_te
