"""Plain text as character-level language-model data (the ``gpt`` workload's real data).

Usage::

    from parabench.workloads.datasets import load_char_text

    data = load_char_text("input.txt", seq_len=64)          # or a directory of .txt files
    data.x_train, data.y_train                               # (N, 64) ids, next-char ids
    "".join(data.vocab[i] for i in data.x_test[0])           # a held-out window, decoded

The text is read as UTF-8 (a directory: its ``*.txt`` files in name order, joined by a
newline); its characters are the tokens, nothing is lowercased or dropped. The last
``test_fraction`` of the text is held out (contiguous, as nanoGPT's ``shakespeare_char``
does: no held-out window overlaps a training one), so the split does not depend on the seed.
Each part is cut into windows of ``seq_len + 1`` characters starting every ``seq_len``
(each character after the first is predicted once): ``x`` is a window without its last
character, ``y`` without its first. Ids: 0 ``<pad>`` (never used: every window is full),
1 ``<unk>``, then the training part's characters by falling count (ties by code point),
``vocab_size`` capping the whole vocabulary, specials included.
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import numpy as np

from parabench.workloads.datasets.common import DatasetError, TextDataset, check_fraction

LAYOUT = "expected a UTF-8 .txt file, or a directory holding .txt files"
SPECIALS = ("<pad>", "<unk>")


def read_text(path: str) -> str:
    """The text of ``path`` (a file, or a directory's ``*.txt`` files joined by newlines)."""
    where = Path(os.path.expanduser(str(path)))
    if where.is_dir():
        files = sorted(where.glob("*.txt"))
        if not files:
            raise DatasetError(f"{where}: no .txt file in the directory; {LAYOUT}")
    elif where.is_file():
        files = [where]
    else:
        raise DatasetError(f"{where}: no such file or directory; {LAYOUT}")
    try:
        return "\n".join(f.read_text(encoding="utf-8") for f in files)
    except UnicodeDecodeError as e:
        raise DatasetError(f"{where}: not UTF-8 text ({e}); {LAYOUT}") from e


def load_char_text(
    path: str, seq_len: int, test_fraction: float = 0.1, vocab_size: int | None = None
) -> TextDataset:
    """Character windows of the text at ``path``: train on the head, hold out the tail."""
    if seq_len < 1:
        raise DatasetError(f"seq_len must be at least 1, got {seq_len}")
    check_fraction(test_fraction)
    if vocab_size is not None and vocab_size <= len(SPECIALS):
        raise DatasetError(f"vocab_size must exceed the specials {SPECIALS}, got {vocab_size}")
    text = read_text(path)
    window = seq_len + 1
    if len(text) < 2 * window:
        raise DatasetError(
            f"{path}: {len(text)} characters is too short for seq_len {seq_len}: need at least "
            f"{2 * window} (one training and one held-out window of {window}); {LAYOUT}"
        )
    n_test = min(max(round(len(text) * test_fraction), window), len(text) - window)
    train, test = text[: len(text) - n_test], text[len(text) - n_test :]
    counts = Counter(train)
    chars = sorted(counts, key=lambda c: (-counts[c], c))
    limit = None if vocab_size is None else vocab_size - len(SPECIALS)
    vocab = SPECIALS + tuple(chars[:limit])
    ids = {c: i for i, c in enumerate(vocab)}
    unk = SPECIALS.index("<unk>")
    x_tr, y_tr = _windows(np.array([ids.get(c, unk) for c in train], np.int64), seq_len)
    x_te, y_te = _windows(np.array([ids.get(c, unk) for c in test], np.int64), seq_len)
    return TextDataset(x_train=x_tr, y_train=y_tr, x_test=x_te, y_test=y_te,
                       n_classes=len(vocab), vocab=vocab)


def _windows(ids: np.ndarray, seq_len: int) -> tuple[np.ndarray, np.ndarray]:
    """(inputs, next tokens), each (N, seq_len): windows of seq_len + 1 every seq_len."""
    n = (len(ids) - 1) // seq_len
    rows = np.stack([ids[i * seq_len : i * seq_len + seq_len + 1] for i in range(n)])
    return rows[:, :-1].copy(), rows[:, 1:].copy()
