"""``mlp``: a PyTorch multi-layer perceptron classifier on seeded synthetic tabular data.

Usage::

    parabench run --method serial --workload mlp --profile tiny
    parabench run --method serial,ddp --workload mlp --workers 2 --profile quick

Two hidden ReLU layers; SGD with momentum; quality is held-out accuracy (chance is
1 / classes). The serial baseline beats chance clearly after one tiny-profile epoch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from parabench.registry import workloads
from parabench.workload import Dataset, TorchWorkload, no_real_data
from parabench.workloads.tabular import tabular_classification, tabular_train_size

if TYPE_CHECKING:
    import torch

# profile -> (samples, features, classes); hidden width is 2 x features, within [64, 1024]
SIZES: dict[str, tuple[int, int, int]] = {
    "tiny": (2_560, 32, 4),
    "quick": (25_000, 128, 10),
    "full": (120_000, 784, 10),
}


@workloads.register
class MLP(TorchWorkload):
    #: std of serial's held-out accuracy over seeds 0-4 (3 epochs, batch 64, 1 thread),
    #: measured for the fedavg parity tests; sets the statistical parity margin
    seed_spread: ClassVar[dict[str, float]] = {"tiny": 0.018, "quick": 0.014}
    name: ClassVar[str] = "mlp"
    tiny_epoch_guess_s: ClassVar[float | None] = 0.5
    smoke_rank: ClassVar[int | None] = 0
    #: serial, quick profile, 3 epochs (README): the default --target-quality's basis
    reference_quality: ClassVar[float | None] = 0.78
    description: ClassVar[str] = "PyTorch MLP classifier, synthetic tabular data"
    lr: ClassVar[float] = 0.02

    def make_data(self, profile: str, seed: int, data_dir: str | None = None) -> Dataset:
        no_real_data(self.name, data_dir)
        samples, features, classes = SIZES[profile]
        return tabular_classification(
            n_samples=samples, n_features=features, n_classes=classes, seed=seed
        )

    def train_size(self, profile: str) -> int | None:
        return tabular_train_size(SIZES[profile][0])

    def build_model(self, data: Dataset, seed: int) -> torch.nn.Module:
        import torch
        from torch import nn

        features = data.x_train.shape[1]
        hidden = min(1024, max(64, 2 * features))
        torch.manual_seed(seed)
        return nn.Sequential(
            nn.Linear(features, hidden),
            nn.ReLU(),
            nn.Linear(hidden, hidden),
            nn.ReLU(),
            nn.Linear(hidden, data.n_classes or int(data.y_train.max()) + 1),
        )
