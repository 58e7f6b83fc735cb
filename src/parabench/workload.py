"""Workloads: *what* is trained, independent of how it is parallelized.

Usage (a new workload)::

    from parabench.registry import workloads
    from parabench.workload import TorchWorkload, Quality

    @workloads.register
    class MyNet(TorchWorkload):
        name = "mynet"
        description = "..."
        def make_data(self, profile, seed): ...
        def build_model(self, data, seed): ...

A workload never imports ``torch.distributed``, MPI, Dask or Spark: methods wrap it from the
outside. Heavy libraries (torch, sklearn) are imported inside methods so that
``parabench list`` works on a machine with none of the optional extras installed.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from parabench.config import OptionSpec
from parabench.dataset import Dataset

if TYPE_CHECKING:
    import torch

    from parabench.config import RunConfig

#: the option of every workload with a real-data loader (declared in its ``options``): a
#: different dataset is different mathematics; a path, so no label shows it
DATA_DIR = OptionSpec(str, "directory or file with a real dataset (nothing is downloaded)",
                      changes_math=True, in_label=False)


#: the option of every convolutional workload (declared in its ``options``): its model and each
#: batch in ``torch.channels_last`` memory format (NHWC), what GPU users train convolutions in.
#: Other kernels, the same mathematics within float precision (as ``compile``); the work timed
#: changes, so a speed ratio's baseline shares it. Applied from outside the model
#: (:mod:`parabench.torch.knobs`)
CHANNELS_LAST = OptionSpec(str, "memory format of the model and batches: on (NHWC, "
                           "torch.channels_last) or off (NCHW)", choices=("on", "off"),
                           default="off", equal_work=True, family="torch")


def no_real_data(workload: str, data_dir: str | None) -> None:
    """Raise ConfigError when a synthetic-only workload is given ``--data-dir``."""
    if data_dir is not None:
        from parabench.config import ConfigError

        raise ConfigError(f"workload {workload} is synthetic only; it takes no --data-dir")


@dataclass(frozen=True, kw_only=True)
class Quality:
    """The held-out quality metric a workload reports."""

    name: str
    higher_is_better: bool
    #: where a ``--target-quality`` Q can lie, ``low < Q <= high``: (0, 1) for an accuracy,
    #: (0, inf) for an error such as MSE; None: undeclared (a plugin's metric), not checked
    bounds: tuple[float, float] | None = None


@dataclass(frozen=True, kw_only=True)
class TensorParallelPlan:
    """How a model splits for tensor parallelism (Megatron-style), declared by its workload as
    plain data; :mod:`parabench.torch.tensor_parallel` turns it into torch's parallel styles.

    ``colwise`` layers keep a slice of their output features on each rank (their input
    whole); ``rowwise`` layers a slice of their input features, and their partial outputs
    are summed over the ranks. ``divides`` names the sizes the tensor-parallel degree must
    divide (heads, width, MLP width). Sequence parallelism (optional: empty ``norms`` means
    the model has none): ``norms`` run on a slice of the sequence, ``gather`` modules take
    the whole sequence (gathered before them), ``scatter`` modules' outputs are cut along
    the sequence (dimension ``seq_dim`` of length ``seq_len``), and the rowwise layers'
    sums are reduce-scattered back onto the sequence slices.
    """

    colwise: tuple[str, ...]
    rowwise: tuple[str, ...]
    divides: Mapping[str, int]
    norms: tuple[str, ...] = ()
    gather: tuple[str, ...] = ()
    scatter: tuple[str, ...] = ()
    seq_dim: int = 1
    seq_len: int | None = None


class Workload(ABC):
    """Base of all workloads. ``family`` tells methods which kind of trainer it needs."""

    name: ClassVar[str]
    description: ClassVar[str] = ""
    family: ClassVar[str]
    quality: ClassVar[Quality]
    requires: ClassVar[frozenset[str]] = frozenset()
    #: profile -> standard deviation of the serial baseline's held-out quality across seeds
    #: (measured and stated in the workload's module); sets the margin that methods with
    #: statistical parity must stay within (see :mod:`parabench.analysis.parity`)
    seed_spread: ClassVar[dict[str, float]] = {}
    #: held-out quality serial reaches at the quick profile in 3 epochs (measured, listed in
    #: docs/measurements.md); ``--target-quality default`` derives its fallback from it where
    #: no target was measured for the profile (parabench.case.stopping, workloads.quality_targets)
    reference_quality: ClassVar[float | None] = None
    #: False when every epoch retrains the same model from scratch (a seeded forest refit),
    #: so more epochs cannot raise quality: time-to-target mode stops after the first
    epochs_improve: ClassVar[bool] = True
    #: the options the workload itself reads, name -> declaration (:data:`DATA_DIR` where it
    #: has a real loader)
    options: ClassVar[Mapping[str, OptionSpec]] = {}
    #: seconds one ``tiny`` epoch (one fit, for estimators) takes on 2 cores: the dry run's
    #: guess with the method's ``startup_guess_s``. None: its fallback, said on the line
    tiny_epoch_guess_s: ClassVar[float | None] = None
    #: where plain ``pytest`` ranks this workload when it picks one to stand for a method
    #: (cheapest first, :func:`parabench.sweep.bench.smoke_cases`); None: after the ranked ones
    smoke_rank: ClassVar[int | None] = None
    #: whether the coverage grid (a bare ``parabench run``) trains it; False for a workload
    #: sized for another machine whose code another covered workload runs (gpt2: gpt's), or
    #: one whose rows there say little for their time (densenet121: near chance after 1 epoch)
    in_coverage: ClassVar[bool] = True

    @abstractmethod
    def make_data(self, profile: str, seed: int, data_dir: str | None = None) -> Dataset:
        """Seeded data sized by profile: the same (profile, seed) gives the same bytes.

        ``data_dir`` (the ``--data-dir`` option) points at a real dataset on disk; a workload
        without a loader for one raises :class:`~parabench.config.ConfigError` saying so.
        """

    def dataset(self, config: RunConfig) -> Dataset:
        """The data of one case: real from ``config.options['data_dir']``, else synthetic,
        built once per sweep (:mod:`parabench.workloads.datacache`); ``origin`` says which."""
        from parabench.workloads.datacache import case_dataset

        return case_dataset(self, config.profile, config.seed, config.option("data_dir"))

    def default_batch_size(self, profile: str) -> int | None:
        """Batch size used when the config leaves it unset (None: the workload has no batches)."""
        return None

    def samples_per_epoch(self, data: Dataset) -> int:
        return data.n_train

    def train_size(self, profile: str) -> int | None:
        """Training samples of the synthetic data at ``profile``, known without building it
        (None: not known up front). Lets the CLI refuse a batch larger than the set."""
        return None


class EstimatorWorkload(Workload):
    """A scikit-learn style estimator: one epoch is one ``fit`` of the whole training set."""

    family: ClassVar[str] = "estimator"
    requires: ClassVar[frozenset[str]] = frozenset({"sklearn"})
    epochs_improve: ClassVar[bool] = False

    @abstractmethod
    def build_estimator(self, profile: str, seed: int, n_jobs: int) -> Any:
        """An unfitted estimator; ``n_jobs`` is the method's business, not the workload's."""

    def score(self, estimator: Any, x: np.ndarray, y: np.ndarray) -> float:
        from sklearn.metrics import accuracy_score

        return float(accuracy_score(y, estimator.predict(x)))

    def train_loss(self, estimator: Any, data: Dataset, limit: int = 2000) -> float:
        """Log-loss on (at most ``limit``) training samples: a cheap per-epoch loss."""
        from sklearn.metrics import log_loss

        x, y = data.x_train[:limit], data.y_train[:limit]
        return float(log_loss(y, estimator.predict_proba(x), labels=estimator.classes_))


class TorchWorkload(Workload):
    """A PyTorch model trained with mini-batch SGD-style optimizers."""

    family: ClassVar[str] = "torch"
    requires: ClassVar[frozenset[str]] = frozenset({"torch"})
    quality: ClassVar[Quality] = Quality(name="accuracy", higher_is_better=True, bounds=(0, 1))
    lr: ClassVar[float] = 0.05

    @abstractmethod
    def build_model(self, data: Dataset, seed: int) -> torch.nn.Module:
        """A freshly initialised model; ``seed`` makes the initial weights reproducible."""

    def default_batch_size(self, profile: str) -> int | None:
        return 64

    def loss_fn(self) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
        import torch

        return torch.nn.functional.cross_entropy  # a function: no module-call hooks per step

    def make_optimizer(self, params: Any) -> torch.optim.Optimizer:
        import torch

        return torch.optim.SGD(params, lr=self.lr, momentum=0.9)

    def model_flops_per_sample(self, data: Dataset) -> float | None:
        """Training FLOPs per sample from the model's own formula (nanoGPT's MFU estimate),
        or None (the default): counted once by ``torch.utils.flop_counter`` instead
        (:func:`parabench.torch.build.cached_flops_per_sample`)."""
        return None

    def tensors(self, data: Dataset) -> tuple[torch.Tensor, ...]:
        """(x_train, y_train, x_test, y_test) as tensors with the dtypes the model wants."""
        import torch

        return (
            torch.as_tensor(data.x_train, dtype=torch.float32),
            torch.as_tensor(data.y_train, dtype=torch.long),
            torch.as_tensor(data.x_test, dtype=torch.float32),
            torch.as_tensor(data.y_test, dtype=torch.long),
        )

    def score(self, outputs: torch.Tensor, targets: torch.Tensor) -> float:
        """Quality from held-out model outputs (default: classification accuracy)."""
        return float((outputs.argmax(dim=1) == targets).float().mean().item())

    def sequential(self, model: torch.nn.Module) -> torch.nn.Sequential | None:
        """``model`` as an ``nn.Sequential`` of the same parameters, or None if it has none.

        Pipeline and model-parallel methods cut this sequence into contiguous stages; the
        view must compute exactly ``model(x)`` and share ``model``'s parameter objects.
        A workload whose model cannot be written as one sequence (e.g. an encoder-decoder fed
        two inputs) returns None, and those methods skip it with the reason.
        """
        import torch

        return model if isinstance(model, torch.nn.Sequential) else None

    def tp_plan(self, model: torch.nn.Module) -> TensorParallelPlan | None:
        """How ``model`` splits for tensor parallelism (module names of ``model``), or None
        (the default): the tensor-parallel methods skip the workload with the reason."""
        return None
