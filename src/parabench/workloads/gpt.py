"""``gpt``: a small decoder-only transformer trained as a causal language model.

Usage::

    parabench run --method serial --workload gpt --profile tiny
    parabench run --method ddp,pipeline --workers 2 --threads 1 --workload gpt --profile tiny
    parabench run --method serial --workload gpt --data-dir input.txt     # any UTF-8 text

The model is :func:`~parabench.workloads.models.gpt.build_gpt` (token + position embedding,
pre-norm causal self-attention blocks, a final norm and linear head), one ``nn.Sequential``,
so pipeline and model-parallel methods cut it between blocks; its size is the profile's
(:data:`SIZES`), its vocabulary and context the data's. Inputs are token ids (N, T), labels
the next tokens (N, T); the loss is the mean cross-entropy per token. Every row holds T real
tokens (no padding), so the mean over a batch's tokens equals the mean of its samples' means
and a batch split into equal parts averages back to serial's loss: data parallelism is exact.
:mod:`parabench.workloads.gpt2` is this workload at GPT-2 small's shape (its own
:attr:`GPT.sizes` table and a padded vocabulary).

Quality, the gated metric: **held-out next-token accuracy, higher is better** (every
position of every held-out sequence, the argmax of the logits against the true next token).

Synthetic data (:func:`~parabench.workloads.synthetic.copy_markov_sequences`): a span walked
from a seeded Markov chain, a ``<copy>`` marker, then the span again. Chance is 1 / vocabulary
and the commonest token is a few percent; a bigram model (no attention) reaches only what
the chain allows (about a quarter at tiny), and the copied half is predictable only by
attending back a whole span, so accuracy keeps climbing while attention learns to copy.
Quick's spans never revisit a word (:func:`distinct_copy_sequences`: the same chain, each
step drawn among the words not yet visited). The chain's own walk revisits words, so a third
of its copied positions follow a word the span holds twice, with different successors:
which one comes next is told only by where the copy stands, and each training seed learned
that to a different degree and stayed there, which set serial's seeds apart at quick's
plateau by more than a 0.02 check allows. With distinct words every copied token follows
the one position holding its predecessor, the seeds learn the copy to the same end, and
the rise to it is still a curve to time a target on (docs/measurements.md, "Default quality
targets (quick profile, #41)"). Tiny and full keep the chain's own walk.

The data are the same at every ``--seed`` (drawn by :data:`DATA_SEED`, as mlp's); the seed
draws the initial weights and the batch order. So serial's seed-to-seed spread is its
training's, which is what a statistical method's quality gate must tell a loss from: with a
chain per seed, how predictable each chain was moved the plateau from seed to seed. Quick
trains in batches of 16 (its :class:`Size`), not 64 as full does: four times the steps an
epoch at the same learning rate, so most seeds have learned to copy by the tenth epoch; the
calibrated budget waits for the slow ones, whose late climb sets the converged check's power.

The optimizer is AdamW, as transformers are trained. Adam's step is blind to a uniform
gradient scale, so a gradient summed instead of averaged over ranks shows in the trajectory
of the SGD workloads (mlp, cnn), not in this one's; every other bug shows here too.

Real data (``--data-dir``, a ``.txt`` file or a directory of them): characters are the
tokens (:func:`~parabench.workloads.datasets.load_char_text`); the text's last tenth is held
out. FLOPs per sample for MFU are the model's formula
(:meth:`~parabench.workloads.models.gpt.GPTShape.flops_per_token` x T), not a count.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from parabench.config import ConfigError, OptionSpec
from parabench.registry import workloads
from parabench.workload import DATA_DIR, Dataset, Quality, TensorParallelPlan, TorchWorkload
from parabench.workloads.synthetic import BOS, COPY, TokenDataset, _split, copy_markov_sequences

if TYPE_CHECKING:
    from collections.abc import Callable

    import torch

    from parabench.workloads.models.gpt import GPTShape


@dataclasses.dataclass(frozen=True)
class Size:
    """One profile: the synthetic data and the model."""

    sequences: int
    vocab: int  # synthetic vocabulary (a text file brings its own)
    seq_len: int
    width: int
    heads: int
    layers: int
    batch: int
    #: words of the synthetic chain where fewer than ``vocab`` (gpt2: a padded vocabulary the
    #: data uses a corner of); None: the whole vocabulary
    words: int | None = None
    #: held-out sequences; None: a fifth of them
    held_out: int | None = None
    #: each span visits a word at most once (:func:`distinct_copy_sequences`), so copying is
    #: unambiguous; False: the chain's own walk, which revisits words
    distinct: bool = False


SIZES: dict[str, Size] = {
    "tiny": Size(2_000, 32, 32, width=64, heads=4, layers=2, batch=32),
    "quick": Size(12_000, 48, 48, width=96, heads=4, layers=3, batch=16, distinct=True),
    "full": Size(60_000, 64, 64, width=128, heads=4, layers=4, batch=64),
}
#: the most characters a text file's vocabulary keeps (rarer ones become ``<unk>``)
REAL_VOCAB = 256
#: the seed of the synthetic chain and its sequences, whatever the run's seed (module docstring)
DATA_SEED = 0
#: what keeps a word the chain never leads to drawable, so a walk always has a next word
FLOOR = 1e-12


def distinct_copy_sequences(
    *, n: int, vocab_size: int, seq_len: int, seed: int, concentration: float = 0.3,
    test_fraction: float = 0.2,
) -> TokenDataset:
    """:func:`~parabench.workloads.synthetic.copy_markov_sequences` whose spans never revisit
    a word: the same chain (the same successor draws at the same ``seed``) and span lengths,
    each step drawn from the chain's odds among the words the walk has not visited yet. So
    every copied token follows the one a single earlier position holds, and copying is learned
    to the same end by every training seed (module docstring)."""
    words = vocab_size - 4
    if seq_len < 6 or words < seq_len // 2:
        raise ConfigError(f"distinct copy sequences need seq_len >= 6 and at least seq_len / 2 "
                          f"= {seq_len // 2} words (vocab_size >= {seq_len // 2 + 4}); got "
                          f"seq_len {seq_len}, vocab_size {vocab_size}")
    rng = np.random.default_rng([seed, 0xC0B1])
    successors = rng.dirichlet(np.full(words, concentration), size=words) + FLOOR
    spans = rng.integers(seq_len // 3, seq_len // 2 + 1, size=n)
    rows = np.arange(n)
    walk = np.empty((n, seq_len // 2), dtype=np.int64)
    walk[:, 0] = rng.integers(0, words, size=n)
    draws = 1.0 - rng.random((n, walk.shape[1]))  # in (0, 1]: never a word of no weight
    seen = np.zeros((n, words), dtype=bool)
    for j in range(1, walk.shape[1]):  # vectorised over sequences: one step of every walk
        seen[rows, walk[:, j - 1]] = True
        cumulative = np.cumsum(np.where(seen, 0.0, successors[walk[:, j - 1]]), axis=1)
        walk[:, j] = (cumulative < draws[:, j, None] * cumulative[:, -1:]).sum(axis=1)
    walk += 4
    seq = np.empty((n, seq_len + 1), dtype=np.int64)
    seq[:, 0] = BOS
    pos = np.arange(seq_len + 1)
    for i, m in enumerate(spans):
        seq[i, 1 : m + 1] = walk[i, :m]
        seq[i, m + 1] = COPY
        seq[i, m + 2 :] = walk[i, (pos[m + 2 :] - m - 2) % m]
    x_tr, y_tr, x_te, y_te = _split(seq[:, :-1].copy(), seq[:, 1:].copy(), rng, test_fraction)
    vocab = ("<pad>", "<unk>", "<bos>", "<copy>", *(f"w{i}" for i in range(4, vocab_size)))
    return TokenDataset(x_train=x_tr, y_train=y_tr, x_test=x_te, y_test=y_te,
                        n_classes=vocab_size, vocab=vocab, bos_id=BOS)


def lm_loss(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy per token: (N, T, V) logits against (N, T) next-token ids."""
    import torch

    return torch.nn.functional.cross_entropy(
        logits.reshape(-1, logits.shape[-1]), target.reshape(-1)
    )


@workloads.register
class GPT(TorchWorkload):
    name: ClassVar[str] = "gpt"
    description: ClassVar[str] = (
        "decoder-only transformer, causal LM on copy-Markov tokens or a text file's characters"
    )
    quality: ClassVar[Quality] = Quality(name="token_accuracy", higher_is_better=True,
                                         bounds=(0, 1))
    options: ClassVar[Mapping[str, OptionSpec]] = {"data_dir": DATA_DIR}  # real loader
    tiny_epoch_guess_s: ClassVar[float | None] = 1.0
    smoke_rank: ClassVar[int | None] = 6
    lr: ClassVar[float] = 3e-3
    #: serial, quick profile, 3 epochs in batches of 64 on the chain's own walk, as full draws
    #: it (docs/measurements.md; taken on a busy machine, which moves the time, not the
    #: quality): the fallback --target-quality's basis, read only where no target was
    #: measured (full, which keeps batches of 64, or a text of one's own not yet calibrated)
    reference_quality: ClassVar[float | None] = 0.38

    #: profile -> size (a subclass brings its own table: gpt2)
    sizes: ClassVar[Mapping[str, Size]] = SIZES

    def make_data(self, profile: str, seed: int, data_dir: str | None = None) -> Dataset:
        size = self.sizes[profile]
        if data_dir is not None:
            from parabench.workloads.datasets import load_char_text

            data: Dataset = load_char_text(data_dir, seq_len=size.seq_len,
                                           vocab_size=REAL_VOCAB)
        else:
            held_out = 0.2 if size.held_out is None else size.held_out / size.sequences
            make = distinct_copy_sequences if size.distinct else copy_markov_sequences
            data = make(n=size.sequences, vocab_size=size.words or size.vocab,
                        seq_len=size.seq_len, seed=DATA_SEED, test_fraction=held_out)
        return dataclasses.replace(data, profile=profile)  # the model is sized by profile

    def default_batch_size(self, profile: str) -> int | None:
        return self.sizes[profile].batch

    def tensors(self, data: Dataset) -> tuple[torch.Tensor, ...]:
        import torch

        return tuple(
            torch.as_tensor(a, dtype=torch.long)
            for a in (data.x_train, data.y_train, data.x_test, data.y_test)
        )

    def shape(self, data: Dataset) -> GPTShape:
        """The model's shape: the profile's width and depth, the data's vocabulary and T."""
        from parabench.workloads.models.gpt import GPTShape

        if data.x_train.ndim != 2 or data.y_train.shape != data.x_train.shape:
            raise ConfigError(f"workload {self.name} needs (N, T) token ids and (N, T) next "
                              f"tokens; the data has {data.x_train.shape} / "
                              f"{data.y_train.shape}")
        size = self.sizes[data.profile or "quick"]
        return GPTShape(vocab=self.vocab_size(data), seq_len=data.x_train.shape[1],
                        width=size.width, heads=size.heads, layers=size.layers)

    def vocab_size(self, data: Dataset) -> int:
        """The model's vocabulary: the data's (its token names, else its largest id + 1)."""
        return len(getattr(data, "vocab", ()) or ()) or int(data.x_train.max()) + 1

    def build_model(self, data: Dataset, seed: int) -> torch.nn.Module:
        from parabench.workloads.models.gpt import build_gpt

        return build_gpt(self.shape(data), seed)

    def tp_plan(self, model: torch.nn.Module) -> TensorParallelPlan | None:
        from parabench.workloads.models.gpt import tp_plan

        return tp_plan(model)

    def model_flops_per_sample(self, data: Dataset) -> float | None:
        shape = self.shape(data)
        return float(shape.flops_per_token() * shape.seq_len)

    def loss_fn(self) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
        return lm_loss

    def make_optimizer(self, params: Any) -> torch.optim.Optimizer:
        import torch

        return torch.optim.AdamW(params, lr=self.lr, weight_decay=0.01)

    def score(self, outputs: torch.Tensor, targets: torch.Tensor) -> float:
        return float((outputs.argmax(dim=-1) == targets).float().mean().item())
