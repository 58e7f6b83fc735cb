"""``--batch-size auto``: the largest power of two that fits, found within a time budget.

Usage::

    search = search_batch(lambda batch: batch <= 48, limit=1000, budget_s=30.0)
    search.batch, search.stop                   # (32, 'oom'): 64 did not fit
    search.notes()["batch_size_auto_tried"]     # [[1, 'fit', 0.0], ..., [64, 'oom', 0.0]]
    # a case's search (what build.resolve_batch_size calls), on the model's device:
    # auto_batch(model, loss_fn, x, y, device, workers=1, precision="bf16").batch

:func:`search_batch` doubles from 1 while ``fits(batch)``; it stops at the first size that does
not fit (``oom``), when the next size would pass ``limit`` (the training set: ``limit``), or
when the time budget is spent (``time budget``): a size is tried only while the budget is
expected to cover it, twice the last try's seconds, as the work doubles. It keeps the largest
size that fit, and records every size tried with its outcome and seconds for the case's notes.
Not even a batch of one fitting raises ``MemoryError``, which the runner records as ``oom``.

On CUDA ``fits`` runs a real forward and backward at the size (under the case's autocast
precision, with room held for two optimizer buffers per parameter) and catches out-of-memory.
On the CPU it is an estimate: weights, gradients and two optimizer buffers plus the bytes
autograd saves per sample (measured on a small probe batch, also under the autocast) against
half the available RAM, shared between workers. Either way batch-norm buffers and the RNGs are
restored afterwards (:func:`leaves_no_trace`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import psutil
import torch

from parabench.core.clock import Stopwatch
from parabench.torch.loop import PRECISIONS

LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]

#: seconds a CUDA search may take (default): the sizes tried up to then are what it knows
DEFAULT_BUDGET_S = 30.0


@dataclass(kw_only=True)
class Search:
    """What a search found: the batch, why it stopped, and every size it tried."""

    batch: int
    #: ``oom`` (the next size did not fit; the CPU estimate's word: ``over budget``),
    #: ``limit`` (it would pass the limit) or ``time budget`` (spent, or too little left for
    #: the next size)
    stop: str
    #: (size, ``fit`` or the miss word, seconds) in the order tried
    tried: list[tuple[int, str, float]] = field(default_factory=list)
    budget_s: float | None = None
    seconds: float = 0.0
    #: how a size was judged (a case's ``batch_size_auto`` note)
    judged: str = ""
    #: the CPU estimate's memory budget (MB)
    budget_mb: float | None = None

    def notes(self) -> dict[str, Any]:
        """The case's notes: how sizes were judged, each size tried, why the search stopped."""
        out: dict[str, Any] = {"batch_size_auto": self.judged} if self.judged else {}
        if self.budget_mb is not None:
            out["batch_size_auto_budget_mb"] = round(self.budget_mb, 1)
        out["batch_size_auto_tried"] = [[b, outcome, round(s, 3)] for b, outcome, s in self.tried]
        out["batch_size_auto_stop"] = self.stop
        out["batch_size_auto_s"] = round(self.seconds, 3)
        if self.budget_s is not None:
            out["batch_size_auto_budget_s"] = self.budget_s
        return out


def search_batch(fits: Callable[[int], bool], *, limit: int, budget_s: float | None = None,
                 miss: str = "oom", too_big: str = "a batch of 1 does not fit",
                 timer: Callable[[], float] | None = None) -> Search:
    """The largest power of two ``<= limit`` for which ``fits`` holds, doubling from 1 and
    stopping at the first miss, at ``limit``, or when ``budget_s`` is spent (None: no bound).
    ``miss`` names a size that did not fit; ``too_big`` is the MemoryError's message when
    1 does not fit; ``timer`` (tests) replaces the host clock."""
    def stopwatch() -> Stopwatch:
        return Stopwatch(timer) if timer is not None else Stopwatch()

    watch = stopwatch()
    tried: list[tuple[int, str, float]] = []

    def attempt(batch: int) -> bool:
        one = stopwatch()
        ok = fits(batch)
        tried.append((batch, "fit" if ok else miss, one.seconds()))
        return ok

    if not attempt(1):
        raise MemoryError(too_big)
    batch = 1
    while True:
        if batch * 2 > limit:
            stop = "limit"
            break
        if budget_s is not None and watch.seconds() + 2 * tried[-1][2] > budget_s:
            stop = "time budget"
            break
        if not attempt(batch * 2):
            stop = miss
            break
        batch *= 2
    return Search(batch=batch, stop=stop, tried=tried, budget_s=budget_s,
                  seconds=watch.seconds())


def auto_batch(model: torch.nn.Module, loss_fn: LossFn, x: torch.Tensor, y: torch.Tensor,
               device: torch.device, *, workers: int = 1, precision: str = "fp32",
               budget_s: float | None = DEFAULT_BUDGET_S) -> Search:
    """The search of a case on ``device``: a real one on CUDA (bounded by ``budget_s``), the
    estimate on the CPU (half the available RAM / ``workers``)."""
    if device.type == "cuda":
        search = cuda_search(model, loss_fn, x, y, limit=len(x), precision=precision,
                             budget_s=budget_s)
        search.judged = "largest power of two without CUDA out-of-memory"
        return search
    budget = psutil.virtual_memory().available * 0.5 / workers
    search = cpu_search(model, loss_fn, x, y, budget_bytes=budget, limit=len(x),
                        precision=precision)
    search.judged = "largest power of two within half the free RAM / workers"
    search.budget_mb = budget / 2**20
    return search


def _autocast(device: torch.device, precision: str) -> contextlib.AbstractContextManager:
    """The training loop's autocast for ``precision`` (none for fp32)."""
    dtype = PRECISIONS[precision]
    return contextlib.nullcontext() if dtype is None else torch.autocast(device.type, dtype)


def activation_bytes_per_sample(
    model: torch.nn.Module, loss_fn: LossFn, x: torch.Tensor, y: torch.Tensor, probe: int = 8,
    precision: str = "fp32",
) -> float:
    """Bytes autograd saves for backward per sample, measured on a small probe batch."""
    saved = 0

    def pack(t: torch.Tensor) -> torch.Tensor:
        nonlocal saved
        saved += t.numel() * t.element_size()
        return t

    device = next(model.parameters()).device
    n = min(probe, len(x))
    xb, yb = x[:n].to(device), y[:n].to(device)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), _autocast(device,
                                                                                 precision):
        loss = loss_fn(model(xb), yb)
    loss.backward()
    model.zero_grad(set_to_none=True)
    return saved / n


def cpu_search(model: torch.nn.Module, loss_fn: LossFn, x: torch.Tensor, y: torch.Tensor, *,
               budget_bytes: float, limit: int, precision: str = "fp32") -> Search:
    """CPU: the largest power of two whose activations + parameter state fit the budget.

    Parameter state counts weights, gradients and two optimizer buffers. Raises MemoryError
    when not even a batch of one fits, so the case is recorded as ``oom``.
    """
    params = sum(p.numel() * p.element_size() for p in model.parameters()) * 4
    with leaves_no_trace(model):  # the probe's forward moved batch-norm statistics and RNG
        per_sample = activation_bytes_per_sample(model, loss_fn, x, y, precision=precision)
    per_sample *= 2  # activations + their gradients
    return search_batch(
        lambda batch: params + per_sample * batch <= budget_bytes, limit=limit,
        miss="over budget", too_big=(
            f"a batch of 1 needs ~{(params + per_sample) / 2**20:.0f} MB, budget is "
            f"{budget_bytes / 2**20:.0f} MB; use a smaller model or more memory"))


def auto_batch_size(model: torch.nn.Module, loss_fn: LossFn, x: torch.Tensor, y: torch.Tensor,
                    *, budget_bytes: float, limit: int) -> int:
    """:func:`cpu_search`'s batch."""
    return cpu_search(model, loss_fn, x, y, budget_bytes=budget_bytes, limit=limit).batch


@dataclass(kw_only=True)
class CudaFits:
    """``fits(batch)``: one forward/backward at ``batch`` does not run out of CUDA memory.

    The room for optimizer state (momentum / Adam buffers are allocated at the first real
    step) is taken at the first try and held until :meth:`release`; the cache is not emptied
    between tries (after a failed allocation the allocator frees its cache and retries before
    it raises, so a cached block never makes a size miss). A training set on the host (for a
    DataLoader) is copied a batch at a time; one on the device is sliced, not copied.
    """

    model: torch.nn.Module
    loss_fn: LossFn
    x: torch.Tensor
    y: torch.Tensor
    precision: str = "fp32"
    optimizer_state_factor: int = 2
    reserve: list[torch.Tensor] = field(default_factory=list)

    def __call__(self, batch: int) -> bool:
        model = self.model
        device = next(model.parameters()).device
        try:
            if not self.reserve:
                self.reserve.extend(torch.empty_like(p) for p in model.parameters()
                                    for _ in range(self.optimizer_state_factor))
            xb, yb = self.x[:batch].to(device), self.y[:batch].to(device)
            with _autocast(device, self.precision):
                loss = self.loss_fn(model(xb), yb)
            loss.backward()
            torch.cuda.synchronize(device)
            return True
        except torch.OutOfMemoryError:
            return False
        finally:
            model.zero_grad(set_to_none=True)

    def release(self) -> None:
        self.reserve.clear()


def cuda_search(model: torch.nn.Module, loss_fn: LossFn, x: torch.Tensor, y: torch.Tensor, *,
                limit: int, precision: str = "fp32", budget_s: float | None = DEFAULT_BUDGET_S
                ) -> Search:
    """CUDA: the largest power of two for which a real training step does not run out of
    memory, tried within ``budget_s``; it leaves no trace on the training that follows."""
    fits = CudaFits(model=model, loss_fn=loss_fn, x=x, y=y, precision=precision)
    try:
        with leaves_no_trace(model):
            return search_batch(fits, limit=limit, budget_s=budget_s,
                                too_big="a batch of 1 does not fit on the GPU; use more devices")
    finally:
        fits.release()
        torch.cuda.empty_cache()  # once: training starts with the tries' blocks returned


@contextlib.contextmanager
def leaves_no_trace(model: torch.nn.Module) -> Iterator[None]:
    """Batch-norm statistics (every buffer) and the RNGs (the CPU's, CUDA's where it is
    initialised) as they were before: a search's forward passes must not change training."""
    buffers = {name: b.detach().clone() for name, b in model.named_buffers()}
    cpu_rng = torch.get_rng_state()
    cuda_rng = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None
    try:
        yield
    finally:
        with torch.no_grad():
            for name, b in model.named_buffers():
                b.copy_(buffers[name])
        torch.set_rng_state(cpu_rng)
        if cuda_rng is not None:
            torch.cuda.set_rng_state_all(cuda_rng)
