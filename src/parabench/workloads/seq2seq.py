"""``seq2seq``: a GRU encoder-decoder trained with teacher forcing (token accuracy, loss/token).

Usage::

    parabench run --method serial --workload seq2seq --profile quick
    parabench run --method serial --workload seq2seq --data-dir pairs.tsv   # source<TAB>target

The encoder GRU reads the source; its state at the last real (non-pad) token starts the
decoder GRU and is also fed to it at every step (Cho et al., 2014). Teacher forcing goes
through the one input tensor the shared loop knows about: ``x`` is the source (``src_len``
ids) followed by the target shifted right (``<bos>`` t1 t2 ...), which the model splits; the
labels are the target shifted left (t1 t2 ... ``<eos>``). Loss is cross-entropy per target
token, padding ignored; quality is the held-out token accuracy under teacher forcing (each
next token predicted from the true prefix), padding ignored.

Synthetic task: reverse a sequence of random tokens
(:func:`~parabench.workloads.synthetic.reversal_pairs`). Chance is about 1 / (vocabulary - 3)
per token; the test compares with the most frequent target token instead, which is higher.
The model takes two inputs in one tensor and has no sequential form: ``sequential`` is None.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from parabench.config import ConfigError, OptionSpec
from parabench.registry import workloads
from parabench.workload import DATA_DIR, Dataset, Quality, TorchWorkload
from parabench.workloads.nbow import vocab_size
from parabench.workloads.synthetic import PAD, reversal_pairs

if TYPE_CHECKING:
    from collections.abc import Callable

    import torch

#: profile -> (pairs, vocabulary size, max_len, embedding width, hidden width)
SIZES: dict[str, tuple[int, int, int, int, int]] = {
    "tiny": (3_000, 14, 8, 32, 128),
    "quick": (20_000, 24, 10, 64, 256),
    "full": (200_000, 40, 16, 128, 512),
}
#: the largest vocabulary taken from a real pairs file (rarer tokens become <unk>)
REAL_VOCAB = 20_000


def token_loss(logits: torch.Tensor, target: torch.Tensor, pad: int = PAD) -> torch.Tensor:
    """Mean cross-entropy per real target token: (N, T, V) logits against (N, T) ids."""
    import torch

    return torch.nn.functional.cross_entropy(
        logits.reshape(-1, logits.shape[-1]), target.reshape(-1), ignore_index=pad
    )


@functools.cache
def _encoder_decoder() -> type:
    """The model class, built on first use so importing this module does not import torch."""
    import torch
    from torch import nn

    class EncoderDecoder(nn.Module):
        def __init__(self, vocab: int, emb: int, hidden: int, src_len: int) -> None:
            super().__init__()
            self.src_len = src_len
            self.src_emb = nn.Embedding(vocab, emb, padding_idx=PAD)
            self.tgt_emb = nn.Embedding(vocab, emb, padding_idx=PAD)
            self.encoder = nn.GRU(emb, hidden, batch_first=True)
            self.decoder = nn.GRU(emb + hidden, hidden, batch_first=True)
            self.out = nn.Linear(hidden, vocab)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            src, tgt_in = x[:, : self.src_len], x[:, self.src_len :]
            states, _ = self.encoder(self.src_emb(src))
            # the state after the last real token; no pack_padded_sequence, so no host sync
            last = (src != PAD).sum(dim=1).clamp_min(1) - 1
            context = states[torch.arange(len(src), device=src.device), last]
            steps = tgt_in.shape[1]
            dec_in = torch.cat([self.tgt_emb(tgt_in), context[:, None].expand(-1, steps, -1)], 2)
            out, _ = self.decoder(dec_in, context[None].contiguous())
            return self.out(out)

    EncoderDecoder.__qualname__ = "EncoderDecoder"  # pickled by name, found by __getattr__
    return EncoderDecoder


def __getattr__(name: str) -> Any:
    # lets pickle (e.g. torch.save of a whole model) find the lazily built class
    if name == "EncoderDecoder":
        return _encoder_decoder()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _widths(src_len: int) -> tuple[int, int]:
    """(embedding, hidden) widths of the smallest profile whose sequences are this long."""
    fits = [s for s in SIZES.values() if s[2] >= src_len] or [SIZES["full"]]
    return fits[0][3], fits[0][4]


@workloads.register
class Seq2Seq(TorchWorkload):
    name: ClassVar[str] = "seq2seq"
    tiny_epoch_guess_s: ClassVar[float | None] = 5.0
    smoke_rank: ClassVar[int | None] = 5
    #: serial, quick profile, 3 epochs (README): the default --target-quality's basis
    reference_quality: ClassVar[float | None] = 0.93
    options: ClassVar[Mapping[str, OptionSpec]] = {"data_dir": DATA_DIR}  # real loader
    description: ClassVar[str] = "GRU encoder-decoder, teacher forcing, token sequences"
    quality: ClassVar[Quality] = Quality(name="token_accuracy", higher_is_better=True,
                                         bounds=(0, 1))
    lr: ClassVar[float] = 3e-3
    #: the loss averages over non-pad tokens: a split batch is not serial's mean, so methods
    #: that split it grade this workload statistical (torch.data_parallel.split_batch_grading)
    loss_mean_over_tokens: ClassVar[bool] = True

    def make_data(self, profile: str, seed: int, data_dir: str | None = None) -> Dataset:
        n, vocab, max_len, _, _ = SIZES[profile]
        if data_dir is not None:
            from parabench.workloads.datasets import load_text_pairs

            return load_text_pairs(data_dir, seed=seed, max_len=max_len, vocab_size=REAL_VOCAB)
        return reversal_pairs(n=n, vocab_size=vocab, max_len=max_len, seed=seed)

    def tensors(self, data: Dataset) -> tuple[torch.Tensor, ...]:
        """x = source then target shifted right; y = target shifted left (teacher forcing)."""
        import torch

        def split(source: Any, target: Any) -> tuple[torch.Tensor, torch.Tensor]:
            src = torch.as_tensor(source, dtype=torch.long)
            tgt = torch.as_tensor(target, dtype=torch.long)
            return torch.cat([src, tgt[:, :-1]], dim=1), tgt[:, 1:].contiguous()

        return (*split(data.x_train, data.y_train), *split(data.x_test, data.y_test))

    def loss_fn(self) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
        return functools.partial(token_loss, pad=PAD)

    def make_optimizer(self, params: Any) -> torch.optim.Optimizer:
        import torch

        return torch.optim.Adam(params, lr=self.lr)

    def score(self, outputs: torch.Tensor, targets: torch.Tensor) -> float:
        real = targets != PAD
        hits = (outputs.argmax(dim=-1) == targets) & real
        return float(hits.sum().item() / max(1, int(real.sum().item())))

    def build_model(self, data: Dataset, seed: int) -> torch.nn.Module:
        import torch

        if getattr(data, "pad_id", PAD) != PAD or data.y_train.ndim != 2:
            raise ConfigError(
                f"workload {self.name} needs padded (N, L) sources and (N, L + 1) targets "
                f"with padding id {PAD}, as load_text_pairs gives"
            )
        src_len = data.x_train.shape[1]
        emb, hidden = _widths(src_len)
        torch.manual_seed(seed)
        return _encoder_decoder()(vocab_size(data), emb, hidden, src_len)

    def sequential(self, model: torch.nn.Module) -> None:
        return None  # two inputs (source, shifted target) in one tensor: not one sequence
