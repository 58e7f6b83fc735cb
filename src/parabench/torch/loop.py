"""The one PyTorch training loop every torch method shares (serial here; DDP et al. wrap it).

Usage::

    loop = TorchLoop(model, optimizer, loss_fn, x, y, batch_size=64, device=dev, seed=0,
                     precision="bf16", num_workers=0, pin_memory=False,  # 2, True: DataLoader
                     clock=Clock())            # default: a Clock that synchronises ``dev``
    stats = loop.train_epoch(epoch)            # EpochStats: synchronised wall time, mean loss,
    stats = loop.train_epoch(epoch, indices)   #   components; or only this rank's shard
    stats = loop.train_epoch(-1, window_order(n, seed, w, steps * bs))  # a speed window
    stats = loop.train_epoch(epoch, span=part_span(n, bs, 1, 4))  # an epoch's second quarter
    outputs = predict(model, x_test)           # in chunks: PREDICT_CHUNK by x's device

The timed region holds exactly what a hand-written loop would: produce the epoch's sample
order, fetch each batch, forward, backward, step. Per-step losses stay on the device and are
read once the clock has stopped, so CUDA is not forced to synchronise at every step. The epoch
is timed by the loop's :class:`~parabench.core.clock.Clock` (``sync; t0; epoch; sync; t1``); the
loop reads no timer of its own.

Batches come one of two ways. With ``num_workers == 0`` and no ``pin_memory`` the tensors
already live on ``device`` and each batch is an index-select (what a careful hand-written loop
does). Otherwise a ``torch.utils.data.DataLoader`` with those knobs yields whole batches (a
batch sampler over the same seeded order, so the math is identical), its workers persist
across epochs, and batches are copied to the device (``non_blocking`` when pinned).

Time components (``EpochStats.components``, seconds per epoch): ``data`` (fetching the batch
and moving it to the device), ``forward`` (model and loss), ``backward``, ``optimizer``
(zero_grad + step). On CPU these are host clock reads (a :class:`parabench.core.clock.Stopwatch`) at
the step's boundaries (about 60 ns each, four per step: far below 1 % of any step here). On
CUDA they are CUDA events recorded on the stream at the same boundaries, read after the
epoch's final synchronise, so no extra synchronisation enters the timed loop; ``data`` on
CUDA is then the GPU-timeline gap while the host fetched the batch. Components are exclusive
and partition the epoch: ``other`` is the rest (producing the sample order, the loop's own
bookkeeping), :func:`partition`. Methods add their own, exclusive too: ``communication``
(DDP's all-reduce in flight, taken out of ``backward``; fedavg's exchange; hybrid's gradient
all-reduce) and ``idle`` (fedavg waiting for the slowest rank; a pipeline stage computing
nothing). A distributed epoch's components are its slowest rank's
(:func:`parabench.torch.session.fold_epochs`), so they sum to the epoch's seconds.

Precision: ``fp32`` (default), or ``bf16`` / ``fp16`` autocast around forward and loss
(``fp16`` with a gradient scaler, CUDA only).

The trace (exact parity, :mod:`parabench.analysis.trajectory`): with ``loop.trace_steps = K``
and ``loop.digest_fn`` set, the first epoch this loop trains keeps its first K losses and, right
after step K, calls ``digest_fn`` (:func:`weight_digest` of the unwrapped model; on every rank,
since FSDP's is a collective). Its seconds (``trace_s``, after a device sync) are left out
of the epoch's time and lie between two steps' marks, so no component holds them. The
piece (``trace_piece``: per-step loss sums and sample counts, the digest) is built after the
clock stops; :func:`parabench.torch.session.merge_trace` turns the ranks' pieces into a trace.
The trace runs on across the calls that train the parts of that first epoch (``span``, or a
rank's share of a part); a call for another epoch ends an unfinished trace (no piece).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

import torch

from parabench.core.clock import Clock, Stopwatch
from parabench.method import TRACE_STEPS, EpochStats
from parabench.torch.digest import digest_coverage, model_size, weight_digest  # noqa: F401

COMPONENTS = ("data", "forward", "backward", "optimizer")
PRECISIONS = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def epoch_order(n: int, seed: int, epoch: int) -> torch.Tensor:
    """The sample order of one epoch: a seeded permutation, the same for every method."""
    gen = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
    return torch.randperm(n, generator=gen)


def epoch_steps(n: int, batch_size: int) -> int:
    """Steps of an epoch of ``n`` samples (the last batch may be short)."""
    return -(-n // batch_size)


def part_span(n: int, batch_size: int, part: int, parts: int) -> tuple[int, int]:
    """Steps ``[first, last)`` of part ``part`` of ``parts`` of an epoch: the epoch's steps in
    near-equal runs, so the parts in order are the epoch (``parts`` at most its steps)."""
    steps = epoch_steps(n, batch_size)
    if not 1 <= parts <= steps or not 0 <= part < parts:
        raise ValueError(f"part {part} of {parts} of an epoch of {steps} steps")
    return part * steps // parts, (part + 1) * steps // parts


def window_order(n: int, seed: int, window: int, samples: int) -> torch.Tensor:
    """The ``samples`` sample indices of speed window ``window``: seeded permutations of the
    ``n`` training samples, concatenated (a window may be many tiny epochs or part of one).

    Every method draws the same order, so a window's global batches hold the same samples
    under serial, DDP (each rank its ``[rank::world]`` share) and the pipeline's replicas.
    """
    from parabench.method import WINDOW_EPOCH_BASE

    reps = -(-samples // n)
    first = WINDOW_EPOCH_BASE + window * reps
    return torch.cat([epoch_order(n, seed, first + i) for i in range(reps)])[:samples]


class _Batches(torch.utils.data.Dataset):
    """A tensor dataset indexed by a whole batch of indices at once (no per-sample collate)."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor) -> None:
        self.x, self.y = x, y

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, idx: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        index = torch.as_tensor(idx)
        return self.x[index], self.y[index]


class _EpochBatches(torch.utils.data.Sampler):
    """Yields the current epoch's order in batches; the loop sets ``order`` each epoch."""

    def __init__(self, batch_size: int) -> None:
        self.batch_size = batch_size
        self.order: list[int] = []

    def __len__(self) -> int:
        return -(-len(self.order) // self.batch_size)

    def __iter__(self) -> Iterator[list[int]]:
        bs = self.batch_size
        return (self.order[i : i + bs] for i in range(0, len(self.order), bs))


def partition(components: Mapping[str, float], seconds: float) -> dict[str, float]:
    """``components`` with ``other``: the epoch's seconds no named component covers.

    Named components are exclusive, so ``other`` is never below zero beyond clock noise (it is
    clamped at 0 there); a sum of named components well above ``seconds`` is a double count
    that clamping cannot hide (the sum then exceeds the epoch).
    """
    named = {name: value for name, value in components.items() if name != "other"}
    return {**named, "other": max(0.0, seconds - sum(named.values()))}


class _Marks:
    """Marks step boundaries: host clock on CPU, CUDA events on a GPU."""

    def __init__(self, device: torch.device, events: list[Any]) -> None:
        self.cuda = device.type == "cuda"
        self.marks: list[Any] = []
        self.watch = Stopwatch()  # CPU: marks are its seconds; their differences are the times
        self.events = events  # CUDA events reused across epochs: creation is not free

    def mark(self) -> None:
        if not self.cuda:
            self.marks.append(self.watch.seconds())
            return
        if len(self.marks) == len(self.events):
            self.events.append(torch.cuda.Event(enable_timing=True))
        event = self.events[len(self.marks)]
        event.record()
        self.marks.append(event)

    def components(self) -> dict[str, float]:
        """Seconds per component; marks come in groups of five per step (after a sync)."""
        totals = dict.fromkeys(COMPONENTS, 0.0)
        for i in range(0, len(self.marks) - 4, 5):
            step = self.marks[i : i + 5]
            for name, a, b in zip(COMPONENTS, step, step[1:], strict=False):
                totals[name] += a.elapsed_time(b) / 1e3 if self.cuda else b - a
        return totals


class TorchLoop:
    """Mini-batch training; tensors live on ``device`` unless a DataLoader is asked for."""

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
        precision: str = "fp32",
        num_workers: int = 0,
        pin_memory: bool = False,
        clock: Clock | None = None,
    ) -> None:
        if precision not in PRECISIONS:
            raise ValueError(f"unknown precision {precision!r}; valid: {', '.join(PRECISIONS)}")
        if precision == "fp16" and device.type != "cuda":
            raise ValueError("fp16 autocast needs CUDA; use bf16 on CPU")
        self.model, self.optimizer, self.loss_fn = model, optimizer, loss_fn
        self.x, self.y = x, y
        self.batch_size, self.device, self.seed = batch_size, device, seed
        self.dtype = PRECISIONS[precision]
        self.clock = clock or Clock(sync=lambda: synchronize(device))
        enabled = precision == "fp16"
        self.scaler = torch.amp.GradScaler(device.type, enabled=enabled) if enabled else None
        self._events: list[Any] = []
        #: the trace (see the module doc): K, the digest callback, what was recorded
        self.trace_steps = 0
        self.digest_fn: Callable[[], dict[str, Any] | None] | None = None
        self.trace_piece: dict[str, Any] | None = None
        #: the traced steps so far (loss, samples) and the epoch they belong to
        self._traced: list[tuple[torch.Tensor, int]] = []
        self._trace_epoch: int | None = None
        #: the model's size (:func:`model_size`), which the digest's coverage is checked against
        self.model_size: dict[str, int] | None = None
        self.trace_s = 0.0
        self.loader: torch.utils.data.DataLoader | None = None
        #: samples the batches handed to the model held, counted as they are served (the
        #: independent count behind ``EpochStats.served``; reset by every ``train_epoch``)
        self.served = 0
        if num_workers > 0 or pin_memory:
            self.sampler = _EpochBatches(batch_size)
            self.loader = torch.utils.data.DataLoader(
                _Batches(x, y),
                sampler=self.sampler,
                batch_size=None,  # the sampler yields whole batches
                num_workers=num_workers,
                pin_memory=pin_memory,
                persistent_workers=num_workers > 0,  # spawned once, in the warm-up epoch
            )

    def uses_loader(self) -> bool:
        return self.loader is not None

    def _batches(self, indices: torch.Tensor) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        if self.loader is None:
            x, y, bs = self.x, self.y, self.batch_size
            indices = indices.to(self.device)
            for start in range(0, len(indices), bs):
                idx = indices[start : start + bs]
                self.served += len(idx)
                yield x[idx], y[idx]
            return
        self.sampler.order = indices.tolist()
        non_blocking = self.loader.pin_memory
        for xb, yb in self.loader:
            self.served += len(yb)
            yield (
                xb.to(self.device, non_blocking=non_blocking),
                yb.to(self.device, non_blocking=non_blocking),
            )

    def _forward(self, xb: torch.Tensor, yb: torch.Tensor) -> torch.Tensor:
        if self.dtype is None:
            return self.loss_fn(self.model(xb), yb)
        with torch.autocast(self.device.type, dtype=self.dtype):
            return self.loss_fn(self.model(xb), yb)

    def train_epoch(self, epoch: int, indices: torch.Tensor | None = None,
                    span: tuple[int, int] | None = None) -> EpochStats:
        """Train over ``indices`` (default: all samples in this epoch's seeded order, or its
        steps ``span`` = ``(first, last)``, :func:`part_span`)."""
        model, opt, scaler = self.model, self.optimizer, self.scaler
        model.train()
        # Detached per-step losses, summed after the clock stops: a list append costs no
        # kernel launch, where an on-device running sum would add two ops to every step.
        losses: list[torch.Tensor] = []
        marks = _Marks(self.device, self._events)
        opt.zero_grad(set_to_none=True)
        tracing = self._tracing(epoch)
        digest: list[dict[str, Any] | None] = []
        self.trace_s = 0.0
        self.served = 0

        def run() -> int:
            # Producing the sample order is data loading: it belongs inside the epoch's time.
            order = epoch_order(len(self.x), self.seed, epoch) if indices is None else indices
            if span is not None:
                order = order[span[0] * self.batch_size : span[1] * self.batch_size]
            batches = self._batches(order)
            while True:
                marks.mark()
                batch = next(batches, None)
                if batch is None:
                    marks.marks.pop()  # the mark of a step that did not happen
                    return len(order)
                xb, yb = batch
                marks.mark()
                loss = self._forward(xb, yb)
                marks.mark()
                (scaler.scale(loss) if scaler else loss).backward()
                marks.mark()
                if scaler:
                    scaler.step(opt)
                    scaler.update()
                else:
                    opt.step()
                opt.zero_grad(set_to_none=True)
                marks.mark()
                losses.append(loss.detach())
                if tracing and len(self._traced) < self.trace_steps:
                    self._traced.append((losses[-1], len(yb)))
                    if len(self._traced) == self.trace_steps:
                        self._digest(digest)

        n, seconds = self.clock.time(run)
        if digest:
            self.trace_piece = _piece(self._traced, digest[0])
            self.trace_piece["model"] = self.model_size
        seconds -= self.trace_s
        return EpochStats(
            seconds=seconds,
            loss=_mean_loss(losses, n, self.batch_size),
            samples=n,
            components=partition(marks.components(), seconds),
            served=self.served,
        )

    def _tracing(self, epoch: int) -> bool:
        """Whether this call traces: the first epoch trained, over all its calls (parts)."""
        if self.trace_piece is not None or self.trace_steps <= 0 or not self.digest_fn:
            return False
        if self._trace_epoch is None:
            self._trace_epoch = epoch
        return self._trace_epoch == epoch and len(self._traced) < self.trace_steps

    def _digest(self, out: list[dict[str, Any] | None]) -> None:
        """The weight digest after step K, its seconds kept apart (``trace_s``)."""
        assert self.digest_fn is not None
        # its own clock (not the harness's windows); its first sync leaves the queued steps,
        # which are training, in the epoch's time
        digest, self.trace_s = Clock(sync=lambda: synchronize(self.device)).time(self.digest_fn)
        out.append(digest)


def _piece(traced: list[tuple[torch.Tensor, int]],
           digest: dict[str, Any] | None) -> dict[str, Any]:
    """A rank's trace piece: per step, the loss summed over its samples and their count."""
    sizes = [size for _, size in traced]
    means = torch.stack([loss for loss, _ in traced]).double().cpu().tolist() if traced else []
    return {"loss_sums": [m * s for m, s in zip(means, sizes, strict=True)], "samples": sizes,
            "digest": digest}


def trace_steps(n: int, global_batch: int) -> int:
    """K: TRACE_STEPS, or the steps of one epoch when it has fewer (the same for every method)."""
    return min(TRACE_STEPS, -(-n // global_batch))


def _mean_loss(losses: list[torch.Tensor], n: int, batch_size: int) -> float:
    """Per-sample mean of per-batch mean losses (the last batch may be short)."""
    if not losses:
        return float("nan")
    weights = torch.full((len(losses),), float(batch_size))
    weights[-1] = n - batch_size * (len(losses) - 1)
    return float((torch.stack(losses).float().cpu() * weights).sum() / n)


#: held-out samples per forward pass of :func:`predict`, by the device type of ``x``: on a CPU
#: a large batch falls out of the caches (cnn tiny's 720 held-out images: 0.34 s in chunks of
#: 128, 0.57 s in one of 1,024; docs/measurements.md), a GPU wants the big one
PREDICT_CHUNK = {"cpu": 128}
PREDICT_CHUNK_DEFAULT = 1024


@torch.no_grad()
def predict(model: torch.nn.Module, x: torch.Tensor, batch_size: int | None = None) -> torch.Tensor:
    """``model``'s outputs on ``x`` in eval mode, ``batch_size`` samples per forward pass
    (None: :data:`PREDICT_CHUNK` for ``x``'s device): a speed choice, as in eval mode no
    output depends on the others in its chunk (up to floating-point rounding)."""
    model.eval()
    size = batch_size or PREDICT_CHUNK.get(x.device.type, PREDICT_CHUNK_DEFAULT)
    return torch.cat([model(x[i : i + size]) for i in range(0, len(x), size)])
