"""``gpt2``: the ``gpt`` workload at GPT-2 small's shape, meant for ``--device cuda``.

Usage::

    parabench run --method serial --workload gpt2 --profile tiny
    parabench run --method serial,ddp,fsdp --workload gpt2 --profile full --device cuda \\
        --workers 1 --precision bf16
    parabench run --method ddp,fsdp,tp --workload gpt2 --profile full --device cuda \\
        --workers 2 --precision bf16

The same code as :mod:`parabench.workloads.gpt` (model, loss, metric, optimizer, the
tensor-parallel plan, the ``nn.Sequential`` that pipeline and model-parallel methods cut,
the FLOPs formula :meth:`~parabench.workloads.models.gpt.GPTShape.flops_per_token`); only
the size table (:data:`SIZES`), the padded vocabulary and the learning rate differ.

At ``full`` the model is GPT-2 small's shape: 12 layers, 768 wide, 12 heads, context 512,
vocabulary 50,304 (GPT-2's 50,257 padded to a multiple of 64, as nanoGPT does). The head is
untied from the token embedding, as in gpt, so FSDP units and pipeline stages own disjoint
parameters: 162.8 M parameters, 124.1 M counting the head's weight once as GPT-2 ties it
(GPT-2 small: 124.4 M at context 1,024 with a key bias). Training FLOPs per token 0.80 G
(nanoGPT's 6 N + 12 L T w, N the weight matrices, the head's included), 408.6 G per
512-token sample. On CPU a full epoch takes hours; ``tiny`` (2 x 64, context 32, a
256-token vocabulary) and ``quick`` (4 x 128, context 128, 1,024) are smaller members of
the family so the code path runs on CPU. At full, ``--precision bf16`` and the default
batch of 32 fit one H200 with room to spare (the evaluation's logits, below, are most of
the peak); a full epoch is 8,192 sequences.

Data: gpt's copy-Markov sequences (:func:`~parabench.workloads.synthetic.copy_markov_sequences`)
over a chain of ``Size.words`` ids, so ``full``'s 8,448 sequences take about a second to
make. The model's vocabulary is the profile's padded one whatever the data uses (a
``--data-dir`` text file's characters too): every step pays the embedding, head and
softmax at full size while the targets use a corner of them, as a batch of real text uses a
fraction of GPT-2's tokens. The corner is kept small (28 words) because the padding slows
learning: on a chain of 124 words the padded model hardly left the unigram plateau in
three quick epochs. ``full`` holds out 256 sequences only: evaluation materialises the
held-out logits (256 x 512 x 50,304 floats, 26 GB in float32).

The optimizer is gpt's AdamW at 1e-3, which learned faster than gpt's 3e-3 at quick and
full; GPT-2 small was trained at 6e-4 with a warm-up, which these short runs do without.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from parabench.config import ConfigError
from parabench.registry import workloads
from parabench.workloads.gpt import GPT, Size

if TYPE_CHECKING:
    from collections.abc import Mapping

    from parabench.workload import Dataset

SIZES: dict[str, Size] = {
    "tiny": Size(2_000, 256, 32, width=64, heads=4, layers=2, batch=32, words=32),
    "quick": Size(4_000, 1_024, 128, width=128, heads=4, layers=4, batch=32, words=32,
                  held_out=400),
    # GPT-2 small; 8,192 training sequences (made in ~1 s), ~12 s an epoch at bf16 on an H200
    "full": Size(8_448, 50_304, 512, width=768, heads=12, layers=12, batch=32, words=32,
                 held_out=256),
}


@workloads.register
class GPT2(GPT):
    name: ClassVar[str] = "gpt2"
    description: ClassVar[str] = (
        "gpt at GPT-2 small's shape (12 x 768, 12 heads, context 512, vocab 50,304) at full"
    )
    sizes: ClassVar[Mapping[str, Size]] = SIZES
    tiny_epoch_guess_s: ClassVar[float | None] = 1.5
    smoke_rank: ClassVar[int | None] = None  # gpt stands for the family in plain pytest
    in_coverage: ClassVar[bool] = False  # gpt stands for the family in a bare `run`
    lr: ClassVar[float] = 1e-3
    #: serial, quick profile, 3 epochs, seeds 0-2: 0.316, 0.315, 0.297 (one H200, fp32,
    #: 2026-11-28; not yet in docs/measurements.md): the default --target-quality's basis
    reference_quality: ClassVar[float | None] = 0.31

    def vocab_size(self, data: Dataset) -> int:
        """The profile's padded vocabulary, whatever part of it the data uses."""
        used, padded = super().vocab_size(data), self.sizes[data.profile or "quick"].vocab
        if used > padded:
            raise ConfigError(f"workload {self.name} at profile {data.profile} has a "
                              f"vocabulary of {padded}; the data uses {used} token ids")
        return padded
