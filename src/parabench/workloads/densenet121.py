"""``densenet121``: torchvision's DenseNet-121 on Imagenette-like 10-class images.

Usage::

    parabench run --method serial --workload densenet121 --profile quick
    parabench run --method serial --workload densenet121 --data-dir ~/imagenette2-160

``torchvision.models.densenet121(weights=None, num_classes=10)``: randomly initialised,
nothing downloaded. Its stem (stride-2 conv, max-pool) and three transitions divide the side
by 32, so images must be at least 32x32. Image side by profile: 32 (tiny), 64 (quick), 224
(full). With ``--data-dir``: an Imagenette tree (``train/`` + ``val/`` class folders) or any
class-per-folder tree, resized and centre-cropped to that side. Chance is 1 / classes.
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
    "tiny": (640, 32, 0.45, 1.0),
    "quick": (2_500, 64, 0.9, 0.3),
    "full": (12_000, 224, 0.9, 0.3),
}


@workloads.register
class DenseNet121(ImageClassifierWorkload):
    name: ClassVar[str] = "densenet121"
    #: serial, quick profile, 3 epochs (README): the default --target-quality's basis
    reference_quality: ClassVar[float | None] = 0.974
    sizes: ClassVar[dict[str, tuple[int, int, float, float]]] = SIZES
    description: ClassVar[str] = "torchvision densenet121, 3xHxW (H 32/64/224), 10 classes"

    def default_batch_size(self, profile: str) -> int | None:
        return 16 if profile == "tiny" else 32  # tiny: enough steps to learn in one epoch

    def build_model(self, data: Dataset, seed: int) -> torch.nn.Module:
        import torch
        from torchvision.models import densenet121

        check_images(self.name, data, channels=3, min_size=32)
        torch.manual_seed(seed)
        return densenet121(weights=None, num_classes=data.n_classes or int(data.y_train.max()) + 1)

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
