"""``tf_serial``, ``tf_multiworker``, ``tf_mirrored``: TensorFlow data parallelism on Keras twins.

Usage::

    parabench run --workload cnn --method tf_serial,tf_multiworker --workers 2 --profile tiny
    parabench run --workload mlp --method tf_serial,tf_mirrored --device cuda --workers 2

* ``tf_serial`` - the custom loop of :mod:`parabench.tf.program` with TF's default strategy in
  one worker process: the baseline the other two are compared with (``baseline_method``).
* ``tf_multiworker`` - ``MultiWorkerMirroredStrategy``, started the way TF users start it: one
  Python process per worker with its own ``TF_CONFIG`` (``cluster.worker`` =
  ``127.0.0.1:<port>`` for each worker, ``task.index`` = its rank); ring all-reduce on CPU,
  NCCL with one GPU per worker on CUDA.
* ``tf_mirrored`` - ``MirroredStrategy`` over ``workers`` GPUs in one process (needs >= 2 GPUs;
  CPU runs only in the tests, over logical CPU devices).

Workers are :class:`~parabench.case.pool.WorkerPool` ranks with ``backend="none"``
(no torch process group): the pool's pipes, death detection (a killed worker fails the case
with "rank N died (exit -9, SIGKILL)" and the others are killed), parent-death kill and
clean-up are the torch methods'. Start-up (spawn, TF import, data, gRPC servers, strategy,
tracing the step) is ``startup_s``; an epoch is the slowest worker's, between barriers.

Ports: each worker's gRPC port is reserved here first, a socket bound to 127.0.0.1 with
``SO_REUSEADDR`` and never listening, held until every server is up: the OS picked the port,
no other process can bind it meanwhile, and TF's server can still bind it. TF's gRPC server
itself listens on all interfaces (its bind address is hard-coded in TensorFlow); peers reach
each other through 127.0.0.1 only.

Same global batch ``B`` as ``tf_serial`` (``B / workers`` per replica, ``batch[r::R]``), same
data order, same seeded initial weights: the weights after K steps match ``tf_serial``'s to
float tolerance (``tests/test_tf_parallel.py``), so parity is ``exact`` against ``tf_serial``.
Threads: TF's intra- and inter-op pools get ``threads_per_worker`` each worker.
"""

from __future__ import annotations

import contextlib
import json
import socket
from typing import Any, ClassVar

from parabench import hardware
from parabench.config import RunConfig
from parabench.method import TORCH_OPTIONS, Session
from parabench.registry import methods
from parabench.tf.models import missing_model
from parabench.tf.program import TFProgram
from parabench.torch.data_parallel import DataParallelMethod
from parabench.torch.session import DistributedTorchSession
from parabench.workload import Workload


def reserve_ports(n: int) -> list[socket.socket]:
    """``n`` OS-picked 127.0.0.1 ports, held (bound, not listening) until the caller closes."""
    held = []
    for _ in range(n):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # so gRPC can bind it too
        sock.bind(("127.0.0.1", 0))
        held.append(sock)
    return held


def tf_config(ports: list[int], index: int) -> str:
    """The ``TF_CONFIG`` of worker ``index`` in a localhost cluster."""
    cluster = {"worker": [f"127.0.0.1:{p}" for p in ports]}
    return json.dumps({"cluster": cluster, "task": {"type": "worker", "index": index}})


class TFSession(DistributedTorchSession):
    """A pool of TF worker processes running :class:`~parabench.tf.program.TFProgram`."""

    program: ClassVar[str | type] = TFProgram
    #: strategy of the program; "multiworker" gives each worker process a TF_CONFIG
    strategy: ClassVar[str] = "default"

    def __init__(self, workload: Workload, config: RunConfig) -> None:
        super().__init__(workload, config)
        self._ports: list[socket.socket] = []

    def processes(self) -> int:
        return self.config.workers if self.strategy == "multiworker" else 1

    def program_args(self) -> dict[str, Any]:
        return {**super().program_args(), "strategy": self.strategy}

    def make_pool(self) -> Any:
        from parabench.case.pool import NO_GROUP, WorkerPool

        n = self.processes()
        env = None
        if self.strategy == "multiworker":
            self._ports = reserve_ports(n)
            ports = [s.getsockname()[1] for s in self._ports]
            env = [{"TF_CONFIG": tf_config(ports, i)} for i in range(n)]
            # said in the result, not only in the README: a user reading their run sees it
            self.notes["exposed_listeners"] = {
                "address": "0.0.0.0", "ports": ports,
                "why": "TensorFlow's gRPC worker servers bind every interface (hard-coded in "
                       "TensorFlow, no setting) and are unauthenticated; peers dial 127.0.0.1",
            }
        return WorkerPool(n, self.program, self.program_args(), backend=NO_GROUP,
                          device=self.config.device, threads=self.config.threads,
                          timeout_s=self.config.timeout_s, rank_env=env)

    def start(self) -> None:
        try:
            super().start()
        finally:
            self._release_ports()  # every server is up (or start failed): TF holds its own

    def _release_ports(self) -> None:
        for sock in self._ports:
            with contextlib.suppress(OSError):
                sock.close()
        self._ports = []

    def close(self) -> None:
        self._release_ports()
        super().close()


class TFMethod(DataParallelMethod):
    """What the ``tf_*`` methods share: Keras twins of torch workloads, TensorFlow required."""

    requires: ClassVar[frozenset[str]] = frozenset({"tf"})
    baseline_method: ClassVar[str] = "tf_serial"
    session_class: ClassVar[type[Session]]

    def supports(self, workload: Workload) -> bool:
        return super().supports(workload) and missing_model(workload.name) is None

    def check(self, workload: Workload, config: RunConfig) -> str | None:
        if workload.family == "torch" and (reason := missing_model(workload.name)):
            return f"{self.name}: {reason}"
        if torch_only := [k for k in TORCH_OPTIONS if k in config.options]:
            return f"{', '.join(torch_only)} apply to torch methods, not {self.name}"
        if config.batch_size == "auto":
            return f"{self.name} takes a fixed --batch-size, not auto"
        return super().check(workload, config)


class TFSerialSession(TFSession):
    strategy: ClassVar[str] = "default"


class TFMultiWorkerSession(TFSession):
    strategy: ClassVar[str] = "multiworker"


class TFMirroredSession(TFSession):
    strategy: ClassVar[str] = "mirrored"


@methods.register
class TFSerial(TFMethod):
    name: ClassVar[str] = "tf_serial"
    description: ClassVar[str] = "TensorFlow custom loop, one process: the tf_* baseline"
    max_workers: ClassVar[int | None] = 1
    parity: ClassVar[str] = "baseline"
    session_class: ClassVar[type[Session]] = TFSerialSession


@methods.register
class TFMultiWorker(TFMethod):
    name: ClassVar[str] = "tf_multiworker"
    description: ClassVar[str] = (
        "TensorFlow MultiWorkerMirroredStrategy: one process per worker, TF_CONFIG on localhost"
    )
    session_class: ClassVar[type[Session]] = TFMultiWorkerSession


@methods.register
class TFMirrored(TFMethod):
    name: ClassVar[str] = "tf_mirrored"
    description: ClassVar[str] = "TensorFlow MirroredStrategy over the GPUs of one process"
    requires: ClassVar[frozenset[str]] = frozenset({"tf", "multigpu"})
    devices: ClassVar[tuple[str, ...]] = ("cuda",)
    session_class: ClassVar[type[Session]] = TFMirroredSession

    def default_workers(self, cores: int | None = None) -> list[int]:
        return [2]

    def check(self, workload: Workload, config: RunConfig) -> str | None:
        if config.device != "cuda":  # CPU "devices" here are only the tests' logical ones
            return (f"{self.name} mirrors over >= 2 GPUs (--device cuda); "
                    f"{hardware.missing({'multigpu'}) or 'they are here'}")
        return super().check(workload, config)
