"""Built-in methods. Importing this package registers them (see :mod:`parabench.registry`).

Usage::

    import parabench.methods            # registers every built-in method
    from parabench.registry import methods

    methods.names()                     # ["cuml", "ddp", "fedavg", ...]

Every module in this package is imported, so a new method is one new file with a
``@methods.register`` class; nothing else needs editing. Modules import their engines
(torch.distributed, dask, mpi4py, pyspark, tensorflow, numba) inside functions, so importing
them here costs nothing on a machine without those extras.
"""

from parabench.registry import import_submodules

import_submodules(__name__, __path__)
