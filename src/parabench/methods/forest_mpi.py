"""``rf_mpi``: a scikit-learn forest grown by mpi4py ranks, one share of the trees each.

Usage::

    parabench run --workload random_forest --method rf_mpi --workers 4

The session (launch, command channel, failure reports) is
:mod:`parabench.forest.mpi_session`; the rank program :mod:`parabench.forest.mpi_rank`.
"""

from __future__ import annotations

from typing import ClassVar

from parabench.forest.mpi_session import MPIForestSession
from parabench.forest.session import ForestMethod
from parabench.registry import methods


@methods.register
class MPI(ForestMethod):
    name: ClassVar[str] = "rf_mpi"
    startup_guess_s: ClassVar[float | None] = 12.0
    description: ClassVar[str] = "mpi4py ranks each grow a seed-exact share of the trees"
    requires: ClassVar[frozenset[str]] = frozenset({"sklearn", "mpi"})
    session_class = MPIForestSession
