"""Planted bugs for the run-level parity checks: three broken methods, each one classic mistake.

Usage (a test plugin, loaded like every plugin)::

    PYTHONPATH=tests/plugins PARABENCH_PLUGINS=forest_bugs parabench run \\
        --workload random_forest,mlp --method serial,threads_seed1,mpi_rank0,fedavg_client0 \\
        --workers 2 --clients 4 --split noniid --profile tiny --epochs 1 --threads 1

* ``threads_seed1``: scikit-learn's threads forest built with ``random_state = seed + 1``: a
  fine forest, but not serial's trees. Seed-exact parity must fail on the predictions digest.
* ``mpi_rank0``: the MPI forest whose rank 0 keeps only its own slice of the trees when it
  gathers (:class:`RankZeroOnly`, launched through ``mpi_rank --rank-class``): half a forest.
* ``threads_onejob``: the threads forest built with ``n_jobs=1`` instead of the worker count:
  the same trees (parity ok), grown one at a time. Its result must record about one core
  used over the speed windows, and the table say "ran on ~1 core"
  (``tests/case/test_one_core.py``).
* ``fedavg_client0``: federated averaging whose server keeps client 0's weights instead of the
  sample-weighted average (:class:`KeepsClientZero`): on a non-IID split client 0 has seen a
  skewed class mix, so held-out accuracy falls far outside serial's measured spread.
"""

from __future__ import annotations

from typing import Any, ClassVar

from parabench.forest.joblib_sessions import ThreadsSession
from parabench.forest.mpi_rank import Rank
from parabench.forest.mpi_session import MPIForestSession
from parabench.method import Session
from parabench.methods.fedavg import FedAvg, FedAvgSession
from parabench.methods.forest_joblib import Threads
from parabench.methods.forest_mpi import MPI
from parabench.registry import methods
from parabench.torch.fedavg import FedAvgProgram
from parabench.workload import Dataset


class OtherSeedThreadsSession(ThreadsSession):
    def fit(self, data: Dataset) -> Any:
        from joblib import parallel_config

        est = self.workload.build_estimator(self.config.profile, self.config.seed + 1,
                                            self.n_jobs)
        with parallel_config(backend="threading", n_jobs=self.n_jobs):
            return est.fit(data.x_train, data.y_train)


class OneJobThreadsSession(ThreadsSession):
    @property
    def n_jobs(self) -> int:
        return 1  # the worker count asked for is ignored: the forest is grown serially


class RankZeroOnly(Rank):
    """Rank 0 answers with its own slice only: the other ranks' trees are dropped."""

    def reply(self, gathered: list[tuple[Any, float, str | None]]) -> tuple[Any, ...]:
        return super().reply(gathered[:1])


class RankZeroOnlySession(MPIForestSession):
    rank_class: ClassVar[str | None] = f"{__name__}:RankZeroOnly"


class KeepsClientZero(FedAvgProgram):
    """The server keeps client 0's weights and drops everyone else's."""

    def client_weight(self, client: Any) -> float:
        return 1.0 if client.index == 0 else 0.0


class KeepsClientZeroSession(FedAvgSession):
    program: ClassVar[str | type] = f"{__name__}:KeepsClientZero"


@methods.register
class OtherSeedThreads(Threads):
    name: ClassVar[str] = "threads_seed1"
    description: ClassVar[str] = "planted bug: the threads forest with random_state = seed + 1"
    session_class = OtherSeedThreadsSession


@methods.register
class OneJobThreads(Threads):
    name: ClassVar[str] = "threads_onejob"
    description: ClassVar[str] = "planted bug: the threads forest with n_jobs=1, not workers"
    session_class = OneJobThreadsSession


@methods.register
class MPIRankZeroOnly(MPI):
    name: ClassVar[str] = "mpi_rank0"
    description: ClassVar[str] = "planted bug: the MPI forest gathering only rank 0's trees"
    session_class = RankZeroOnlySession


@methods.register
class FedAvgClientZero(FedAvg):
    name: ClassVar[str] = "fedavg_client0"
    description: ClassVar[str] = "planted bug: fedavg keeping client 0's weights"

    def session(self, workload: Any, config: Any) -> Session:
        return KeepsClientZeroSession(workload, config)
