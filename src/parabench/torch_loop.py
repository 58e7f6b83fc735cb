"""The one PyTorch training loop every torch method shares (serial here; DDP et al. wrap it).

Usage::

    loop = TorchLoop(model, optimizer, loss_fn, x, y, batch_size=64, device=dev, seed=0)
    stats = loop.train_epoch(epoch)    # EpochStats: synchronised wall time, mean loss
    outputs = predict(model, x_test, batch_size=1024)

The timed region holds exactly what a hand-written loop would: shuffle indices, slice, forward,
backward, step. Per-step losses stay on the device and are read once the clock has stopped,
so CUDA is not forced to synchronise at every step; the clock is read only after
``synchronize``.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch

from parabench.method import EpochStats


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def epoch_order(n: int, seed: int, epoch: int) -> torch.Tensor:
    """The sample order of one epoch: a seeded permutation, the same for every method."""
    gen = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
    return torch.randperm(n, generator=gen)


class TorchLoop:
    """Mini-batch training over tensors that already live on ``device``."""

    def __init__(
        self,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
        x: torch.Tensor,
        y: torch.Tensor,
        *,
        batch_size: int,
        device: torch.device,
        seed: int,
    ) -> None:
        self.model, self.optimizer, self.loss_fn = model, optimizer, loss_fn
        self.x, self.y = x, y
        self.batch_size, self.device, self.seed = batch_size, device, seed

    def train_epoch(self, epoch: int, indices: torch.Tensor | None = None) -> EpochStats:
        """Train over ``indices`` (default: all samples in this epoch's seeded order)."""
        model, opt, loss_fn, x, y, bs = (
            self.model, self.optimizer, self.loss_fn, self.x, self.y, self.batch_size
        )
        model.train()
        # Detached per-step losses, summed after the clock stops: a list append costs no
        # kernel launch, where an on-device running sum would add two ops to every step.
        losses: list[torch.Tensor] = []
        synchronize(self.device)
        t0 = time.perf_counter()
        # Producing the sample order is data loading: it belongs inside the epoch's time.
        if indices is None:
            indices = epoch_order(len(x), self.seed, epoch)
        indices = indices.to(self.device)
        for start in range(0, len(indices), bs):
            idx = indices[start : start + bs]
            xb, yb = x[idx], y[idx]
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(model(xb), yb)
            loss.backward()
            opt.step()
            losses.append(loss.detach())
        synchronize(self.device)
        seconds = time.perf_counter() - t0
        n = len(indices)
        return EpochStats(seconds=seconds, loss=_mean_loss(losses, n, bs), samples=n)


def _mean_loss(losses: list[torch.Tensor], n: int, batch_size: int) -> float:
    """Per-sample mean of per-batch mean losses (the last batch may be short)."""
    if not losses:
        return float("nan")
    weights = torch.full((len(losses),), float(batch_size))
    weights[-1] = n - batch_size * (len(losses) - 1)
    return float((torch.stack(losses).cpu() * weights).sum() / n)


@torch.no_grad()
def predict(model: torch.nn.Module, x: torch.Tensor, batch_size: int = 1024) -> torch.Tensor:
    model.eval()
    return torch.cat([model(x[i : i + batch_size]) for i in range(0, len(x), batch_size)])


def activation_bytes_per_sample(
    model: torch.nn.Module,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    x: torch.Tensor,
    y: torch.Tensor,
    probe: int = 8,
) -> float:
    """Bytes autograd saves for backward per sample, measured on a small probe batch."""
    saved = 0

    def pack(t: torch.Tensor) -> torch.Tensor:
        nonlocal saved
        saved += t.numel() * t.element_size()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = loss_fn(model(x[:probe]), y[:probe])
    loss.backward()
    model.zero_grad(set_to_none=True)
    return saved / min(probe, len(x))


def auto_batch_size(
    model: torch.nn.Module,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    budget_bytes: float,
    limit: int,
) -> int:
    """Largest power of two whose activations + parameter state fit ``budget_bytes`` (CPU).

    Parameter state counts weights, gradients and two optimizer buffers. Raises MemoryError
    when not even a batch of one fits, so the case is recorded as ``oom``.
    """
    params = sum(p.numel() * p.element_size() for p in model.parameters()) * 4
    per_sample = activation_bytes_per_sample(model, loss_fn, x, y) * 2  # activations + grads
    if params + per_sample > budget_bytes:
        raise MemoryError(
            f"a batch of 1 needs ~{(params + per_sample) / 2**20:.0f} MB, budget is "
            f"{budget_bytes / 2**20:.0f} MB; use a smaller model or more memory"
        )
    batch = 1
    while batch * 2 <= limit and params + per_sample * batch * 2 <= budget_bytes:
        batch *= 2
    return batch
