"""``rf_spark``: ``pyspark.ml``'s RandomForestClassifier on the workload's data.

Usage::

    parabench run --workload random_forest --method rf_spark --workers 2
    parabench run --workload random_forest --method rf_spark --spark-master spark://HOST:7077

The session, and how Spark's forest is matched to scikit-learn's, is
:mod:`parabench.forest.spark_session`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from parabench.config import OptionSpec
from parabench.forest.session import ForestMethod
from parabench.forest.spark_session import SparkForestSession
from parabench.registry import methods


@methods.register
class Spark(ForestMethod):
    name: ClassVar[str] = "rf_spark"
    startup_guess_s: ClassVar[float | None] = 90.0
    description: ClassVar[str] = "pyspark.ml RandomForestClassifier, local[workers] by default"
    requires: ClassVar[frozenset[str]] = frozenset({"sklearn", "spark"})
    parity: ClassVar[str] = "statistical"
    options: ClassVar[Mapping[str, OptionSpec]] = {
        "spark_master": OptionSpec(str, "Spark master URL (default local[workers])")}
    session_class = SparkForestSession
