"""parabench: which parallelization method trains this workload fastest here, at what memory
cost, and does it still reach the same accuracy?

Usage::

    parabench list                       # what exists and what can run on this machine
    parabench run --profile tiny         # a sweep; results.jsonl + a summary table

    from parabench import RunConfig, workloads, methods
"""

from __future__ import annotations

from parabench.config import ConfigError, RunConfig
from parabench.registry import UnknownNameError, methods, workloads

__version__ = "0.1.0"

__all__ = ["ConfigError", "RunConfig", "UnknownNameError", "methods", "workloads", "__version__"]
