"""The forest peers' shared shape: other libraries' forests on the random_forest workload.

Usage (a peer is one small subclass; see ``forest_xgboost``, ``forest_lightgbm``,
``forest_cuml``)::

    @methods.register
    class MyPeer(PeerForestMethod):
        name = "mypeer"
        requires = frozenset({"mylib"})

        def build(self, spec: PeerSpec) -> Any:   # an unfitted sklearn-style classifier
            return mylib.Forest(n_trees=spec.trees, threads=spec.threads)

A peer trains the workload's own data (the same seeded train/test split) and is given the
workload's sklearn forest as a :class:`PeerSpec`: the same number of trees, features per split
(sklearn's ``max_features`` resolved on this data), depth (sklearn's unlimited ``None`` becomes
the histogram forests' ``DEFAULT_MAX_DEPTH``), min samples, the histogram forests'
``DEFAULT_BINS`` bins, bootstrap as a sample fraction, seed, threads and device. Each peer's
module says how it maps these onto its library and where the library differs.

Sessions are :class:`~parabench.forest.session.ForestSession`\\ s: one epoch is one
timed ``fit`` of a fresh forest, ``evaluate`` records the predict time and a predictions
digest. Start-up loads the data and fits a two-tree forest once, so the library's first-call
costs (its thread pool, a CUDA context) are paid there, not in the first epoch. The peers are
other algorithms than sklearn's, so parity is statistical, as for the histogram forests.
"""

from __future__ import annotations

import math
from abc import abstractmethod
from dataclasses import asdict, dataclass, replace
from typing import Any, ClassVar

from parabench.config import RunConfig
from parabench.forest.hist import forest_params, is_random_forest
from parabench.forest.session import ForestSession
from parabench.method import Method, Session
from parabench.workload import Dataset, EstimatorWorkload, Workload

#: rows a bootstrap sample of n rows holds without repeats, on average (1 - 1/e); the peers
#: sample without replacement, so this fraction sees as many distinct rows as sklearn's
BOOTSTRAP_FRACTION = 1 - math.exp(-1)
WARMUP_TREES = 2


@dataclass(frozen=True, kw_only=True)
class PeerSpec:
    """The workload's forest in library-neutral terms (sklearn's meanings)."""

    trees: int
    features_per_split: int  # sklearn's max_features resolved for n_features
    n_features: int
    n_classes: int
    n_train: int
    bootstrap: bool
    sample_fraction: float  # distinct rows per tree: BOOTSTRAP_FRACTION, or 1.0 unbootstrapped
    max_depth: int
    min_samples_split: int
    min_samples_leaf: int
    n_bins: int
    seed: int
    threads: int
    device: str


def peer_spec(workload: EstimatorWorkload, config: RunConfig, data: Dataset) -> PeerSpec:
    params = forest_params(workload, config)  # the histogram forests' reading of sklearn's
    n_features = data.x_train.shape[1]
    # threads = workers, as sklearn's n_jobs; an explicit --threads multiplies it
    threads = config.workers * (config.threads_per_worker or 1)
    return PeerSpec(
        trees=params.n_estimators, features_per_split=params.mtry(n_features),
        n_features=n_features, n_classes=data.n_classes, n_train=data.n_train,
        bootstrap=params.bootstrap,
        sample_fraction=BOOTSTRAP_FRACTION if params.bootstrap else 1.0,
        max_depth=params.max_depth, min_samples_split=params.min_samples_split,
        min_samples_leaf=params.min_samples_leaf, n_bins=params.n_bins, seed=params.seed,
        threads=threads, device=config.device,
    )


class PeerForestSession(ForestSession):
    def __init__(self, workload: EstimatorWorkload, config: RunConfig,
                 method: PeerForestMethod) -> None:
        super().__init__(workload, config)
        self.method = method
        self.spec: PeerSpec | None = None

    def start_engine(self) -> None:
        assert self.data is not None
        self.spec = peer_spec(self.workload, self.config, self.data)
        self.threads_per_worker = max(1, self.spec.threads // self.config.workers)
        # all rows (a slice may miss a class, which xgboost refuses), two trees
        self.fit_spec(replace(self.spec, trees=WARMUP_TREES), self.data)
        self.notes.update(peer=self.method.library_version(), peer_threads=self.spec.threads,
                          peer_spec=asdict(self.spec))

    def fit_spec(self, spec: PeerSpec, data: Dataset) -> Any:
        est = self.method.build(spec)
        est.fit(data.x_train, data.y_train)
        return est

    def fit(self, data: Dataset) -> Any:
        assert self.spec is not None, "start() first"
        return self.fit_spec(self.spec, data)


class PeerForestMethod(Method):
    """Base of the peer methods: random-forest workloads only, statistical parity."""

    families: ClassVar[frozenset[str]] = frozenset({"estimator"})
    parity: ClassVar[str] = "statistical"
    peer: ClassVar[bool] = True
    #: the import name whose ``__version__`` the results record
    module: ClassVar[str]

    def supports(self, workload: Workload) -> bool:
        return super().supports(workload) and is_random_forest(workload.name)

    @abstractmethod
    def build(self, spec: PeerSpec) -> Any:
        """An unfitted classifier with ``fit``/``predict``/``predict_proba``/``classes_``."""

    def library_version(self) -> str:
        import importlib

        return f"{self.module} {importlib.import_module(self.module).__version__}"

    def session(self, workload: Workload, config: RunConfig) -> Session:
        if not isinstance(workload, EstimatorWorkload):
            raise TypeError(f"{self.name} cannot train {type(workload).__name__}")
        return PeerForestSession(workload, config, self)
