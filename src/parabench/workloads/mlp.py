"""``mlp``: a PyTorch multi-layer perceptron classifier on seeded synthetic tabular data.

Usage::

    parabench run --method serial --workload mlp --profile tiny
    parabench run --method serial,ddp --workload mlp --workers 2 --profile quick

Two hidden ReLU layers (:func:`hidden_width`: 256 wide at tiny and quick, 1,024 at full);
SGD with momentum; quality is held-out accuracy (chance is 1 / classes). The serial baseline
beats chance clearly after one tiny-profile epoch.

The data are the same at every ``--seed`` (drawn by :data:`DATA_SEED`); the seed draws the
initial weights and the batch order. So serial's seed-to-seed spread is its training's, which
is what a statistical method's quality gate must tell a loss from: with a dataset per seed,
how hard each draw was and the binomial noise of a small held-out set hid losses several
times larger (``docs/measurements.md``, "The quality gate's power"). Tiny holds out 8,192
rows for the same reason; it trains on 2,048. Its hidden layers are 256 wide, not 64, for the
same reason too: a narrow network lands on more varied solutions from seed to seed. Quick
trains in batches of 256 (:data:`BATCH`), not 64: at 64 and this learning rate the
optimizer's noise kept the held-out accuracy jumping from epoch to epoch, below where the
network can go.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from parabench.registry import workloads
from parabench.workload import Dataset, TorchWorkload, no_real_data
from parabench.workloads.tabular import tabular_classification

if TYPE_CHECKING:
    import torch

# profile -> (training rows, held-out rows, features, classes); the hidden width is
# hidden_width(features)
SIZES: dict[str, tuple[int, int, int, int]] = {
    "tiny": (2_048, 8_192, 32, 4),
    "quick": (20_000, 5_000, 128, 10),
    "full": (96_000, 24_000, 784, 10),
}
#: the narrowest hidden layer (tiny's): narrower ones land on more varied solutions, so
#: serial's converged quality varies more over seeds and the quality gate sees less
MIN_HIDDEN = 256
#: the seed of the data draw, whatever the run's seed (module docstring)
DATA_SEED = 0
#: the default batch per profile (64 elsewhere): at quick, steps of 64 rows at this learning
#: rate kept the held-out accuracy bouncing about 0.015 from epoch to epoch near 0.80, and
#: the quality gate could not see a loss under 0.07; steps of 256 settle near 0.91 with a
#: seed spread under 0.003 (module docstring)
BATCH: dict[str, int] = {"quick": 256}


def hidden_width(features: int) -> int:
    """Both hidden layers' width: 2 x features, within [MIN_HIDDEN, 1024] (tiny: 256)."""
    return min(1024, max(MIN_HIDDEN, 2 * features))


@workloads.register
class MLP(TorchWorkload):
    #: std of serial's held-out accuracy over seeds 0-4 (3 epochs, the default batch, 1
    #: thread), measured for the fedavg parity tests; sets the statistical parity margin
    seed_spread: ClassVar[dict[str, float]] = {"tiny": 0.007, "quick": 0.0046}
    name: ClassVar[str] = "mlp"
    tiny_epoch_guess_s: ClassVar[float | None] = 0.5
    smoke_rank: ClassVar[int | None] = 0
    #: serial, quick profile, 3 epochs (README): the default --target-quality's basis
    reference_quality: ClassVar[float | None] = 0.80
    description: ClassVar[str] = "PyTorch MLP classifier, synthetic tabular data"
    lr: ClassVar[float] = 0.02

    def make_data(self, profile: str, seed: int, data_dir: str | None = None) -> Dataset:
        no_real_data(self.name, data_dir)
        train, held_out, features, classes = SIZES[profile]
        return tabular_classification(n_samples=train + held_out, n_held_out=held_out,
                                      n_features=features, n_classes=classes, seed=DATA_SEED)

    def train_size(self, profile: str) -> int | None:
        return SIZES[profile][0]

    def default_batch_size(self, profile: str) -> int | None:
        return BATCH.get(profile, 64)

    def build_model(self, data: Dataset, seed: int) -> torch.nn.Module:
        import torch
        from torch import nn

        features = data.x_train.shape[1]
        hidden = hidden_width(features)
        torch.manual_seed(seed)
        return nn.Sequential(
            nn.Linear(features, hidden),
            nn.ReLU(),
            nn.Linear(hidden, hidden),
            nn.ReLU(),
            nn.Linear(hidden, data.n_classes or int(data.y_train.max()) + 1),
        )
