"""``nbow``: a neural bag of words (``nn.EmbeddingBag`` mean + linear) over token ids.

Usage::

    parabench run --method serial --workload nbow --profile quick
    parabench run --method serial --workload nbow --data-dir reviews.tsv   # label<TAB>text

Inputs are padded rows of token ids (0 is padding, excluded from the mean; 1 unknown). The
model is ``nn.Sequential(EmbeddingBag, Linear)``, so stage-cutting methods can split it.
Synthetic data: every class mixes its own topic words into a shared Zipf background
(:func:`~parabench.workloads.synthetic.class_texts`); chance is 1 / classes (25 %).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, ClassVar

from parabench.config import OptionSpec
from parabench.registry import workloads
from parabench.workload import DATA_DIR, Dataset, TorchWorkload
from parabench.workloads.synthetic import class_texts

if TYPE_CHECKING:
    import torch

#: profile -> (samples, classes, vocabulary size, max tokens per text)
SIZES: dict[str, tuple[int, int, int, int]] = {
    "tiny": (4_000, 4, 1_000, 48),
    "quick": (30_000, 4, 5_000, 64),
    "full": (200_000, 4, 30_000, 128),
}


def vocab_size(data: Dataset) -> int:
    """Rows of the embedding table: the loader's / generator's vocabulary, else max id + 1."""
    vocab = getattr(data, "vocab", None)
    if vocab:
        return len(vocab)
    return int(max(data.x_train.max(), data.x_test.max())) + 1


@workloads.register
class NBoW(TorchWorkload):
    name: ClassVar[str] = "nbow"
    tiny_epoch_guess_s: ClassVar[float | None] = 1.0
    smoke_rank: ClassVar[int | None] = 3
    #: serial, quick profile, 3 epochs (README): the default --target-quality's basis
    reference_quality: ClassVar[float | None] = 0.96
    options: ClassVar[Mapping[str, OptionSpec]] = {"data_dir": DATA_DIR}  # real loader
    description: ClassVar[str] = "EmbeddingBag + linear text classifier over padded token ids"
    lr: ClassVar[float] = 0.5

    def make_data(self, profile: str, seed: int, data_dir: str | None = None) -> Dataset:
        n, classes, vocab, max_len = SIZES[profile]
        if data_dir is not None:
            from parabench.workloads.datasets import load_labeled_text

            return load_labeled_text(data_dir, seed=seed, max_len=max_len, vocab_size=vocab)
        return class_texts(n=n, classes=classes, vocab_size=vocab, max_len=max_len, seed=seed)

    def tensors(self, data: Dataset) -> tuple[torch.Tensor, ...]:
        import torch

        return tuple(
            torch.as_tensor(a, dtype=torch.long)
            for a in (data.x_train, data.y_train, data.x_test, data.y_test)
        )

    def build_model(self, data: Dataset, seed: int) -> torch.nn.Module:
        import torch
        from torch import nn

        rows = vocab_size(data)
        width = min(256, max(64, rows // 32))  # 64 at tiny, 156 at quick, 256 at full
        classes = data.n_classes or int(data.y_train.max()) + 1
        torch.manual_seed(seed)
        return nn.Sequential(
            nn.EmbeddingBag(rows, width, mode="mean", padding_idx=getattr(data, "pad_id", 0)),
            nn.Linear(width, classes),
        )
