"""The session of ``rf_spark``: ``pyspark.ml``'s RandomForestClassifier on the workload's data.

Usage::

    parabench run --workload random_forest --method rf_spark --workers 2
    parabench run --workload random_forest --method rf_spark --spark-master spark://HOST:7077

``start()`` starts the Spark driver (a JVM, child of the case process) with master
``local[workers]`` (or the ``spark_master`` option), the UI and console progress bars off, the
driver bound to 127.0.0.1, and ``workers`` shuffle/default partitions (the JVM's block
manager and its py4j gateway listen on 127.0.0.1 too, and with a local master the driver's
ports require a per-case ``spark.authenticate`` secret). A ``spark://`` master that nothing
answers at is a ``ConfigError`` ("nothing answers at HOST:PORT") within seconds, not Spark's
own minutes of retries. A driver JVM that dies mid-case is reported as such ("the Spark JVM
(pid N) died (SIGKILL) during the fit"), not as the ``ConnectionRefusedError`` py4j raises
next.

The training and held-out data go into cached DataFrames there (rows of ``(row index, label,
dense vector)`` built straight from the NumPy arrays: no pandas round trip), so start-up holds
the JVM launch and the data load. One epoch is one ``fit``; prediction is ``transform`` +
``collect``.

How the forest is matched to scikit-learn's ``RandomForestClassifier`` (the workload's
estimator) as closely as Spark allows:

- ``numTrees`` = ``n_estimators``; ``featureSubsetStrategy="sqrt"`` (``max_features="sqrt"``);
  ``impurity="gini"``; ``minInstancesPerNode=1`` (``min_samples_leaf=1``); ``minInfoGain=0``;
  ``seed`` = the case's seed (a different generator: the trees are not the same trees).
- depth: scikit-learn grows trees until the leaves are pure; Spark caps ``maxDepth`` at 30, so
  ``maxDepth = min(max_depth or 30, 30)``.
- bins: scikit-learn tries every threshold between sorted values; Spark bins each feature into
  ``maxBins`` quantile bins first. More bins is closer, and slower, for the same accuracy
  within noise (the fit times per bin count: docs/measurements.md). ``maxBins=128``
  (:data:`MAX_BINS`, Spark's default is 32) is the compromise.
- bootstrap: scikit-learn draws n rows with replacement; Spark with ``bootstrap=True`` and
  ``subsamplingRate=1.0`` gives each row a Poisson(1) weight, the same distribution in the
  limit.

So parity is ``statistical``: held-out accuracy within a tolerance of serial's.
``cacheNodeIds`` is on (deep trees are otherwise re-walked on every level).
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from parabench.config import RunConfig
from parabench.engines.probe import require_listening
from parabench.forest.session import ForestSession
from parabench.workload import Dataset, EstimatorWorkload

LOOPBACK = "127.0.0.1"
MAX_BINS = 128
SPARK_MAX_DEPTH = 30
STOP_WAIT_S = 20.0
JVM_EXIT_WAIT_S = 2.0


class SparkForestModel:
    """A fitted Spark model with the ``predict`` / ``predict_proba`` / ``classes_`` surface
    the workload's ``score`` and ``train_loss`` use. Known arrays map to prebuilt frames."""

    def __init__(self, model: Any, session: SparkForestSession, n_classes: int) -> None:
        self.model, self.session = model, session
        self.classes_ = np.arange(n_classes)

    def _transform(self, x: np.ndarray, column: str) -> list[Any]:
        with self.session.jvm_guard("prediction"):
            frame = self.session.frame_for(x)
            rows = self.model.transform(frame).select("idx", column).collect()
        rows.sort(key=lambda r: r[0])  # collect keeps partition order; the index makes sure
        return [r[1] for r in rows]

    def predict(self, x: np.ndarray) -> np.ndarray:
        return np.asarray(self._transform(x, "prediction"), dtype=np.int64)

    def predict_proba(self, x: np.ndarray) -> np.ndarray:
        probs = [v.toArray() for v in self._transform(x, "probability")]
        return np.vstack(probs)


class SparkForestSession(ForestSession):
    def __init__(self, workload: EstimatorWorkload, config: RunConfig) -> None:
        super().__init__(workload, config)
        self.spark: Any = None
        #: the driver JVM (a child of this process), watched so its death is named
        self.jvm: subprocess.Popen[bytes] | None = None
        self.frames: dict[int, tuple[np.ndarray, Any]] = {}

    @property
    def master(self) -> str:
        return self.config.option("spark_master") or f"local[{self.config.workers}]"

    def start_engine(self) -> None:
        from pyspark import SparkContext
        from pyspark.sql import SparkSession

        assert self.data is not None
        if self.master.startswith("spark://"):
            require_listening(self.master, option="--spark-master", default_port=7077)
        os.environ.setdefault("SPARK_LOCAL_IP", LOOPBACK)  # read by the JVM launch script
        parts = str(self.config.workers)
        builder = (
            SparkSession.builder.master(self.master)
            .appName(f"parabench-{self.config.workload}")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.driver.host", LOOPBACK)
            .config("spark.driver.bindAddress", LOOPBACK)
            .config("spark.sql.shuffle.partitions", parts)
            .config("spark.default.parallelism", parts)
        )
        if self.master.startswith("local"):
            # a per-case secret on the driver's RPC and block-transfer ports (the py4j gateway
            # has pyspark's own token); set through the gateway, so it is never on a command line
            builder = builder.config("spark.authenticate", "true").config(
                "spark.authenticate.secret", secrets.token_hex(32))
        self.spark = builder.getOrCreate()
        self.jvm = getattr(SparkContext._gateway, "proc", None)
        if self.jvm is not None:
            self.notes["spark_jvm_pid"] = self.jvm.pid
        with self.jvm_guard("start-up"):
            self._load()

    def _load(self) -> None:
        assert self.data is not None
        self.spark.sparkContext.setLogLevel("ERROR")
        self.notes["spark_master"] = self.master
        self.notes["spark_version"] = self.spark.version
        self.train_frame = self._cache(self.data.x_train, self.data.y_train)
        self._cache(self.data.x_test, self.data.y_test)

    def _cache(self, x: np.ndarray, y: np.ndarray) -> Any:
        """A cached, materialised frame of ``x`` that :meth:`frame_for` finds again."""
        frame = self._frame(x, y).cache()
        frame.count()  # materialise now, in start-up, not in the first fit
        self.frames[id(x)] = (x, frame)
        return frame

    def _frame(self, x: np.ndarray, y: np.ndarray | None = None) -> Any:
        """A DataFrame of (idx, label, features) rows built straight from the arrays."""
        from pyspark.ml.linalg import Vectors, VectorUDT
        from pyspark.sql.types import DoubleType, LongType, StructField, StructType

        schema = StructType([
            StructField("idx", LongType(), False),
            StructField("label", DoubleType(), False),
            StructField("features", VectorUDT(), False),
        ])
        labels = np.zeros(len(x)) if y is None else y
        rows = [(i, float(labels[i]), Vectors.dense(x[i])) for i in range(len(x))]
        return self.spark.createDataFrame(rows, schema)

    def frame_for(self, x: np.ndarray) -> Any:
        """The cached frame of a known array, else a fresh one (e.g. the train-loss slice)."""
        known = self.frames.get(id(x))
        if known is not None and known[0] is x:
            return known[1]
        return self._frame(x)

    def spark_estimator(self) -> Any:
        from pyspark.ml.classification import RandomForestClassifier

        ref = self.workload.build_estimator(self.config.profile, self.config.training_seed,
                                            n_jobs=1)
        return RandomForestClassifier(
            numTrees=ref.n_estimators,
            maxDepth=min(ref.max_depth or SPARK_MAX_DEPTH, SPARK_MAX_DEPTH),
            maxBins=MAX_BINS,
            featureSubsetStrategy="sqrt",
            impurity="gini",
            minInstancesPerNode=ref.min_samples_leaf,
            minInfoGain=0.0,
            bootstrap=bool(ref.bootstrap),
            subsamplingRate=1.0,
            cacheNodeIds=True,
            seed=self.config.training_seed,
        )

    @contextmanager
    def jvm_guard(self, what: str) -> Iterator[None]:
        """Name a dead driver JVM, rather than the socket error py4j raises afterwards."""
        try:
            yield
        except Exception as exc:
            if (lost := jvm_death(self.jvm, what)) is not None:
                raise lost from exc
            raise

    def fit(self, data: Dataset) -> Any:
        with self.jvm_guard("the fit"):
            model = self.spark_estimator().fit(self.train_frame)
        n_classes = data.n_classes or int(np.max(data.y_train)) + 1
        return SparkForestModel(model, self, n_classes)

    def close(self) -> None:
        spark, self.spark = self.spark, None
        self.frames = {}
        if spark is None:
            return
        from pyspark import SparkContext

        try:
            spark.stop()
        except Exception:  # noqa: BLE001 - the JVM may already be gone; it is stopped below
            pass
        _stop_gateway(SparkContext)


class SparkJVMLost(RuntimeError):
    """The Spark driver JVM died while the case needed it."""


def jvm_death(proc: subprocess.Popen[bytes] | None, what: str) -> SparkJVMLost | None:
    """SparkJVMLost naming how the JVM ended, if it has (waits a moment for its exit)."""
    if proc is None:
        return None
    try:
        code = proc.wait(timeout=JVM_EXIT_WAIT_S)  # py4j may notice the socket first
    except subprocess.TimeoutExpired:
        return None
    how = f"exit code {code}"
    if code < 0:
        try:
            how = signal.Signals(-code).name
        except ValueError:
            how = f"signal {-code}"
    return SparkJVMLost(f"the Spark JVM (pid {proc.pid}) died ({how}) during {what}")


def _stop_gateway(context_class: Any) -> None:
    """Stop the driver JVM itself: ``SparkSession.stop`` leaves it running until exit."""
    gateway = context_class._gateway
    context_class._gateway = context_class._jvm = None
    if gateway is None:
        return
    proc: subprocess.Popen[bytes] | None = getattr(gateway, "proc", None)
    try:
        gateway.shutdown()
    except Exception:  # noqa: BLE001
        pass
    if proc is None:
        return
    if proc.stdin is not None:
        proc.stdin.close()  # the JVM exits when its stdin closes
    deadline = time.monotonic() + STOP_WAIT_S
    while proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    if proc.poll() is None:
        proc.kill()
        proc.wait()
