"""``lightgbm``: LightGBM's random-forest boosting (``boosting="rf"``) as a forest peer.

Usage::

    pip install 'parabench[lightgbm]'
    parabench run --workload random_forest --method serial,lightgbm --workers 2

How the workload's sklearn ``RandomForestClassifier`` is matched (:class:`PeerSpec`):

* trees: ``n_estimators`` = sklearn's; in rf mode every iteration grows trees from the same
  start and the model averages them (no shrinkage).
* random forest: ``bagging_freq = 1`` (a new row sample for every tree) and
  ``bagging_fraction = 1 - 1/e`` (0.632): LightGBM samples without replacement, so each tree
  sees as many distinct rows as sklearn's bootstrap, without its repeat weights.
* features per split: ``feature_fraction_bynode = k / n_features`` (per node, as sklearn's
  ``max_features``; ``feature_fraction`` per tree stays 1). LightGBM takes
  ``max(round(fraction x n), 2)`` features, so k exactly, except that it never takes fewer
  than two (sklearn's k=1 becomes 2).
* depth: LightGBM grows leaf-wise; ``max_depth`` = sklearn's (unlimited ``None`` as the
  histogram forests' ``DEFAULT_MAX_DEPTH``, 48) and ``num_leaves = min(n_train, 1024)``. Trees
  grown until pure (``num_leaves`` up to n_train, about 16,000 at quick) cost LightGBM so
  much per leaf that one quick fit ran past the default timeout, and accuracy stops improving
  at 1024 leaves, so the cap costs nothing in quality (the fits per leaf count:
  docs/measurements.md).
* min samples: ``min_data_in_leaf`` = sklearn's ``min_samples_leaf``, and
  ``min_sum_hessian_in_leaf = 0``; LightGBM has no ``min_samples_split`` (a split needs
  ``2 x min_data_in_leaf`` rows, which is sklearn's default 2).
* bins: ``max_bin`` = the histogram forests' ``DEFAULT_BINS`` (32), ``min_data_in_bin = 1``
  so small data keeps its bins; LightGBM's own quantile binning (not parabench's binner).
* seed ``seed`` = the run's seed; ``num_threads = workers`` (x an explicit
  ``--threads``). CPU only: PyPI's wheel has no CUDA learner.

Where it differs: for k classes LightGBM grows k regression trees per forest member on the
softmax gradient at the class prior (``lambda_l2 = 0``) and predicts the softmax of the
averaged leaf values, where sklearn grows one Gini classification tree and averages leaf class
frequencies. Hence statistical parity. Measured held-out accuracy at the quick profile: seed 0
serial 0.834, lightgbm 0.8145 (0.8273 with 255 bins instead of 32), xgboost 0.8377; seed 1
serial 0.8285, lightgbm 0.8347, xgboost 0.8293. The bins stay at 32, the histogram forests'
count, so that all histogram methods do the same histogram work.
"""

from __future__ import annotations

from typing import Any, ClassVar

from parabench.forest.peers import PeerForestMethod, PeerSpec
from parabench.registry import methods

#: leaves per tree: beyond this LightGBM gets slower and no more accurate (docstring)
LEAF_CAP = 1024


@methods.register
class LightGbmForest(PeerForestMethod):
    """LightGBM ``boosting="rf"`` (CPU); parameters matched as the module says."""

    name: ClassVar[str] = "lightgbm"
    startup_guess_s: ClassVar[float | None] = 10.0
    description: ClassVar[str] = "peer: LightGBM boosting=rf with bagging, num_threads=workers"
    requires: ClassVar[frozenset[str]] = frozenset({"lightgbm"})
    module: ClassVar[str] = "lightgbm"

    def build(self, spec: PeerSpec) -> Any:
        from lightgbm import LGBMClassifier

        # sklearn-API names where LGBMClassifier has them (subsample = bagging_fraction,
        # subsample_freq = bagging_freq, min_child_samples = min_data_in_leaf,
        # min_child_weight = min_sum_hessian_in_leaf, reg_lambda = lambda_l2,
        # n_jobs = num_threads, random_state = seed); core names for the rest
        return LGBMClassifier(
            boosting_type="rf",
            n_estimators=spec.trees,
            subsample=spec.sample_fraction,
            subsample_freq=1,
            colsample_bytree=1.0,
            feature_fraction_bynode=spec.features_per_split / spec.n_features,
            max_depth=spec.max_depth,
            num_leaves=max(2, min(spec.n_train, LEAF_CAP)),
            min_child_samples=spec.min_samples_leaf,
            min_child_weight=0.0,
            max_bin=spec.n_bins,
            min_data_in_bin=1,
            reg_lambda=0.0,
            random_state=spec.seed,
            n_jobs=spec.threads,
            verbose=-1,
        )
