"""The custom TensorFlow training loop of the ``tf_*`` methods: one object per worker process.

Usage (what :mod:`parabench.methods.tf_data_parallel` runs in each pool worker)::

    from parabench.core.pool import WorkerPool
    from parabench.config import RunConfig

    cfg = RunConfig(workload="mlp", method="tf_serial", profile="tiny", epochs=1)
    args = {"workload": "mlp", "config": cfg.to_dict(), "strategy": "default"}
    with WorkerPool(1, TFProgram, args, backend="none") as pool:   # "multiworker": 2 ranks,
        pool.call("describe"); pool.call("train_epoch", epoch=0)   # rank_env=[{"TF_CONFIG":
        pool.call("evaluate")                                     # ...} per rank]
        pool.call("weights")     # every worker's trainable weights (numpy), for parity tests

``strategy`` is ``"default"`` (no distribution: ``tf_serial``), ``"multiworker"``
(``MultiWorkerMirroredStrategy``, one replica per worker process, ``TF_CONFIG`` from the
environment) or ``"mirrored"`` (``MirroredStrategy`` over ``workers`` GPUs in one process; on
CPU over as many logical CPU devices, configured before any op, which only tests its logic).

The loop, identical under every strategy (``model.fit`` fails under MultiWorkerMirroredStrategy
with TF 2.21 + Keras 3, so there is none):

* the data are the workload's own tensors as numpy (``Workload.tensors``), kept as constants;
* epoch ``e`` visits ``parabench.torch.loop.epoch_order(n, seed, e)`` in global batches of
  ``B``; replica ``r`` of ``R`` takes ``batch[r::R]`` (torch ``ddp``'s sharding);
* each replica's loss is its summed cross-entropy / the size of the *global* batch, and Keras'
  optimizer all-reduces (sums) the gradients, so every step is the serial mean-loss step;
  SGD with the workload's learning rate and momentum 0.9 (torch's SGD, written as Keras's);
* the step is a ``tf.function`` around ``strategy.run``; it is traced in ``__init__`` for the
  full and the last batch's shapes, so tracing is start-up, never in an epoch;
* an epoch is timed between two barriers (an all-reduce of one number over every replica),
  and the session takes the slowest worker's seconds (``fold_epochs``).
"""

from __future__ import annotations

import os
from typing import Any, ClassVar

import numpy as np

from parabench.config import RunConfig
from parabench.core.clock import Clock
from parabench.core.rank import RankContext
from parabench.method import EpochStats

STRATEGIES = ("default", "multiworker", "mirrored")


def import_tf(threads: int) -> Any:
    """TensorFlow, quiet, with both thread pools sized before its runtime starts."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(threads)
    return tf


def make_strategy(tf: Any, kind: str, device: str, rank: int, replicas: int) -> Any:
    """The distribution strategy; GPUs made visible (or hidden) first, as TF requires."""
    gpus = tf.config.list_physical_devices("GPU")
    if device == "cuda" and not gpus:
        raise RuntimeError(f"TensorFlow {tf.__version__} sees no GPU; "
                           "pip install 'tensorflow[and-cuda]'")
    if device == "cpu":
        tf.config.set_visible_devices([], "GPU")
    elif kind != "mirrored":  # one GPU per worker process
        tf.config.set_visible_devices(gpus[rank], "GPU")
    if kind == "default":
        return tf.distribute.get_strategy()
    if kind == "multiworker":
        impl = tf.distribute.experimental.CommunicationImplementation
        options = tf.distribute.experimental.CommunicationOptions(
            implementation=impl.NCCL if device == "cuda" else impl.RING)
        return tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)
    if kind == "mirrored":
        if device == "cuda":
            return tf.distribute.MirroredStrategy([f"/gpu:{i}" for i in range(replicas)])
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(replicas)])
        return tf.distribute.MirroredStrategy(
            [f"/cpu:{i}" for i in range(replicas)],
            cross_device_ops=tf.distribute.ReductionToOneDevice())
    raise ValueError(f"strategy must be one of {', '.join(STRATEGIES)}, got {kind!r}")


class TFProgram:
    """One worker's model, optimizer, data and compiled step (see the module doc)."""

    eval_batch: ClassVar[int] = 1024

    def __init__(self, ctx: RankContext, *, workload: str, config: dict[str, Any],
                 strategy: str = "default") -> None:
        from parabench.registry import workloads
        from parabench.tf.models import keras_layout, keras_model
        from parabench.torch.data_parallel import global_batch

        self.ctx, self.kind = ctx, strategy
        self.config = cfg = RunConfig.from_dict(config)
        self.workload = wl = workloads.get(workload)
        data = wl.dataset(cfg)
        x, y, x_test, self.y_test = (t.numpy() for t in wl.tensors(data))  # torch, on CPU
        x, self.x_test = keras_layout(workload, x), keras_layout(workload, x_test)
        self.n, self.samples_per_epoch = len(x), wl.samples_per_epoch(data)
        self.batch_size = int(global_batch(wl, cfg))
        classes = data.n_classes or int(y.max()) + 1
        self.tf = tf = import_tf(ctx.threads)
        self.strategy = make_strategy(tf, strategy, cfg.device, ctx.rank, cfg.workers)
        self.replicas = self.strategy.num_replicas_in_sync
        import keras

        keras.utils.set_random_seed(cfg.training_seed)  # the same initial weights in every worker
        with self.strategy.scope():
            self.model = keras_model(workload, x.shape[1:], classes)
            self.optimizer = keras.optimizers.SGD(learning_rate=wl.lr, momentum=0.9)
            self.optimizer.build(self.model.trainable_variables)
        # one copy of the data: on this worker's device, or on the host under "mirrored",
        # whose replicas each take their own batch from it
        with tf.device("/cpu:0" if strategy == "mirrored" else None):
            self.x = tf.constant(x)
            self.y = tf.constant(y.astype(np.int32))
        self._sizes: dict[int, Any] = {}
        self._step = tf.function(self._distributed_step, reduce_retracing=True)
        self._barrier_fn = tf.function(self._all_reduce_one)
        self._trace()

    # -- compiled pieces ---------------------------------------------------------------------

    def _replica_step(self, idx: Any, size: Any) -> Any:
        tf = self.tf
        with tf.device(self.x.device):  # gather where the data are; only the batch moves
            xb, yb = tf.gather(self.x, idx), tf.gather(self.y, idx)
        with tf.GradientTape() as tape:
            logits = self.model(xb, training=True)
            per_sample = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=yb, logits=logits)
            total = tf.reduce_sum(per_sample)
            loss = total / size  # / the global batch: the summed gradients are serial's mean
        grads = tape.gradient(loss, self.model.trainable_variables)
        self.optimizer.apply_gradients(zip(grads, self.model.trainable_variables, strict=True))
        return total

    def _distributed_step(self, idx: Any, size: Any) -> Any:
        return self.strategy.run(self._replica_step, args=(idx, size))

    def _all_reduce_one(self) -> Any:
        tf = self.tf
        return self.strategy.run(
            lambda: tf.distribute.get_replica_context().all_reduce("SUM", tf.ones([])))

    def _inputs(self, batch: np.ndarray) -> tuple[Any, Any]:
        """(per-replica index shards of one global batch, its size as a cached tensor)."""
        tf, r = self.tf, self.replicas
        idx = self.strategy.experimental_distribute_values_from_function(
            lambda c: tf.constant(batch[c.replica_id_in_sync_group :: r]))
        if len(batch) not in self._sizes:
            self._sizes[len(batch)] = tf.constant(float(len(batch)))
        return idx, self._sizes[len(batch)]

    def _trace(self) -> None:
        """Trace (not run) the step for every batch shape an epoch has, and the barrier."""
        last = self.n % self.batch_size or self.batch_size
        for size in sorted({min(self.batch_size, self.n), last}):
            self._step.get_concrete_function(*self._inputs(np.arange(size)))
        self.barrier()

    def barrier(self) -> None:
        """Every replica of every worker contributes before any leaves (one all-reduce)."""
        for value in self.strategy.experimental_local_results(self._barrier_fn()):
            value.numpy()

    # -- the protocol the session calls ------------------------------------------------------

    def describe(self) -> dict[str, Any]:
        tf, threading = self.tf, self.tf.config.threading
        notes = {"tf_version": tf.__version__, "tf_strategy": type(self.strategy).__name__,
                 "replicas": self.replicas, "batch_per_replica": self.batch_size // self.replicas,
                 "tf_intra_op_threads": threading.get_intra_op_parallelism_threads(),
                 "tf_inter_op_threads": threading.get_inter_op_parallelism_threads()}
        return {"batch_size": self.batch_size, "samples_per_epoch": self.samples_per_epoch,
                "flops_per_sample": None, "notes": notes}

    def train_epoch(self, epoch: int, limit: int | None = None) -> EpochStats:
        """One epoch (or its first ``limit`` global batches: the parity tests' K steps)."""
        from parabench.torch.loop import epoch_order

        local = self.strategy.experimental_local_results
        starts = range(0, self.n, self.batch_size)[:limit]

        def work() -> float:
            order = epoch_order(self.n, self.config.training_seed, epoch).numpy()
            totals = []
            for start in starts:
                batch = order[start : start + self.batch_size]
                totals.extend(local(self._step(*self._inputs(batch))))
            return float(self.tf.add_n(totals).numpy())  # waits for the last step

        # barrier; t0; work; t1; barrier (TF's own all-reduce barrier: no torch group here)
        loss_sum, seconds = Clock(barrier=self.barrier).time(work)
        samples = self._local_samples(starts)
        return EpochStats(seconds=seconds, loss=loss_sum / samples, samples=samples)

    def _local_samples(self, starts: range) -> int:
        """Samples this worker's replicas train on in the global batches at ``starts``."""
        ids = [self.ctx.rank] if self.kind == "multiworker" else range(self.replicas)
        return sum(len(range(start + r, min(start + self.batch_size, self.n), self.replicas))
                   for start in starts for r in ids)

    def evaluate(self) -> float | None:
        """Held-out quality on worker 0 (the others hold the same weights and return None)."""
        if self.ctx.rank != 0:
            return None
        import torch

        logits = np.concatenate([self.model(self.x_test[i : i + self.eval_batch],
                                            training=False).numpy()
                                 for i in range(0, len(self.x_test), self.eval_batch)])
        return self.workload.score(torch.from_numpy(logits), torch.from_numpy(self.y_test))

    def weights(self) -> list[np.ndarray]:
        return [np.array(v.numpy()) for v in self.model.trainable_variables]

    def peak_gpu_mb(self) -> float | None:
        if self.config.device != "cuda":
            return None
        return self.tf.config.experimental.get_memory_info("GPU:0")["peak"] / 2**20
