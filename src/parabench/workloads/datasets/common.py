"""What every real-data loader shares: the error type, the text dataset, seeded splits.

Usage::

    from parabench.workloads.datasets.common import DatasetError, stratified_split

    train_idx, test_idx = stratified_split(labels, seed=0, test_fraction=0.2, where=path,
                                           layout="expected ...")

Nothing here imports torch, so the loaders' errors and types are cheap to import.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from parabench.config import ConfigError
from parabench.workload import Dataset


class DatasetError(ConfigError):
    """A dataset on disk is missing or malformed; the message names the path and the layout."""


@dataclass(frozen=True, kw_only=True)
class TextDataset(Dataset):
    """Token-id data with the vocabulary that maps ids back to tokens.

    ``vocab[i]`` is the token of id ``i``; ``pad_id`` fills rows shorter than ``max_len`` and
    ``unk_id`` stands for a token not in the vocabulary (one seen only in held-out lines).
    ``labels`` names the classes of a labelled-text set (``labels[k]`` is class ``k``).
    ``bos_id`` / ``eos_id`` start and end target sequences of a pairs set (None otherwise).
    """

    vocab: tuple[str, ...]
    pad_id: int = 0
    unk_id: int = 1
    bos_id: int | None = None
    eos_id: int | None = None
    labels: tuple[str, ...] = ()

    @property
    def vocab_size(self) -> int:
        return len(self.vocab)


def check_fraction(test_fraction: float) -> None:
    if not 0.0 < test_fraction < 1.0:
        raise DatasetError(f"test_fraction must lie strictly between 0 and 1, got {test_fraction}")


def require_classes(n_classes: int, where: str, layout: str) -> None:
    """A classification set needs two classes or more; one class teaches nothing."""
    if n_classes < 2:
        raise DatasetError(f"{where}: found {n_classes} class(es), need at least 2; {layout}")


def stratified_split(
    labels: np.ndarray, *, seed: int, test_fraction: float, where: str, layout: str
) -> tuple[np.ndarray, np.ndarray]:
    """Seeded (train, held-out) index arrays holding ``test_fraction`` of every class.

    Each class of ``n`` samples sends ``round(n * test_fraction)`` of them to the held-out
    part, clipped to ``[1, n - 1]`` so every class is both trained on and tested (a class
    with a single sample stays in training). Both index arrays come back in a seeded
    shuffled order, so no method sees the data sorted by class.
    """
    check_fraction(test_fraction)
    rng = np.random.default_rng(seed)
    train: list[np.ndarray] = []
    test: list[np.ndarray] = []
    for cls in np.unique(labels):
        members = rng.permutation(np.flatnonzero(labels == cls))
        n_test = min(max(round(len(members) * test_fraction), 1), len(members) - 1)
        test.append(members[:n_test])
        train.append(members[n_test:])
    hint = "every class needs 2 samples or more to be held out"
    return _shuffled(train, rng), _checked_test(_shuffled(test, rng), where, hint, layout)


def random_split(
    n: int, *, seed: int, test_fraction: float, where: str, layout: str
) -> tuple[np.ndarray, np.ndarray]:
    """Seeded (train, held-out) index arrays for unlabelled rows (e.g. sequence pairs)."""
    check_fraction(test_fraction)
    order = np.random.default_rng(seed).permutation(n)
    n_test = min(max(round(n * test_fraction), 1), n - 1)  # like one class of stratified_split
    hint = "2 samples or more are needed to hold one out"
    return order[n_test:], _checked_test(order[:n_test], where, hint, layout)


def _shuffled(parts: list[np.ndarray], rng: np.random.Generator) -> np.ndarray:
    return rng.permutation(np.concatenate(parts)) if parts else np.zeros(0, dtype=np.int64)


def _checked_test(test: np.ndarray, where: str, hint: str, layout: str) -> np.ndarray:
    if len(test) == 0:
        raise DatasetError(
            f"{where}: the held-out split would be empty ({hint}); add samples or raise "
            f"test_fraction; {layout}"
        )
    return test
