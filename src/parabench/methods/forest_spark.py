"""``spark``: ``pyspark.ml``'s RandomForestClassifier on the workload's data.

Usage::

    parabench run --workload random_forest --method spark --workers 2
    parabench run --workload random_forest --method spark --spark-master spark://HOST:7077

The session, and how Spark's forest is matched to scikit-learn's, is
:mod:`parabench.forest.spark_session`.
"""

from __future__ import annotations

from typing import ClassVar

from parabench.forest.session import ForestMethod
from parabench.forest.spark_session import SparkForestSession
from parabench.registry import methods


@methods.register
class Spark(ForestMethod):
    name: ClassVar[str] = "spark"
    description: ClassVar[str] = "pyspark.ml RandomForestClassifier, local[workers] by default"
    requires: ClassVar[frozenset[str]] = frozenset({"sklearn", "spark"})
    parity: ClassVar[str] = "statistical"
    options: ClassVar[frozenset[str]] = frozenset({"spark_master"})
    session_class = SparkForestSession
