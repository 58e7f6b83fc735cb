"""The decoder-only transformer of the ``gpt`` workload, as one ``nn.Sequential``.

Usage::

    import torch
    from parabench.workloads.models.gpt import GPTShape, build_gpt
    model = build_gpt(GPTShape(vocab=32, seq_len=16, width=32, heads=2, layers=2), seed=0)
    tokens = torch.randint(0, 32, (4, 16))
    logits = model(tokens)            # (N, T) int64 ids -> (N, T, vocab) logits

``model[0]`` is :class:`Embed` (token + learned position embeddings), ``model[1:-1]`` are
:class:`Block` s (pre-norm causal self-attention, then a pre-norm GELU MLP, each with a
residual), ``model[-1]`` is :class:`Head` (final LayerNorm and an untied linear head). The
sequence form lets pipeline and model-parallel methods cut it between blocks.

The names are the contract the parallelizers rely on (``parabench.torch.tensor_parallel``):
in every block, ``attn.wq``, ``attn.wk``, ``attn.wv`` are column-parallel and ``attn.wo``
row-parallel; ``mlp.fc`` is column-parallel and ``mlp.proj`` row-parallel. ``attn.wk`` has
no bias (softmax cancels one: its gradient is rounding noise). Attention takes its head
count from the tensor it is given (``view(n, t, -1, head_dim)``), so a column-sharded
``wq`` with ``heads / tp`` heads per rank runs the same code. :func:`tp_plan` declares that
split (and sequence parallelism's: the norms on sequence slices, attention, MLP and head
gathering the whole sequence, the embedding's output cut along it).
"""

from __future__ import annotations

import dataclasses
import math

import torch
from torch import nn

from parabench.workload import TensorParallelPlan


@dataclasses.dataclass(frozen=True)
class GPTShape:
    vocab: int
    seq_len: int
    width: int
    heads: int
    layers: int
    mlp_ratio: int = 4

    def __post_init__(self) -> None:
        if self.width % self.heads:
            raise ValueError(f"width {self.width} is not a multiple of heads {self.heads}")

    @property
    def head_dim(self) -> int:
        return self.width // self.heads

    def flops_per_token(self) -> int:
        """Training FLOPs per token (forward + backward = 3x forward; 2 per multiply-add).

        Counts the matmuls: per block 4 w^2 (q, k, v, o) + 2 r w^2 (MLP), attention's
        scores and weighted sum 2 T w (causal: half of it done, counted whole as is usual),
        and the head's w V. Embedding lookups, norms and softmax are left out.
        """
        w, t = self.width, self.seq_len
        per_block = 4 * w * w + 2 * self.mlp_ratio * w * w + 2 * t * w
        forward_macs = self.layers * per_block + w * self.vocab
        return 3 * 2 * forward_macs


class Embed(nn.Module):
    def __init__(self, shape: GPTShape) -> None:
        super().__init__()
        self.tok = nn.Embedding(shape.vocab, shape.width)
        self.pos = nn.Embedding(shape.seq_len, shape.width)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(ids.shape[1], device=ids.device)
        return self.tok(ids) + self.pos(positions)


class Attention(nn.Module):
    def __init__(self, shape: GPTShape) -> None:
        super().__init__()
        w = shape.width
        self.head_dim = shape.head_dim
        self.wq = nn.Linear(w, w)
        # no key bias: it adds q . b to every score of a query alike, which softmax cancels, so
        # its true gradient is 0 and Adam would step it by rounding noise (ddp vs serial moved
        # it by 140 %, failing weight parity on a parameter that computes nothing)
        self.wk = nn.Linear(w, w, bias=False)
        self.wv = nn.Linear(w, w)
        self.wo = nn.Linear(w, w)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n, t, _ = x.shape

        def heads(y: torch.Tensor) -> torch.Tensor:  # (n, t, h*d) -> (n, h, t, d)
            return y.view(n, t, -1, self.head_dim).transpose(1, 2)

        q, k, v = heads(self.wq(x)), heads(self.wk(x)), heads(self.wv(x))
        y = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.wo(y.transpose(1, 2).reshape(n, t, -1))


class MLP(nn.Module):
    def __init__(self, shape: GPTShape) -> None:
        super().__init__()
        self.fc = nn.Linear(shape.width, shape.mlp_ratio * shape.width)
        self.proj = nn.Linear(shape.mlp_ratio * shape.width, shape.width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(nn.functional.gelu(self.fc(x)))


class Block(nn.Module):
    def __init__(self, shape: GPTShape) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(shape.width)
        self.attn = Attention(shape)
        self.norm2 = nn.LayerNorm(shape.width)
        self.mlp = MLP(shape)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class Head(nn.Module):
    def __init__(self, shape: GPTShape) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(shape.width)
        self.out = nn.Linear(shape.width, shape.vocab)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.norm(x))


def build_gpt(shape: GPTShape, seed: int) -> nn.Sequential:
    """A freshly initialised model; GPT-2's init (normal 0.02, residual projections scaled)."""
    torch.manual_seed(seed)
    model = nn.Sequential(Embed(shape), *(Block(shape) for _ in range(shape.layers)), Head(shape))
    for name, p in model.named_parameters():
        if p.dim() < 2:
            continue
        std = 0.02
        if name.endswith(("attn.wo.weight", "mlp.proj.weight")):
            std /= math.sqrt(2 * shape.layers)
        nn.init.normal_(p, mean=0.0, std=std)
    for module in model.modules():
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)
    return model


def tp_plan(model: nn.Sequential) -> TensorParallelPlan:
    """The tensor-parallel split of a :func:`build_gpt` model (Megatron's): per block, q, k, v
    and the MLP's ``fc`` column-parallel, ``wo`` and ``proj`` row-parallel; the embedding and
    head stay whole on every rank. The degree must divide heads, width and MLP width."""
    blocks = [str(i) for i, m in enumerate(model) if isinstance(m, Block)]
    first: Block = model[int(blocks[0])]
    attn = first.attn
    width = attn.wq.in_features
    return TensorParallelPlan(
        colwise=tuple(f"{b}.{n}" for b in blocks
                      for n in ("attn.wq", "attn.wk", "attn.wv", "mlp.fc")),
        rowwise=tuple(f"{b}.{n}" for b in blocks for n in ("attn.wo", "mlp.proj")),
        divides={"heads": width // attn.head_dim, "width": width,
                 "MLP width": first.mlp.fc.out_features},
        norms=tuple(f"{b}.{n}" for b in blocks for n in ("norm1", "norm2")),
        gather=(*(f"{b}.{n}" for b in blocks for n in ("attn", "mlp")), str(len(model) - 1)),
        scatter=("0",),
        seq_dim=1,
        seq_len=model[0].pos.num_embeddings,
    )
