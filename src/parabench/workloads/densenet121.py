"""``densenet121``: torchvision's DenseNet-121 on Imagenette-like 10-class images.

Usage::

    parabench run --method serial --workload densenet121 --profile quick
    parabench run --method serial --workload densenet121 --data-dir ~/imagenette2-160

``torchvision.models.densenet121(weights=None, num_classes=10)``: randomly initialised,
nothing downloaded. Its stem (stride-2 conv, max-pool) and three transitions divide the side
by 32, so images must be at least 32x32. Image side by profile: 32 (tiny), 64 (quick), 224
(full). With ``--data-dir``: an Imagenette tree (``train/`` + ``val/`` class folders) or any
class-per-folder tree, resized and centre-cropped to that side. Chance is 1 / classes.

At tiny the model is torchvision's ``DenseNet`` with densenet121's blocks (6, 12, 24, 16) at a
quarter of the width (growth rate 8, 16 initial features): the same 121 layers and BatchNorms,
~1/16 of the arithmetic, so the tiny smoke test takes seconds (full width's tiny epoch:
docs/measurements.md). quick and full are ``densenet121`` itself.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from parabench.registry import workloads
from parabench.workload import Dataset
from parabench.workloads.images import ImageClassifierWorkload
from parabench.workloads.synthetic import check_images

if TYPE_CHECKING:
    import torch

#: profile -> (synthetic samples, image side, pixel noise, class separation). tiny is
#: easy enough to learn in one short epoch; from quick on the classes share most of their
#: template, so accuracy climbs over several epochs instead of saturating in the first.
SIZES: dict[str, tuple[int, int, float, float]] = {
    "tiny": (640, 32, 0.3, 1.0),
    "quick": (2_500, 64, 0.9, 0.3),
    "full": (12_000, 224, 0.9, 0.3),
}


@workloads.register
class DenseNet121(ImageClassifierWorkload):
    name: ClassVar[str] = "densenet121"
    #: BatchNorm layers: a split batch is graded statistical (split_batch_grading)
    batchnorm: ClassVar[bool] = True
    tiny_epoch_guess_s: ClassVar[float | None] = 4.0
    smoke_rank: ClassVar[int | None] = 7
    #: not in a bare `run`: one tiny epoch leaves it near chance (0.09-0.28 over seeds), so
    #: its rows there said little, and vgg11 covers the BatchNorm image classifier under ddp;
    #: its three cases (the 1-thread serial its scaling needs among them) were the price of
    #: the grid's every-baseline rule staying in its 10 minutes (sweep/coverage.py)
    in_coverage: ClassVar[bool] = False
    #: serial, quick profile, 3 epochs (README): the default --target-quality's basis
    reference_quality: ClassVar[float | None] = 0.974
    sizes: ClassVar[dict[str, tuple[int, int, float, float]]] = SIZES
    description: ClassVar[str] = "torchvision densenet121, 3xHxW (H 32/64/224), 10 classes"
    narrow: ClassVar[dict[str, int]] = {"tiny": 4}

    def default_batch_size(self, profile: str) -> int | None:
        # tiny: 32, as the per-step cost of 121 small layers dominates there (narrow, 2 threads:
        # 5.0 ms a sample at 32, 7.9 at 16); it learns in its second epoch (0.74-0.91 over
        # seeds 0-3 after two, near chance after one: 2026-11-24)
        return 32

    def build_model(self, data: Dataset, seed: int) -> torch.nn.Module:
        import torch
        from torchvision.models import DenseNet

        check_images(self.name, data, channels=3, min_size=32)
        classes = data.n_classes or int(data.y_train.max()) + 1
        torch.manual_seed(seed)
        divisor = self.divisor(data)
        # what torchvision's densenet121(weights=None) builds, every width / divisor
        return DenseNet(growth_rate=32 // divisor, block_config=(6, 12, 24, 16),
                        num_init_features=64 // divisor, num_classes=classes)

    def sequential(self, model: torch.nn.Module) -> torch.nn.Sequential:
        """stem, dense blocks, transitions, norm5, ReLU, pool, flatten, classifier.

        The same computation as ``DenseNet.forward`` (features, relu, global average pool,
        flatten, classifier), one stage boundary per block.
        """
        from torch import nn

        return nn.Sequential(
            *model.features,
            nn.ReLU(inplace=True),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(1),
            model.classifier,
        )
