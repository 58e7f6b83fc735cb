"""Built-in workloads. Importing this package registers them (see :mod:`parabench.registry`).

Every module in this package is imported, so a new workload is one new file with a
``@workloads.register`` class. Helper modules (data generators) register nothing.
"""

from parabench.registry import import_submodules

import_submodules(__name__, __path__)
