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

Workers are :class:`~parabench.core.pool.WorkerPool` ranks with ``backend="none"``
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
float tolerance (``tests/methods/test_tf_parallel.py``): parity is ``exact`` to ``tf_serial``.
Threads: TF's intra- and inter-op pools get ``threads_per_worker`` each worker.
"""

from __future__ import annotations

from typing import ClassVar

from parabench import hardware
from parabench.config import RunConfig
from parabench.method import Session
from parabench.registry import methods
from parabench.tf.session import (
    TFMethod,
    TFMirroredSession,
    TFMultiWorkerSession,
    TFSerialSession,
    reserve_ports,
    tf_config,
)
from parabench.workload import Workload

__all__ = ["TFMirrored", "TFMultiWorker", "TFSerial", "reserve_ports", "tf_config"]


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
    startup_guess_s: ClassVar[float | None] = 50.0
    coverage_rank: ClassVar[int | None] = 2
    description: ClassVar[str] = ("TensorFlow MultiWorkerMirroredStrategy: one process per "
                                  "worker, TF_CONFIG on localhost")
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
