"""Text datasets from tab-separated files: labelled sentences (nbow) and pairs (seq2seq).

Usage::

    from parabench.workloads.datasets import load_labeled_text, load_text_pairs

    data = load_labeled_text("reviews.tsv", seed=0, max_len=64)   # lines: label<TAB>text
    data = load_text_pairs("pairs.tsv", seed=0, max_len=20)       # lines: source<TAB>target

Both read UTF-8, one sample per line, split at the first tab; blank lines are skipped. Text is
lowercased and cut into words and single punctuation marks. The vocabulary is built from the
training split only, so a word that appears only in held-out lines maps to ``<unk>``.
Ids: 0 ``<pad>``, 1 ``<unk>`` (pairs add 2 ``<bos>``, 3 ``<eos>``), then tokens by falling
training frequency, ties alphabetical. ``vocab_size`` caps the whole vocabulary, specials
included.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from collections.abc import Iterable, Sequence

import numpy as np

from parabench.workloads.datasets.common import (
    DatasetError,
    TextDataset,
    random_split,
    require_classes,
    stratified_split,
)

PAD, UNK, BOS, EOS = "<pad>", "<unk>", "<bos>", "<eos>"
_TOKEN = re.compile(r"\w+(?:'\w+)*|[^\w\s]")

LABELED_LAYOUT = "expected a UTF-8 text file with one sample per line: label<TAB>text"
PAIRS_LAYOUT = "expected a UTF-8 text file with one pair per line: source<TAB>target"


def tokenize(text: str) -> list[str]:
    """Lowercase words (apostrophes kept inside: ``don't``) and single punctuation marks."""
    return _TOKEN.findall(text.lower())


def load_labeled_text(
    path: str,
    seed: int,
    max_len: int,
    test_fraction: float = 0.2,
    vocab_size: int | None = None,
) -> TextDataset:
    """Sentences with string labels: class ids follow the sorted label names.

    ``x`` is int64 ``(N, max_len)``: the first ``max_len`` token ids, then ``pad_id``.
    The split is stratified by label and fixed by ``seed``.
    """
    _check_len(max_len, 1)
    rows = _read_tsv(path, LABELED_LAYOUT, ("label", "text"))
    names = sorted({label for label, _ in rows})
    require_classes(len(names), path, LABELED_LAYOUT)
    index = {name: i for i, name in enumerate(names)}
    labels = np.array([index[label] for label, _ in rows], dtype=np.int64)
    tokens = [tokenize(text) for _, text in rows]
    tr, te = stratified_split(labels, seed=seed, test_fraction=test_fraction, where=path,
                              layout=LABELED_LAYOUT)
    vocab = build_vocab((tokens[i] for i in tr), (PAD, UNK), vocab_size)
    ids = {tok: i for i, tok in enumerate(vocab)}
    x = np.stack([_encode(t, ids, max_len) for t in tokens])
    return TextDataset(
        x_train=x[tr], y_train=labels[tr], x_test=x[te], y_test=labels[te],
        n_classes=len(names), vocab=vocab, labels=tuple(names),
    )


def load_text_pairs(
    path: str,
    seed: int,
    max_len: int,
    test_fraction: float = 0.2,
    vocab_size: int | None = None,
) -> TextDataset:
    """Source/target token sequences sharing one vocabulary, split at random by ``seed``.

    ``x`` is int64 ``(N, max_len)``: source ids, padded. ``y`` is int64 ``(N, max_len + 1)``:
    ``<bos>``, at most ``max_len - 1`` target ids, ``<eos>``, then padding; so teacher forcing
    feeds ``y[:, :-1]`` and predicts ``y[:, 1:]``, both ``max_len`` long. ``n_classes`` is
    the vocabulary size (the decoder's output width).
    """
    _check_len(max_len, 2)
    rows = _read_tsv(path, PAIRS_LAYOUT, ("source", "target"))
    sources = [tokenize(src) for src, _ in rows]
    targets = [tokenize(tgt) for _, tgt in rows]
    tr, te = random_split(
        len(rows), seed=seed, test_fraction=test_fraction, where=path, layout=PAIRS_LAYOUT
    )
    vocab = build_vocab(
        (seq for i in tr for seq in (sources[i], targets[i])), (PAD, UNK, BOS, EOS), vocab_size
    )
    ids = {tok: i for i, tok in enumerate(vocab)}
    bos, eos = ids[BOS], ids[EOS]
    x = np.stack([_encode(s, ids, max_len) for s in sources])
    y = np.stack([_encode(t, ids, max_len + 1, bos=bos, eos=eos) for t in targets])
    return TextDataset(
        x_train=x[tr], y_train=y[tr], x_test=x[te], y_test=y[te],
        n_classes=len(vocab), vocab=vocab, bos_id=bos, eos_id=eos,
    )


def build_vocab(
    sequences: Iterable[Sequence[str]], specials: tuple[str, ...], vocab_size: int | None
) -> tuple[str, ...]:
    """``specials`` then tokens by falling count (ties alphabetical), capped at ``vocab_size``."""
    if vocab_size is not None and vocab_size <= len(specials):
        raise DatasetError(
            f"vocab_size must exceed the {len(specials)} special tokens {specials}, "
            f"got {vocab_size}"
        )
    counts = Counter(tok for seq in sequences for tok in seq)
    ordered = sorted((tok for tok in counts if tok not in specials), key=lambda t: (-counts[t], t))
    limit = None if vocab_size is None else vocab_size - len(specials)
    return specials + tuple(ordered[:limit])


def _encode(
    tokens: Sequence[str], ids: dict[str, int], width: int, *,
    bos: int | None = None, eos: int | None = None,
) -> np.ndarray:
    """``tokens`` as ``width`` ids: unknown -> <unk>, cut to fit, wrapped in bos/eos, padded."""
    room = width - (bos is not None) - (eos is not None)
    unk = ids[UNK]
    body = [ids.get(tok, unk) for tok in tokens[:room]]
    seq = ([bos] if bos is not None else []) + body + ([eos] if eos is not None else [])
    row = np.full(width, ids[PAD], dtype=np.int64)
    row[: len(seq)] = seq
    return row


def _check_len(max_len: int, minimum: int) -> None:
    if max_len < minimum:
        raise DatasetError(f"max_len must be at least {minimum}, got {max_len}")


def _read_tsv(path: str, layout: str, fields: tuple[str, str]) -> list[tuple[str, str]]:
    """Non-blank lines as (first, second) field pairs; any malformed line names its number."""
    path = os.path.expanduser(str(path))
    if not os.path.isfile(path):
        kind = "is a directory, not a file" if os.path.isdir(path) else "no such file"
        raise DatasetError(f"{path}: {kind}; {layout}")
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except UnicodeDecodeError as e:
        raise DatasetError(f"{path}: not UTF-8 text ({e}); {layout}") from e
    rows = [_parse_line(line, n, path, layout, fields) for n, line in enumerate(lines, 1)
            if line.strip()]
    if not rows:
        raise DatasetError(f"{path}: no samples (the file is empty or blank); {layout}")
    return rows


def _parse_line(
    line: str, number: int, path: str, layout: str, fields: tuple[str, str]
) -> tuple[str, str]:
    if "\t" not in line:
        raise DatasetError(f"{path}: line {number} has no tab; {layout}")
    first, second = (part.strip() for part in line.split("\t", 1))
    for name, value in zip(fields, (first, second), strict=True):
        if not tokenize(value) and not (name == "label" and value):
            raise DatasetError(f"{path}: line {number} has an empty {name}; {layout}")
    return first, second
