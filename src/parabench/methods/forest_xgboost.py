"""``xgboost``: XGBoost's random-forest mode (``XGBRFClassifier``) as a forest peer.

Usage::

    pip install 'parabench[xgboost]'
    parabench run --workload random_forest --method serial,xgboost --workers 2
    parabench run --workload random_forest --method serial,xgboost --device cuda

How the workload's sklearn ``RandomForestClassifier`` is matched (:class:`PeerSpec`):

* trees: ``n_estimators`` = sklearn's, one boosting round (what ``XGBRFClassifier`` does:
  ``num_parallel_tree`` trees averaged, ``learning_rate`` 1).
* features per split: ``colsample_bynode = (k + 0.5) / n_features`` with k sklearn's
  ``max_features`` count; XGBoost samples ``max(1, int(fraction x n))`` features per node
  (truncating, in float32), so the half keeps exactly k (1.0 when k is all).
* depth: ``max_depth`` = sklearn's, its unlimited ``None`` as the histogram forests'
  ``DEFAULT_MAX_DEPTH`` (48); ``grow_policy`` depthwise.
* min samples: XGBoost has no count minimum; ``min_child_weight = 0`` (a hessian sum) lets a
  node split down to single-row leaves, like sklearn's ``min_samples_leaf=1`` /
  ``min_samples_split=2``; other values are not expressible and are not passed.
* bins: ``tree_method="hist"``, ``max_bin`` = the histogram forests' ``DEFAULT_BINS`` (32),
  from XGBoost's own quantile sketch (not parabench's binner).
* bootstrap: XGBoost samples rows without replacement: ``subsample = 1 - 1/e`` (0.632), the
  distinct rows a bootstrap draws, without sklearn's repeat weights.
* seed ``random_state`` = the run's seed; threads ``n_jobs = workers`` (x an explicit
  ``--threads``); on ``--device cuda`` ``device="cuda"`` (the GPU hist updater).

Where it differs: for k classes XGBoost grows k regression trees per forest member on the
softmax gradient at a constant start (``reg_lambda`` left at XGBRF's 1e-5) and predicts the
softmax of the averaged leaf values, where sklearn grows one Gini classification tree and
averages leaf class frequencies. Hence statistical parity. Measured held-out accuracy: quick
profile seed 0 0.8377 (serial 0.834), seed 1 0.8293 (serial 0.8285); tiny, mean of seeds 0-4,
0.847 (serial 0.814).
"""

from __future__ import annotations

from typing import Any, ClassVar

from parabench.forest.peers import PeerForestMethod, PeerSpec
from parabench.registry import methods


@methods.register
class XGBoostForest(PeerForestMethod):
    """XGBoost ``XGBRFClassifier`` (hist, cpu/cuda); parameters matched as the module says."""

    name: ClassVar[str] = "xgboost"
    startup_guess_s: ClassVar[float | None] = 4.0
    description: ClassVar[str] = "peer: XGBoost random-forest mode, hist, n_jobs=workers (cpu/cuda)"
    requires: ClassVar[frozenset[str]] = frozenset({"xgboost"})
    devices: ClassVar[tuple[str, ...]] = ("cpu", "cuda")
    module: ClassVar[str] = "xgboost"

    def build(self, spec: PeerSpec) -> Any:
        from xgboost import XGBRFClassifier

        return XGBRFClassifier(
            n_estimators=spec.trees,
            tree_method="hist",
            max_bin=spec.n_bins,
            max_depth=spec.max_depth,
            grow_policy="depthwise",
            colsample_bynode=min(1.0, (spec.features_per_split + 0.5) / spec.n_features),
            subsample=spec.sample_fraction,
            min_child_weight=0.0,
            random_state=spec.seed,
            n_jobs=spec.threads,
            device="cuda" if spec.device == "cuda" else "cpu",
        )
