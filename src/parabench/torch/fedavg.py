"""The ``fedavg`` rank program: K clients on disjoint shards, E local epochs, weighted averaging.

Usage (through the method; the pool builds one program per rank)::

    parabench run --workload cnn --method fedavg --workers 2 --clients 4 --split noniid

    shards = partition(labels, clients=4, split="noniid", seed=0)   # the same on every rank
    order = client_order(shards[k], seed=0, client=k, local_epoch=t)  # client k's pass t

Semantics (one ``train_epoch`` call is ``clients / local_epochs`` **rounds**, see "Equal work"):

* **Clients.** ``clients`` K (default: workers) split the training set into disjoint shards
  that cover it: ``iid`` deals a seeded permutation into K near-equal parts; ``noniid`` draws,
  for every class, client proportions from a Dirichlet(``DIRICHLET_ALPHA`` = 0.5) so each
  client sees a skewed class mix and shards differ in size (redrawn, seeded, until every
  client holds at least ``MIN_SHARE`` of a fair n / K share). Rank r hosts clients
  ``r*K/W .. (r+1)*K/W - 1`` and trains them one after another.
* **Batch.** ``--batch-size`` (or the workload's default) is each client's local mini-batch
  B, FedAvg's B: the batch the workload's learning rate is tuned for. (Splitting B over the
  clients instead, local SGD's convention, keeps serial's step count but steps at B / K with
  a rate tuned for B: mlp quick at batch 16 stalls at loss 2.0 serially, so no.) A round of E
  local epochs is thus E x n samples in E x n_k / B steps per client, so K clients need
  about ``rounds x E = K x epochs`` to take serial's number of steps each. With one client,
  fedavg is serial exactly: same shard (everything), order, batch and optimizer.
* **Local training.** Every client starts the round from the global weights and runs
  ``local_epochs`` E passes over its shard through the shared
  :class:`~parabench.torch.loop.TorchLoop`. Local pass t = round * E + e is ordered by
  :func:`client_order` (client 0 uses serial's own :func:`~parabench.torch.loop.epoch_order`).
* **Optimizer state is kept per client** across rounds (its own momentum buffers, one
  optimizer per client over the shared parameters): the clients here are persistent and take
  part in every round, so resetting would re-warm momentum each round for no reason, and
  keeping it is what makes K = 1 exactly serial.
* **Averaging.** The server's new weights are sum_k (n_k / n) w_k over all clients: each rank
  adds its clients' sample-weighted floating-point parameters **and floating-point buffers**
  (batch-norm running mean/var are averaged like weights, as FedAvg does) into one flat buffer
  per dtype, one all-reduce (SUM) sums the ranks, and every rank writes the result back, so
  all ranks hold the global model. Integer buffers (``num_batches_tracked``) are all-reduced
  with MAX: they count steps, not something to average.

Equal work: serial's epoch is n samples through one model. FedAvg's learners are the K
clients, each stepping on its own shard of about n / K samples, so a round of E local epochs
gives each client E x n / K samples. One fedavg **epoch** is therefore ``K / E`` rounds
(``rounds_per_epoch``; the method requires E to divide K): every client processes about n
samples, serial's epoch, and ``--epochs N`` compares fedavg and serial at equal samples
processed per learner (K x n in all, spread over the workers). Comparing one round with one
epoch gave each client 1 / K of serial's samples: mlp tiny, ``--epochs 2``, was 0.092
accuracy behind serial, 0.26 with 4 non-IID clients (issue #15). The result records
``rounds_per_epoch`` and ``samples_per_client`` (each client's samples per epoch); ``samples``
counts all clients'.

Timing: the epoch (its rounds) is ``ctx.timed`` (slowest rank between barriers). Components
are the loop's ``data`` / ``forward`` / ``backward`` / ``optimizer`` summed over this rank's
clients, plus ``communication``: loading the global weights into each client (the download) and the
weighted accumulation, all-reduce and write-back (the upload and averaging); and ``idle``: a
barrier before the all-reduce, i.e. the wait for the slowest rank's clients (unequal non-IID
shards, a busier core), kept out of ``communication``; ``other`` is the rest of the epoch
(:func:`parabench.torch.loop.partition`), so the components sum to its seconds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from parabench.config import OptionSpec, RunConfig
from parabench.core.rank import RankContext
from parabench.method import EpochStats
from parabench.workload import TorchWorkload

if TYPE_CHECKING:
    import torch

SPLITS = ("iid", "noniid")
#: the options this program reads, declared by ``fedavg`` (parabench.methods.fedavg)
FEDAVG_OPTIONS: dict[str, OptionSpec] = {
    "clients": OptionSpec(int, "federated clients (default: workers)", minimum=1),
    "local_epochs": OptionSpec(int, "federated local epochs per round", minimum=1, default=1),
    "split": OptionSpec(str, "federated data split", choices=SPLITS, default="iid"),
}
#: Dirichlet concentration of the non-IID split: 0.5 is the usual "strongly skewed but every
#: class somewhere" setting (Hsu et al. 2019; NIID-Bench); smaller is more skewed
DIRICHLET_ALPHA = 0.5
#: a non-IID draw is redrawn until every client holds this fraction of a fair n / K share
MIN_SHARE = 0.1
MAX_DRAWS = 1000
#: spacing of the clients' order seeds (a prime: no two clients share an order stream)
CLIENT_SEED_STRIDE = 104_729


def partition(labels: np.ndarray, *, clients: int, split: str, seed: int,
              alpha: float = DIRICHLET_ALPHA) -> list[np.ndarray]:
    """Disjoint, sorted index arrays, one per client, that together cover ``range(n)``."""
    n = len(labels)
    if clients > n:
        raise ValueError(f"{clients} clients for {n} training samples: some would be empty")
    rng = np.random.default_rng([seed, 0xFEDA])
    if split == "iid":
        return [np.sort(part) for part in np.array_split(rng.permutation(n), clients)]
    if split != "noniid":
        raise ValueError(f"unknown split {split!r}; valid: {', '.join(SPLITS)}")
    labels = np.asarray(labels)
    if labels.ndim != 1 or not np.issubdtype(labels.dtype, np.integer):
        raise ValueError(f"the noniid split needs one integer class label per sample, got "
                         f"targets of shape {labels.shape} and dtype {labels.dtype}")
    floor = max(1, int(MIN_SHARE * n / clients))
    for _ in range(MAX_DRAWS):
        parts = _dirichlet_draw(labels, clients, alpha, rng)
        if min(len(p) for p in parts) >= floor:
            return parts
    raise ValueError(f"no Dirichlet({alpha}) draw in {MAX_DRAWS} gave every one of {clients} "
                     f"clients {floor} samples; use fewer clients")


def _dirichlet_draw(labels: np.ndarray, clients: int, alpha: float,
                    rng: np.random.Generator) -> list[np.ndarray]:
    parts: list[list[np.ndarray]] = [[] for _ in range(clients)]
    for label in np.unique(labels):
        members = rng.permutation(np.flatnonzero(labels == label))
        shares = rng.dirichlet(np.full(clients, alpha))
        cuts = (np.cumsum(shares)[:-1] * len(members)).astype(int)
        for k, chunk in enumerate(np.split(members, cuts)):
            parts[k].append(chunk)
    return [np.sort(np.concatenate(p)) for p in parts]


def client_order(shard: torch.Tensor, *, seed: int, client: int, local_epoch: int
                 ) -> torch.Tensor:
    """Sample indices of one local pass: the shard in a seeded order (client 0: serial's)."""
    from parabench.torch.loop import epoch_order

    return shard[epoch_order(len(shard), seed + client * CLIENT_SEED_STRIDE, local_epoch)]


@dataclass(kw_only=True)
class Client:
    index: int
    shard: torch.Tensor
    optimizer: torch.optim.Optimizer

    @property
    def size(self) -> int:
        return len(self.shard)


class FedAvgProgram:
    """One rank: hosts ``clients / workers`` clients and takes part in the averaging."""

    def __init__(self, ctx: RankContext, *, workload: str, config: dict[str, Any]) -> None:
        import torch

        from parabench.registry import workloads
        from parabench.torch.build import build_case

        self.ctx = ctx
        self.config = cfg = RunConfig.from_dict(config)
        self.workload: TorchWorkload = workloads.get(workload)
        self.device = ctx.torch_device()
        self.clients_total = k = cfg.option("clients") or ctx.world_size
        self.local_epochs = cfg.option("local_epochs")
        self.split = cfg.option("split")
        if k < ctx.world_size or k % ctx.world_size:
            raise ValueError(f"{k} clients cannot be spread evenly over {ctx.world_size} ranks")
        # every client's batch B; ``auto``: what fits on every rank (the smallest wins)
        self.case = case = build_case(self.workload, cfg, self.device, world=ctx.world_size)
        self.notes: dict[str, Any] = dict(case.notes)
        self.n = len(case.data.x)
        self.x_test, self.y_test = case.data.x_test, case.data.y_test
        #: rounds per epoch: each client then processes serial's samples (None: E does not
        #: divide K; the method refuses such a run, the tests may still call train_round)
        self.rounds_per_epoch = k // self.local_epochs if k % self.local_epochs == 0 else None
        self.samples_per_epoch = case.samples_per_epoch * self.local_epochs * (
            self.rounds_per_epoch or 1)
        self.model = model = case.model
        self.batch_size, self.flops = case.batch_size, case.flops_per_sample
        case.reset_peaks()
        shards = partition(case.data.data.y_train, clients=k, split=self.split,
                           seed=cfg.training_seed)
        self.sizes = [len(s) for s in shards]
        per_rank = k // ctx.world_size
        mine = range(ctx.rank * per_rank, (ctx.rank + 1) * per_rank)
        self.clients = [Client(index=i, shard=torch.as_tensor(shards[i]),
                               optimizer=self.workload.make_optimizer(model.parameters()))
                        for i in mine]
        self.loop = case.loop(model, self.batch_size, optimizer=self.clients[0].optimizer)
        self.notes.update(case.notes)  # the compile warm-up's
        self._state = _ModelState(model)
        self.global_weights = self._state.snapshot()

    # -- the server side: hooks a test may override to break the averaging on purpose ---------

    def client_weight(self, client: Client) -> float:
        """Client k's share of the average: n_k / n (a Python float: 1.0 exactly for K = 1)."""
        return client.size / self.n

    def reduce(self, flat: torch.Tensor) -> None:
        """Sum the ranks' weighted sums in place (every rank gets the total)."""
        import torch.distributed as dist

        dist.all_reduce(flat)

    # -- one round ----------------------------------------------------------------------------

    def _train_client(self, client: Client, round_: int) -> list[EpochStats]:
        self.loop.optimizer = client.optimizer
        out = []
        for e in range(self.local_epochs):
            t = round_ * self.local_epochs + e
            order = client_order(client.shard, seed=self.config.training_seed, client=client.index,
                                 local_epoch=t)
            out.append(self.loop.train_epoch(t, indices=order))
        return out

    def _round(self, round_: int) -> tuple[list[EpochStats], dict[str, float]]:
        """Train this rank's clients, then average: (their passes, communication / idle s)."""
        from parabench.core.clock import Spans
        from parabench.torch.loop import synchronize

        spans = Spans(cuda=False)  # host clock: the exchange ends in a synchronise
        passes = []
        acc = self._state.zeros()
        for client in self.clients:
            with spans("communication"):
                self._state.load(self.global_weights)  # the download
            passes += self._train_client(client, round_)
            synchronize(self.device)
            with spans("communication"):
                self._state.accumulate(acc, self.client_weight(client))
        # Waiting here for the slowest rank (bigger shards, a busier core) is idle time, not
        # communication: measured apart, so the all-reduce below is only the data exchange.
        with spans("idle"):
            self.ctx.barrier()
        with spans("communication"):
            for flat in acc.floats.values():
                self.reduce(flat)
            self._state.reduce_counters(acc)
            self.global_weights = acc
            self._state.load(acc)
            synchronize(self.device)
        times = spans.seconds()
        return passes, {"communication": times["communication"], "idle": times["idle"]}

    # -- the protocol DistributedTorchSession calls ------------------------------------------

    def describe(self) -> dict[str, Any]:
        notes = {
            **self.notes, "clients": self.clients_total,
            "clients_per_worker": len(self.clients), "local_epochs": self.local_epochs,
            "split": self.split, "client_sizes": self.sizes, "batch": "per client",
            "optimizer_state": "kept per client across rounds",
            "buffers": "float buffers averaged like weights; integer buffers: max",
            "epoch_unit": f"{self.rounds_per_epoch} rounds (clients / local_epochs)",
            "rounds_per_epoch": self.rounds_per_epoch,
        }
        if self.split == "noniid":
            notes["dirichlet_alpha"] = DIRICHLET_ALPHA
        return {"batch_size": self.batch_size, "samples_per_epoch": self.samples_per_epoch,
                "flops_per_sample": self.flops, "notes": notes,
                # a fact parity shows (Result.facts), not a note
                "samples_per_client": [size * self.local_epochs * (self.rounds_per_epoch or 1)
                                       for size in self.sizes]}

    def train_epoch(self, epoch: int) -> EpochStats:
        """One epoch: ``rounds_per_epoch`` rounds, each client processing serial's samples."""
        if self.rounds_per_epoch is None:
            raise ValueError(f"local_epochs {self.local_epochs} does not divide "
                             f"{self.clients_total} clients: an epoch is not whole rounds")
        r = self.rounds_per_epoch
        return self._timed_rounds(range(epoch * r, (epoch + 1) * r))

    def epoch_parts(self, wanted: int) -> int:
        """One part per round, whatever ``wanted``: the global model exists between rounds."""
        return self.rounds_per_epoch or 1

    def train_part(self, epoch: int, part: int, parts: int) -> EpochStats:
        """Round ``part`` of epoch ``epoch`` (``parts``: :meth:`epoch_parts`)."""
        if parts != self.rounds_per_epoch:
            raise ValueError(f"an epoch is {self.rounds_per_epoch} rounds, not {parts} parts")
        return self.train_round(epoch * parts + part)

    def train_window(self, window: int, steps: int) -> EpochStats:
        """A speed window: one round, numbered past every round trained for quality."""
        from parabench.method import WINDOW_EPOCH_BASE

        return self.train_round(WINDOW_EPOCH_BASE + window)

    def train_round(self, round_: int) -> EpochStats:
        """One round (``round_`` is the round index): this rank's clients, then the average."""
        return self._timed_rounds(range(round_, round_ + 1))

    def _timed_rounds(self, rounds: range) -> EpochStats:
        from parabench.torch.loop import partition

        def run() -> tuple[list[EpochStats], dict[str, float]]:
            passes: list[EpochStats] = []
            exchange: dict[str, float] = {"communication": 0.0, "idle": 0.0}
            for r in rounds:
                p, ex = self._round(r)
                passes += p
                for name, value in ex.items():
                    exchange[name] += value
            return passes, exchange

        (passes, exchange), seconds = self.ctx.timed(run)
        samples = sum(p.samples for p in passes)
        components: dict[str, float] = {}
        for p in passes:
            for name, value in p.components.items():
                components[name] = components.get(name, 0.0) + value
        components.update(exchange)
        components = partition(components, seconds)  # the passes' own "other" recomputed
        loss = sum(p.loss * p.samples for p in passes) / samples
        served = [p.served for p in passes]  # the loop's own counts, checked by the lifecycle
        return EpochStats(seconds=seconds, loss=loss, samples=samples, components=components,
                          served=None if None in served else sum(s or 0 for s in served))

    def evaluate(self) -> float | None:
        from parabench.torch.loop import predict

        with self.case.evaluating():  # apart from training's GPU peak
            outputs = predict(self.model, self.x_test)
        return self.workload.score(outputs, self.y_test) if self.ctx.rank == 0 else None

    def state_dict(self) -> dict[str, Any]:
        """The global model's weights on this rank (CPU copies)."""
        return {k: v.detach().cpu().clone() for k, v in self.model.state_dict().items()}

    def peak_gpu_mb(self) -> float | None:
        return self.case.peak_gpu_mb()


@dataclass(kw_only=True)
class _Flat:
    """Model state as one flat tensor per floating dtype (one all-reduce each), plus counters."""

    floats: dict[Any, torch.Tensor]
    counters: list[torch.Tensor]


class _ModelState:
    """Reads, weights, sums and writes back a model's parameters and buffers, flat."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.groups: dict[Any, list[torch.Tensor]] = {}
        self.counters: list[torch.Tensor] = []
        for t in [*model.parameters(), *model.buffers()]:
            if t.is_floating_point():
                self.groups.setdefault(t.dtype, []).append(t)
            else:
                self.counters.append(t)

    def _views(self, flat: _Flat) -> Any:
        for d, ts in self.groups.items():
            yield from zip(flat.floats[d].split([t.numel() for t in ts]), ts, strict=True)

    def zeros(self) -> _Flat:
        import torch

        floats = {d: torch.zeros(sum(t.numel() for t in ts), dtype=d, device=ts[0].device)
                  for d, ts in self.groups.items()}
        return _Flat(floats=floats, counters=[torch.zeros_like(c) for c in self.counters])

    def snapshot(self) -> _Flat:
        import torch

        with torch.no_grad():
            floats = {d: torch.cat([t.reshape(-1) for t in ts]) for d, ts in self.groups.items()}
            return _Flat(floats=floats, counters=[c.clone() for c in self.counters])

    def accumulate(self, acc: _Flat, weight: float) -> None:
        """acc += weight x the model's floats; counters: the largest seen."""
        import torch

        with torch.no_grad():
            for view, t in self._views(acc):
                view.add_(t.reshape(-1), alpha=weight)
            for total, c in zip(acc.counters, self.counters, strict=True):
                torch.maximum(total, c, out=total)

    def load(self, flat: _Flat) -> None:
        import torch

        with torch.no_grad():
            for view, t in self._views(flat):
                t.copy_(view.view_as(t))
            for value, c in zip(flat.counters, self.counters, strict=True):
                c.copy_(value)

    @staticmethod
    def reduce_counters(flat: _Flat) -> None:
        import torch.distributed as dist

        for c in flat.counters:
            dist.all_reduce(c, op=dist.ReduceOp.MAX)
