"""The TensorFlow family's session and method base: rank programs in a WorkerPool.

Usage (a TF method is a strategy name and a declaration; see ``methods/tf_data_parallel.py``)::

    class TFMirroredSession(TFSession):
        strategy = "mirrored"

    @methods.register
    class TFMirrored(TFMethod):
        name = "my_tf_mirrored"            # as methods/tf_data_parallel.py's tf_mirrored
        session_class = TFMirroredSession

Workers are :class:`~parabench.core.pool.WorkerPool` ranks with ``backend="none"`` (no torch
process group), each running :class:`parabench.tf.program.TFProgram` with its own
``TF_CONFIG``; ports are reserved here first (:func:`reserve_ports`, see the methods' module
for why).
"""

from __future__ import annotations

import contextlib
import json
import socket
from typing import Any, ClassVar

from parabench.config import RunConfig
from parabench.method import Session
from parabench.tf.models import missing_model
from parabench.tf.program import TFProgram
from parabench.torch.data_parallel import DataParallelMethod
from parabench.torch.options import TORCH_OPTIONS
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
    #: a speed window is one more epoch (TF's programs train whole epochs)
    window_unit: ClassVar[str] = "epoch"
    #: strategy of the program; "multiworker" gives each worker process a TF_CONFIG
    strategy: ClassVar[str] = "default"
    spans_nodes: ClassVar[bool] = False  # TF's own cluster (TF_CONFIG), not torchrun's ranks

    def __init__(self, workload: Workload, config: RunConfig) -> None:
        super().__init__(workload, config)
        self._ports: list[socket.socket] = []

    def processes(self) -> int:
        return self.config.workers if self.strategy == "multiworker" else 1

    def program_args(self) -> dict[str, Any]:
        return {**super().program_args(), "strategy": self.strategy}

    def make_pool(self) -> Any:
        from parabench.core.pool import NO_GROUP, WorkerPool

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
    #: the family's start-up guess (TF import, servers, tracing: tf_serial and tf_mirrored);
    #: tf_multiworker, a process per worker, declares its own
    startup_guess_s: ClassVar[float | None] = 25.0
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
