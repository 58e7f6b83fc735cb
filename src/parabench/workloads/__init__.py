"""Built-in workloads. Importing this package registers them (see :mod:`parabench.registry`).

Usage::

    import parabench.workloads          # registers every built-in workload
    from parabench.registry import workloads

    data = workloads.get("mlp").make_data("tiny", seed=0)   # seeded train / held-out split

Every module in this package is imported, so a new workload is one new file with a
``@workloads.register`` class. Helper modules (data generators) register nothing.
"""

from parabench.registry import import_submodules

import_submodules(__name__, __path__)
