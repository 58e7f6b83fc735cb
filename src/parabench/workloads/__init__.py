"""Built-in workloads. Importing this package registers them (see :mod:`parabench.registry`)."""

from parabench.workloads import mlp, random_forest  # noqa: F401
