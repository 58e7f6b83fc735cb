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

The data are the same at every ``--seed`` (drawn by :data:`DATA_SEED`, as mlp's); the seed
draws the initial weights and the batch order. So serial's seed-to-seed spread is its
training's, which is what a statistical method's quality gate must tell a loss from: with a
chain per seed, how predictable each chain was moved the plateau from seed to seed. Quick
trains in batches of 16 (its :class:`Size`), not 64 as full does: four times the steps an
epoch at the same learning rate, so most seeds learn to copy within the first epochs. The
curves rise in two steps, and some seeds pause between them at different epochs, so serial's
spread at the calibrated quick budget is narrower than at batch 32 but still wider than a
0.02 converged check needs (docs/measurements.md, "Default quality targets (quick profile,
#41)").

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

from parabench.config import ConfigError, OptionSpec
from parabench.registry import workloads
from parabench.workload import DATA_DIR, Dataset, Quality, TensorParallelPlan, TorchWorkload
from parabench.workloads.synthetic import copy_markov_sequences

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


SIZES: dict[str, Size] = {
    "tiny": Size(2_000, 32, 32, width=64, heads=4, layers=2, batch=32),
    "quick": Size(12_000, 48, 48, width=96, heads=4, layers=3, batch=16),
    "full": Size(60_000, 64, 64, width=128, heads=4, layers=4, batch=64),
}
#: the most characters a text file's vocabulary keeps (rarer ones become ``<unk>``)
REAL_VOCAB = 256
#: the seed of the synthetic chain and its sequences, whatever the run's seed (module docstring)
DATA_SEED = 0


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
    #: serial, quick profile, 3 epochs in batches of 64 (docs/measurements.md; taken on a busy
    #: machine, which moves the time, not the quality): the fallback --target-quality's basis,
    #: read only where no target was measured (full, which keeps batches of 64, or a text of
    #: one's own not yet calibrated)
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
            data = copy_markov_sequences(n=size.sequences, vocab_size=size.words or size.vocab,
                                         seq_len=size.seq_len, seed=DATA_SEED,
                                         test_fraction=held_out)
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
