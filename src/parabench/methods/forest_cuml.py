"""``cuml``: RAPIDS cuML's GPU ``RandomForestClassifier`` as a forest peer (CUDA only).

Usage::

    pip install cuml-cu13        # or cuml-cu12: RAPIDS wheels per CUDA major version
    parabench run --workload random_forest --method serial,cuml --device cuda

Where cuML is not importable (or there is no GPU) the case is skipped with that reason.

How the workload's sklearn ``RandomForestClassifier`` is matched (:class:`PeerSpec`): cuML
follows sklearn's forest closely, so most parameters carry over by name.

* trees ``n_estimators``, ``bootstrap=True`` with ``max_samples=1.0`` (sampling *with*
  replacement, as sklearn does), ``split_criterion="gini"``.
* features per split: ``max_features = k / n_features`` (k sklearn's count; cuML samples
  per node, as sklearn).
* depth: ``max_depth`` = sklearn's, its unlimited ``None`` as the histogram forests'
  ``DEFAULT_MAX_DEPTH`` (48): cuML has no unlimited depth.
* min samples: ``min_samples_leaf`` and ``min_samples_split`` = sklearn's.
* bins: ``n_bins`` = the histogram forests' ``DEFAULT_BINS`` (32; cuML's default is 128),
  quantiles computed by cuML.
* seed ``random_state`` = the run's seed; ``n_streams = workers`` (x an explicit
  ``--threads``): the CUDA streams that build trees concurrently. With more than
  one stream cuML's trees are not reproducible run to run.

Where it differs: split candidates are cuML's bin edges, not sklearn's exact thresholds, and
the data go to the GPU as float32 with int32 labels. Hence statistical parity. Not run on the
CPU-only development machines: its test is marked ``cuda`` and skips there.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from parabench.forest.peers import PeerForestMethod, PeerSpec
from parabench.registry import methods


class CumlForest:
    """cuML's forest with numpy in and out and sklearn's ``classes_``, as workloads expect."""

    def __init__(self, spec: PeerSpec) -> None:
        from cuml.ensemble import RandomForestClassifier

        self.model = RandomForestClassifier(
            n_estimators=spec.trees, bootstrap=spec.bootstrap, max_samples=1.0,
            split_criterion="gini", max_features=spec.features_per_split / spec.n_features,
            max_depth=spec.max_depth, min_samples_leaf=spec.min_samples_leaf,
            min_samples_split=spec.min_samples_split, n_bins=spec.n_bins,
            random_state=spec.seed, n_streams=spec.threads, output_type="numpy",
        )
        self.classes_ = np.empty(0, np.int64)

    def fit(self, x: np.ndarray, y: np.ndarray) -> CumlForest:
        self.classes_ = np.unique(y)
        # labels as positions in classes_: cuML wants int32 labels 0..k-1
        labels = np.searchsorted(self.classes_, y).astype(np.int32)
        self.model.fit(np.asarray(x, np.float32), labels)
        return self

    def predict_proba(self, x: np.ndarray) -> np.ndarray:
        return np.asarray(self.model.predict_proba(np.asarray(x, np.float32)))

    def predict(self, x: np.ndarray) -> np.ndarray:
        return self.classes_[np.argmax(self.predict_proba(x), axis=1)]


@methods.register
class CumlRandomForest(PeerForestMethod):
    """cuML ``RandomForestClassifier`` on one GPU; parameters matched as the module says."""

    name: ClassVar[str] = "cuml"
    startup_guess_s: ClassVar[float | None] = 10.0
    description: ClassVar[str] = "peer: RAPIDS cuML GPU random forest, n_streams=workers (cuda)"
    requires: ClassVar[frozenset[str]] = frozenset({"cuml"})
    devices: ClassVar[tuple[str, ...]] = ("cuda",)
    module: ClassVar[str] = "cuml"

    def build(self, spec: PeerSpec) -> Any:
        return CumlForest(spec)
