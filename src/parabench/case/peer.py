"""A hand-written training loop beside the suite (its peer), and parabench's speed ratio to it.

Usage::

    from parabench.case.peer import Peer, compare, hand_loop

    peer = Peer(workload="mlp", profile="tiny", batch_size=64)     # device, precision,
    run = hand_loop(peer, steps=2, warmup=1, repeats=2)            #   channels_last, compile,
    run.median, run.ci, run.peak_gpu_mb, run.to_dict()             #   threads, seed
    comparison = compare(peer, rounds=2, steps=2)   # parabench serial and the hand loop, ABAB
    comparison.ratio, comparison.rounds, comparison.loss_gap   # parabench / hand; same work?

    python scripts/hand_loop.py --workload vgg11 --profile full --device cuda \
        --precision bf16 --channels-last on --batch-size 64 --compare 5   # the CLI

**The hand loop** (:class:`HandLoop`) is what a careful practitioner writes, with nothing of
parabench's in its steps: the workload's own data, model, optimizer and loss (so the model is
literally the same), the training tensors on the device, and each step an index-select of a
seeded permutation (``x[idx]``, ``y[idx]``), forward and loss (under ``torch.autocast`` for
bf16 / fp16; fp16 with a ``GradScaler``), backward, optimizer step, ``zero_grad``. Per-step
losses stay on the device until the window's clock has stopped. ``channels_last`` puts the
model and the training tensor in ``torch.channels_last`` once (an index-select keeps the
format, so each batch is NHWC with no copy); ``compile`` is ``model.compile(dynamic=False)``,
compiled in the warm-up. A window is ``sync; t0; steps; sync; t1``, read through the case's
:class:`~parabench.core.clock.Clock` only because the tree lets nothing else read a timer
(``tests/project/test_layout.py``): the same two clock reads a hand loop makes.

Its sample stream is permutation ``k`` of the training set seeded as parabench's epoch ``k``
(:func:`parabench.torch.loop.epoch_order`'s formula, restated here), cut into full batches,
so its first steps train exactly parabench's first epoch's first batches: :func:`compare`
checks the two loops' losses there (``loss_gap``), which holds only if they do the same work.

**The comparison** (:func:`compare`) runs parabench's own serial case for the same
configuration (:class:`~parabench.case.lifecycle.StartedCase`: started, one epoch and the
warm-up window untimed, then one speed window per round) and the hand loop, both in this
process (the hand loop on the case's own data and training tensors, read only: drawn
once), interleaved: each round times one window of each with the same steps, the first of
the two alternating from round to round (ABBA), so a shared machine's drift hits both alike.
The ratio is parabench's samples/s over the hand loop's, the median of the per-round ratios.
"""

from __future__ import annotations

import dataclasses
import os
import statistics
from dataclasses import dataclass
from typing import Any

import torch

from parabench.case.bootstrap import median_ci
from parabench.config import DEVICES, PROFILES, RunConfig, available_cores
from parabench.core.clock import Clock
from parabench.workload import Dataset

#: autocast dtypes by precision name (None: no autocast)
DTYPES: dict[str, torch.dtype | None] = {"fp32": None, "bf16": torch.bfloat16,
                                         "fp16": torch.float16}
#: steps compared for parity at most (parabench's trace keeps its first TRACE_STEPS losses)
PARITY_STEPS = 20
#: seconds a comparison's window aims at when no steps are given: a round's ratio is two
#: windows' rates, and on a shared machine half-second windows (parabench's own) put rounds
#: apart by tens of percent (1-step cnn windows on 2 busy cores: 0.67-1.64)
WINDOW_S = 2.0


@dataclass(frozen=True, kw_only=True)
class Peer:
    """One configuration both loops train: what a serial parabench case would be given."""

    workload: str
    profile: str = "quick"
    device: str = "cpu"
    #: None: the workload's default for the profile (parabench's too)
    batch_size: int | None = None
    precision: str = "fp32"
    channels_last: bool = False
    compile: bool = False
    #: torch intra-op threads; None: every core (serial's default)
    threads: int | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        from parabench.registry import workloads

        if self.device not in DEVICES or self.profile not in PROFILES:
            raise ValueError(f"device {self.device!r} / profile {self.profile!r}: valid "
                             f"{', '.join(DEVICES)} / {', '.join(PROFILES)}")
        if self.precision not in DTYPES:
            raise ValueError(f"precision {self.precision!r}; valid: {', '.join(DTYPES)}")
        if self.precision == "fp16" and self.device != "cuda":
            raise ValueError("fp16 autocast needs CUDA; use bf16 on CPU")
        workload = workloads.get(self.workload)  # KeyError listing the valid names
        if self.channels_last and "channels_last" not in workload.options:
            raise ValueError(f"workload {self.workload} has no channels_last option "
                             f"(not convolutional)")

    @property
    def cores(self) -> int:
        return self.threads or available_cores()

    def run_config(self, steps: int | None = None) -> RunConfig:
        """parabench's serial case of this configuration (``steps`` per speed window)."""
        options: dict[str, Any] = {}
        if self.precision != "fp32":
            options["precision"] = self.precision
        if self.compile:
            options["compile"] = True
        if self.channels_last:
            options["channels_last"] = "on"
        return RunConfig(workload=self.workload, method="serial", device=self.device,
                         profile=self.profile, batch_size=self.batch_size, epochs=1,
                         threads_per_worker=self.cores, seed=self.seed, steps=steps,
                         options=options)


@dataclass(frozen=True, kw_only=True)
class Window:
    """One timed window of the hand loop."""

    seconds: float
    samples: int
    losses: list[float]

    @property
    def rate(self) -> float:
        return self.samples / self.seconds if self.seconds > 0 else float("nan")


class HandLoop:
    """The hand-written loop over ``peer``'s workload (see the module doc)."""

    def __init__(self, peer: Peer, data: Dataset | None = None,
                 train: tuple[torch.Tensor, torch.Tensor] | None = None) -> None:
        """``data`` and its training tensors ``train``: the workload's own, when already
        made (a full-profile image set takes a minute to draw); None: made here."""
        from parabench.registry import workloads

        torch.set_num_threads(peer.cores)
        workload = workloads.get(peer.workload)
        self.peer, self.seed = peer, peer.seed
        self.device = torch.device("cuda:0" if peer.device == "cuda" else "cpu")
        if data is None:
            data = workload.dataset(peer.run_config())  # what a serial case trains on
        x, y = train or workload.tensors(data)[:2]
        fmt = torch.channels_last if peer.channels_last else torch.contiguous_format
        self.x = x.to(self.device).contiguous(memory_format=fmt)
        self.y = self.x if y is x else y.to(self.device)  # an autoencoder's targets: its inputs
        self.n = len(self.x)
        torch.manual_seed(peer.seed)  # as parabench's case builder, before the model
        model = workload.build_model(data, peer.seed).to(self.device)
        if peer.channels_last:
            model = model.to(memory_format=torch.channels_last)
        if peer.compile:
            model.compile(dynamic=False)
        self.model = model.train()
        self.optimizer = workload.make_optimizer(model.parameters())
        self.loss_fn = workload.loss_fn()
        self.dtype = DTYPES[peer.precision]
        self.scaler = torch.amp.GradScaler("cuda") if peer.precision == "fp16" else None
        self.batch_size = peer.batch_size or workload.default_batch_size(peer.profile) or 64
        self.clock = Clock(sync=self.synchronize)
        self._pending = torch.empty(0, dtype=torch.long)  # the stream's unused indices
        self._permutations = 0

    def synchronize(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def _indices(self, count: int) -> torch.Tensor:
        """The next ``count`` indices of the stream: permutation k seeded as parabench's
        epoch k (``seed * 1_000_003 + k``), one after another."""
        parts, have = [self._pending], len(self._pending)
        while have < count:
            gen = torch.Generator().manual_seed(self.seed * 1_000_003 + self._permutations)
            parts.append(torch.randperm(self.n, generator=gen))
            self._permutations += 1
            have += self.n
        stream = torch.cat(parts)
        self._pending = stream[count:]
        return stream[:count]

    def step(self, xb: torch.Tensor, yb: torch.Tensor) -> torch.Tensor:
        """One training step; the loss, detached, left on the device."""
        if self.dtype is None:
            loss = self.loss_fn(self.model(xb), yb)
        else:
            with torch.autocast(self.device.type, dtype=self.dtype):
                loss = self.loss_fn(self.model(xb), yb)
        if self.scaler is None:
            loss.backward()
            self.optimizer.step()
        else:
            self.scaler.scale(loss).backward()
            self.scaler.step(self.optimizer)
            self.scaler.update()
        self.optimizer.zero_grad(set_to_none=True)
        return loss.detach()

    def window(self, steps: int) -> Window:
        """``steps`` full batches, timed: ``sync; t0; steps; sync; t1``."""
        bs, x, y = self.batch_size, self.x, self.y
        order = self._indices(steps * bs)
        losses: list[torch.Tensor] = []

        def run() -> None:
            idx_all = order.to(self.device)
            for s in range(steps):
                idx = idx_all[s * bs:(s + 1) * bs]
                losses.append(self.step(x[idx], y[idx]))  # x[idx] keeps channels_last

        _, seconds = self.clock.time(run)
        values = torch.stack(losses).float().cpu().tolist() if losses else []
        return Window(seconds=seconds, samples=steps * bs, losses=values)

    def reset_peak(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)

    def peak_gpu_mb(self) -> float | None:
        if self.device.type != "cuda":
            return None
        return torch.cuda.max_memory_allocated(self.device) / 2**20


def _load() -> float | None:
    try:
        return os.getloadavg()[0]
    except OSError:  # pragma: no cover - no load average on this platform
        return None


def _spread(rates: list[float]) -> dict[str, Any]:
    """Min, max and the median's 95 % bootstrap CI of ``rates``."""
    ci = median_ci(rates)
    return {"min": min(rates), "max": max(rates), "ci95": list(ci) if ci else None,
            "n": len(rates)}


@dataclass(frozen=True, kw_only=True)
class HandRun:
    """The hand loop's timed windows (after its warm-up) and what it ran."""

    peer: Peer
    batch_size: int
    steps: int
    warmup: int
    windows: list[Window]
    #: ``torch.cuda.max_memory_allocated`` over the timed windows (reset after the warm-up)
    peak_gpu_mb: float | None
    load: tuple[float | None, float | None] = (None, None)

    @property
    def rates(self) -> list[float]:
        return [w.rate for w in self.windows]

    @property
    def median(self) -> float:
        return statistics.median(self.rates)

    @property
    def ci(self) -> tuple[float, float] | None:
        return median_ci(self.rates)

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self.peer), "threads": self.peer.cores,
                "batch_size": self.batch_size,
                "steps": self.steps, "warmup": self.warmup, "repeats": len(self.windows),
                "samples_per_s": self.median, "samples_per_s_windows": self.rates,
                "spread": _spread(self.rates), "peak_gpu_mb": self.peak_gpu_mb,
                "final_loss": self.windows[-1].losses[-1] if self.windows else None,
                "load_before": self.load[0], "load_after": self.load[1]}

    def summary(self) -> str:
        p, ci = self.peer, self.ci
        ci_text = f" (95% CI {ci[0]:,.0f}-{ci[1]:,.0f})" if ci else ""
        peak = f", peak {self.peak_gpu_mb:,.0f} MB" if self.peak_gpu_mb is not None else ""
        return (f"hand loop {p.workload}/{p.profile} {p.device} bs={self.batch_size} "
                f"{p.precision} channels_last={'on' if p.channels_last else 'off'} "
                f"compile={'on' if p.compile else 'off'} threads={p.cores}: "
                f"{self.median:,.0f} samples/s{ci_text} over {len(self.windows)} windows of "
                f"{self.steps} steps{peak}")


def hand_loop(peer: Peer, *, steps: int, warmup: int, repeats: int) -> HandRun:
    """Build the hand loop, train ``warmup`` steps untimed, then ``repeats`` timed windows of
    ``steps`` steps each."""
    if steps < 1 or repeats < 1 or warmup < 0:
        raise ValueError("steps and repeats must be >= 1, warmup >= 0")
    before = _load()
    loop = HandLoop(peer)
    if warmup:
        loop.window(warmup)
    loop.reset_peak()
    windows = [loop.window(steps) for _ in range(repeats)]
    return HandRun(peer=peer, batch_size=loop.batch_size, steps=steps, warmup=warmup,
                   windows=windows, peak_gpu_mb=loop.peak_gpu_mb(), load=(before, _load()))


@dataclass(frozen=True, kw_only=True)
class Comparison:
    """parabench's serial case against the hand loop, round by round."""

    peer: Peer
    batch_size: int
    steps: int
    #: per round: both loops' samples/s and samples, the ratio, which ran first
    rounds: list[dict[str, Any]]
    #: the first steps' losses of each (parabench's first epoch; the hand loop's first steps)
    parabench_losses: list[float]
    hand_losses: list[float]
    load: tuple[float | None, float | None] = (None, None)

    @property
    def ratio(self) -> float:
        """parabench's samples/s over the hand loop's: the median of the per-round ratios."""
        return statistics.median(r["ratio"] for r in self.rounds)

    @property
    def loss_gap(self) -> float:
        """The largest relative difference of the two loops' first losses (0: the same)."""
        pairs = zip(self.parabench_losses, self.hand_losses, strict=True)
        return max((abs(a - b) / max(abs(a), abs(b), 1e-12) for a, b in pairs), default=0.0)

    def rate(self, who: str) -> float:
        return statistics.median(r[who] for r in self.rounds)

    def to_dict(self) -> dict[str, Any]:
        ratios = [r["ratio"] for r in self.rounds]
        return {**dataclasses.asdict(self.peer), "threads": self.peer.cores,
                "batch_size": self.batch_size,
                "steps": self.steps, "ratio": self.ratio, "ratio_spread": _spread(ratios),
                "parabench_samples_per_s": self.rate("parabench"),
                "hand_samples_per_s": self.rate("hand"), "rounds": self.rounds,
                "loss_gap": self.loss_gap, "parity_steps": len(self.hand_losses),
                "load_before": self.load[0], "load_after": self.load[1]}

    def summary(self) -> str:
        return (f"parabench serial / hand loop = {self.ratio:.3f} (median of "
                f"{len(self.rounds)} rounds; {self.rate('parabench'):,.0f} vs "
                f"{self.rate('hand'):,.0f} samples/s; first {len(self.hand_losses)} losses "
                f"agree within {self.loss_gap:.1e})")


def _window_steps(started: Any, batch_size: int) -> int:
    """Steps of a WINDOW_S window at the speed of parabench's warm-up window."""
    warm = started.lifecycle.windows[0]
    per_step = warm.seconds / max(1, warm.samples // batch_size)
    return max(started.window_steps or 1, round(WINDOW_S / per_step) if per_step > 0 else 1)


def compare(peer: Peer, *, rounds: int, steps: int | None = None) -> Comparison:
    """parabench's serial case and the hand loop, ``rounds`` interleaved windows each.

    ``steps`` per window: None makes a window of about WINDOW_S at the speed of parabench's
    warm-up window (at least the steps parabench calibrated there), then parabench's windows
    too. Both loops get one untimed window before the rounds (parabench's has its calibrated
    steps); the hand loop's first steps, before it, are the parity check's.
    """
    from parabench.case.lifecycle import StartedCase

    if rounds < 1:
        raise ValueError("rounds must be >= 1")
    before = _load()
    with StartedCase(peer.run_config(steps)) as started:  # start, epoch 0, warm-up window
        session = started.session
        assert session is not None
        if not steps:
            steps = _window_steps(started, session.batch_size or 1)
            started.lifecycle.window_steps = steps  # parabench's next windows: the same
        trace = getattr(session, "trace", None) or {}
        case = getattr(session, "case", None)  # serial's built case: its data, made once
        hand = (HandLoop(peer) if case is None else
                HandLoop(peer, data=case.data.data, train=(case.data.x, case.data.y)))
        if hand.batch_size != session.batch_size:
            raise RuntimeError(f"batch sizes differ: parabench {session.batch_size}, "
                               f"hand loop {hand.batch_size}")
        parity = min(len(trace.get("losses", [])), hand.n // hand.batch_size, PARITY_STEPS)
        hand_losses = hand.window(parity).losses if parity else []
        hand.window(steps)  # the hand loop's warm-up window (parabench's was in StartedCase)
        results = []
        for r in range(rounds):
            first = "parabench" if r % 2 == 0 else "hand"
            runs = {}
            for who in (["parabench", "hand"] if first == "parabench" else ["hand", "parabench"]):
                runs[who] = started.step() if who == "parabench" else hand.window(steps)
            pb, hd = runs["parabench"], runs["hand"]
            results.append({"parabench": pb.samples / pb.seconds, "hand": hd.rate,
                            "ratio": (pb.samples / pb.seconds) / hd.rate, "first": first,
                            "parabench_samples": pb.samples, "hand_samples": hd.samples})
    return Comparison(peer=peer, batch_size=hand.batch_size, steps=steps, rounds=results,
                      parabench_losses=list(trace.get("losses", []))[:parity],
                      hand_losses=hand_losses, load=(before, _load()))

