"""``serial``: one process, one device — the baseline every parallel method is compared to.

Usage::

    parabench run --method serial --workload mlp,random_forest --device cpu

On CPU the torch thread count is set explicitly (``threads_per_worker``, default: every core)
and recorded; scikit-learn estimators get ``n_jobs=1`` and are recorded as one thread. On CUDA
the model and data live on ``cuda:0``, every clock read is preceded by a synchronise, and the
peak comes from ``torch.cuda.max_memory_allocated``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from parabench.config import OptionSpec, RunConfig
from parabench.forest.session import ForestSession
from parabench.method import Method, Session
from parabench.registry import methods
from parabench.torch.local import SerialTorchSession
from parabench.torch.options import TORCH_OPTIONS
from parabench.workload import Dataset, EstimatorWorkload, TorchWorkload, Workload


class SerialEstimatorSession(ForestSession):
    """``serial`` on an estimator: the forest lifecycle, one fit with ``n_jobs=1`` whatever
    the threads (so it is recorded as one thread), under no joblib backend."""

    @property
    def n_jobs(self) -> int:
        return 1

    def fit(self, data: Dataset) -> Any:
        est = self.workload.build_estimator(self.config.profile, self.config.training_seed,
                                            self.n_jobs)
        est.fit(data.x_train, data.y_train)
        return est


@methods.register
class Serial(Method):
    name: ClassVar[str] = "serial"
    startup_guess_s: ClassVar[float | None] = 5.0
    description: ClassVar[str] = "one process on one device: the baseline"
    devices: ClassVar[tuple[str, ...]] = ("cpu", "cuda")
    families: ClassVar[frozenset[str]] = frozenset({"torch", "estimator"})
    max_workers: ClassVar[int | None] = 1
    parity: ClassVar[str] = "baseline"
    options: ClassVar[Mapping[str, OptionSpec]] = TORCH_OPTIONS

    def devices_for(self, workload: Workload) -> tuple[str, ...]:
        # scikit-learn estimators have no CUDA path; only torch workloads move to the GPU
        return self.devices if isinstance(workload, TorchWorkload) else ("cpu",)

    def session(self, workload: Workload, config: RunConfig) -> Session:
        if isinstance(workload, TorchWorkload):
            return SerialTorchSession(workload, config)
        if isinstance(workload, EstimatorWorkload):
            return SerialEstimatorSession(workload, config)
        raise TypeError(f"serial cannot train {type(workload).__name__}")
