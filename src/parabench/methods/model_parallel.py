"""``model_parallel``: the model cut layer-wise into k stages on k devices, in one process.

Usage::

    parabench run --workload cnn --method model_parallel --stages 2 --device cuda  # cuda:0, :1
    parabench run --workload cnn --method model_parallel --stages 2                # CPU: see below

Seed 002's layer-wise model parallelism (2.2.4): the workload's ``sequential()`` view is cut
into ``stages`` contiguous slices (option ``stages``, default 2) balanced by forward + backward
FLOPs (:mod:`parabench.torch.stages`), slice ``i`` lives on ``cuda:i``, and the forward
moves each activation to the next slice's device; autograd moves the gradients back. Only
one device works at a time: this is the memory split, not a speed-up (``pipeline`` overlaps
the stages with micro-batches).

On CPU every stage sits on the one CPU device and the code path is the same (the moves are
no-ops); the result says so in ``devices`` and ``model_parallel_note``. Workloads without a
sequential view (``seq2seq``) are skipped with the reason.

Parity is exact: the same modules compute the same batch in the same order as ``serial``
(same global batch, same seeded sample order, one optimizer over the same parameters).

Training is the shared :class:`~parabench.torch.loop.TorchLoop` over the staged module, so
precision, the DataLoader knobs and ``--batch-size auto`` behave as in ``serial``. Batches
live on the first stage's device; the loss moves the targets to the last stage's device.

Components: ``data``, ``forward``, ``backward``, ``optimizer`` from TorchLoop (on CUDA, events
on the first stage's device: a stage waiting on another's work is counted where it waits).
Activation and gradient copies between devices are inside ``forward`` and ``backward``; they
are not reported separately (on CPU there are none). The epoch time is the host clock around
the loop, read after synchronising **every** stage's device, not only the first.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from parabench import hardware
from parabench.config import OptionSpec, RunConfig
from parabench.method import Method, Session
from parabench.registry import methods
from parabench.torch.local import ModelParallelSession
from parabench.torch.options import STAGES, TORCH_OPTIONS
from parabench.workload import TorchWorkload, Workload


@methods.register
class ModelParallel(Method):
    name: ClassVar[str] = "model_parallel"
    startup_guess_s: ClassVar[float | None] = 5.0
    description: ClassVar[str] = (
        "layer-wise split across devices in one process (cuda:0..k-1; one device on CPU)"
    )
    devices: ClassVar[tuple[str, ...]] = ("cpu", "cuda")
    families: ClassVar[frozenset[str]] = frozenset({"torch"})
    options: ClassVar[Mapping[str, OptionSpec]] = {**TORCH_OPTIONS,
                                                   "stages": STAGES.with_default(2)}
    max_workers: ClassVar[int | None] = 1
    parity: ClassVar[str] = "exact"

    def check(self, workload: Workload, config: RunConfig) -> str | None:
        if (reason := super().check(workload, config)) is not None:
            return reason
        from parabench.torch.stages import sequential_reason

        stages = config.option("stages")
        if config.device == "cuda" and stages > (gpus := hardware.cuda_device_count()):
            return f"model_parallel puts each of {stages} stages on its own GPU; {gpus} here"
        assert isinstance(workload, TorchWorkload)
        return sequential_reason(workload, stages)

    def session(self, workload: Workload, config: RunConfig) -> Session:
        assert isinstance(workload, TorchWorkload)
        return ModelParallelSession(workload, config)
