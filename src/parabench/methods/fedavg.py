"""``fedavg``: federated averaging - K clients, E local epochs per round, sample-weighted average.

Usage::

    parabench run --workload cnn --method fedavg --workers 2 --clients 4 --split noniid
    parabench run --workload mlp --method fedavg --workers 2 --epochs 12 --split iid,noniid

A round: every client trains ``local_epochs`` E passes over its own shard starting from the
global model, then the server averages the clients' weights by sample count. One epoch of the
result is ``clients / local_epochs`` rounds, so that each client processes serial's epoch of
samples (equal work per learner; E must divide the clients). ``epoch_s`` is the epoch's
slowest rank between barriers, ``samples`` counts all samples the clients processed (K x the
training set), ``facts.samples_per_client`` each client's, the loss is the sample-weighted
mean of the clients' losses. Worker processes are ranks of a persistent
:class:`~parabench.core.pool.WorkerPool` (gloo on CPU, NCCL with one GPU per rank on
CUDA); each hosts ``clients / workers`` clients, trained one after another, and the average is
one all-reduce of the sample-weighted parameters and buffers. Splits (IID, Dirichlet 0.5
non-IID), the per-client batch, optimizer state, buffers and the time components
(``communication``, ``idle``) are described in :mod:`parabench.torch.fedavg`.

Why K / E rounds an epoch: each client steps on the workload's batch over n / K samples, so
one round of one local epoch is 1 / K of a serial epoch's steps per client. Equal rounds fall
short for that reason alone (well below serial's accuracy on mlp tiny with 4 clients; the
figures are in docs/measurements.md); K rounds per serial epoch reach serial's quality on IID
and non-IID splits (:mod:`parabench.torch.fedavg`).

FedAvg is not serial's mathematics (K > 1 clients drift apart between averages), so
``parity = "statistical"``: held-out quality must come within
``SPREAD_FACTOR x seed_spread[profile]`` of serial's (see :mod:`parabench.analysis.parity`).
With ``--clients 1`` it is serial exactly.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from parabench import hardware
from parabench.config import OptionSpec, RunConfig
from parabench.method import Method, Session
from parabench.registry import methods
from parabench.torch.fedavg import FEDAVG_OPTIONS, FedAvgProgram
from parabench.torch.options import TORCH_OPTIONS
from parabench.torch.session import DistributedTorchSession
from parabench.workload import Workload


class FedAvgSession(DistributedTorchSession):
    program: ClassVar[str | type] = FedAvgProgram
    #: a speed window is one round (every client's local epochs, then the average)
    window_unit: ClassVar[str] = "round"


def clients_for(config: RunConfig) -> int:
    return config.option("clients") or config.workers


@methods.register
class FedAvg(Method):
    name: ClassVar[str] = "fedavg"
    startup_guess_s: ClassVar[float | None] = 8.0
    description: ClassVar[str] = ("federated averaging: K clients on IID / non-IID shards, "
                                  "E local epochs per round, sample-weighted all-reduce of "
                                  "the weights")
    devices: ClassVar[tuple[str, ...]] = ("cpu", "cuda")
    families: ClassVar[frozenset[str]] = frozenset({"torch"})
    parity: ClassVar[str] = "statistical"
    windows_from_training: ClassVar[bool] = True  # a part of an epoch is a round, as a window
    options: ClassVar[Mapping[str, OptionSpec]] = {**TORCH_OPTIONS, **FEDAVG_OPTIONS}

    def check(self, workload: Workload, config: RunConfig) -> str | None:
        if (reason := super().check(workload, config)) is not None:
            return reason
        if config.device == "cuda" and config.workers > (gpus := hardware.cuda_device_count()):
            return f"fedavg uses one GPU per worker: {config.workers} asked, {gpus} here"
        k, local = clients_for(config), config.option("local_epochs")
        if k % local:
            return (f"--local-epochs {local} must divide the {k} clients: one fedavg epoch is "
                    f"clients / local_epochs rounds, each client processing serial's samples")
        if k < config.workers or k % config.workers:
            return (f"{k} clients cannot be spread evenly over {config.workers} workers "
                    f"(each worker hosts clients / workers; use --clients a multiple of it)")
        # the non-IID split deals classes out unevenly: it needs one class label per sample
        if config.option("split") == "noniid" and workload.quality.name != "accuracy":
            return (f"the noniid split needs class labels; {workload.name} reports "
                    f"{workload.quality.name}, not a per-sample class")
        return None

    def session(self, workload: Workload, config: RunConfig) -> Session:
        return FedAvgSession(workload, config)
