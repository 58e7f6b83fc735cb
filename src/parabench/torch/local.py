"""Torch sessions that train in the case's own process: ``serial`` and ``model_parallel``.

Usage (the methods' ``session`` returns one)::

    session = SerialTorchSession(workload, config)        # one device
    session = ModelParallelSession(workload, config)      # stages on cuda:0..k-1 (CPU: one)
    session.start()                  # build_case: tensors, seeded model, batch, FLOPs, loop
    stats = session.train_epoch(0)   # TorchLoop's epoch, timed by the harness's clock
    stats = session.train_part(1, 0, session.epoch_parts(8))  # its first eighth (target mode)

Both are :class:`LocalTorchSession`: the case comes from
:func:`parabench.torch.build.build_case`, training is the shared
:class:`~parabench.torch.loop.TorchLoop`. Model parallelism is a placement applied from outside
the model (:func:`parabench.torch.parallelize.place_stages`).

Timing: the lifecycle's :class:`~parabench.core.clock.Clock` (``session.clock``) synchronises
through :meth:`LocalTorchSession.synchronize`, i.e. every device of the case (model parallel:
every stage's, not only the first). ``serial`` hands that clock to its loop; ``model_parallel``
times its loop call with it. The sessions read no timer themselves.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, ClassVar

from parabench.config import RunConfig
from parabench.method import EpochStats, Session
from parabench.workload import TorchWorkload

if TYPE_CHECKING:
    import torch

    from parabench.core.clock import Clock
    from parabench.torch.build import TorchCase, TorchData

class LocalTorchSession(Session):
    """A torch case built and trained in this process."""

    workload: TorchWorkload
    window_unit: ClassVar[str] = "steps"

    def build(self) -> TorchCase:
        from parabench.torch.build import build_case, torch_device

        return build_case(self.workload, self.config, torch_device(self.config),
                          threads=self.threads_per_worker)

    def start(self) -> None:
        self.case = case = self.build()
        self.device = case.devices[0]
        self.samples_per_epoch = case.samples_per_epoch
        self.x_test, self.y_test = case.data.x_test, case.data.y_test
        self.batch_size, self.flops_per_sample = case.batch_size, case.flops_per_sample
        case.reset_peaks()
        self.loop = case.loop(case.placed, self.batch_size, clock=self.loop_clock())
        self.notes.update(case.notes)  # the loop's compile warm-up included
        if (gpus := sum(d.type == "cuda" for d in case.devices)) > 1:  # stages on k GPUs
            self.facts = dataclasses.replace(self.facts, gpus_used=gpus)  # the MFU's devices
        self._trace(case)

    def _trace(self, case: TorchCase) -> None:
        """Trace the first epoch: the workload model's own state_dict names (not the stages')."""
        from parabench.torch.loop import model_size, trace_steps, weight_digest

        self.loop.trace_steps = trace_steps(len(case.data.x), self.batch_size)
        self.loop.digest_fn = lambda: weight_digest(case.model.state_dict())
        self.loop.model_size = model_size(case.model)

    def loop_clock(self) -> Clock | None:
        """Who times the loop's epochs: the harness's clock."""
        return self.clock

    def synchronize(self) -> None:
        """Wait for queued work on every device of the case (the clock's sync; no-op on CPU).

        Before ``start`` there is no case and nothing queued: torch is not even imported here,
        so its import stays inside the timed start-up as before.
        """
        case: TorchCase | None = getattr(self, "case", None)
        if case is not None:
            from parabench.torch.loop import synchronize

            for device in case.devices:
                synchronize(device)

    def train_epoch(self, epoch: int) -> EpochStats:
        return self.train(epoch)

    def epoch_parts(self, wanted: int) -> int:
        """Up to ``wanted`` parts of whole steps (an epoch of fewer steps: one per step)."""
        from parabench.torch.loop import epoch_steps

        return max(1, min(wanted, epoch_steps(len(self.case.data.x), self.case.batch_size)))

    def train_part(self, epoch: int, part: int, parts: int) -> EpochStats:
        """Steps :func:`~parabench.torch.loop.part_span` of epoch ``epoch``'s order."""
        from parabench.torch.loop import part_span

        span = part_span(len(self.case.data.x), self.case.batch_size, part, parts)
        return self.train(epoch, span=span)

    def train_window(self, window: int, steps: int) -> EpochStats:
        """``steps`` global batches of :func:`~parabench.torch.loop.window_order`."""
        from parabench.torch.loop import window_order

        order = window_order(len(self.case.data.x), self.config.training_seed, window,
                             steps * self.case.batch_size)
        return self.train(-1, order)

    def train(self, epoch: int, indices: torch.Tensor | None = None,
              span: tuple[int, int] | None = None) -> EpochStats:
        """The loop over ``indices`` (None: epoch ``epoch``'s order, its steps ``span``)."""
        stats = self.loop.train_epoch(epoch, indices, span)  # timed by the harness's clock
        self._keep_trace()
        return stats

    def _keep_trace(self) -> None:
        if self.trace is None and self.loop.trace_piece is not None:
            from parabench.torch.session import merge_trace

            self.trace = merge_trace([self.loop.trace_piece])

    def keep_final_weights(self) -> None:
        from parabench.torch.loop import weight_digest
        from parabench.torch.session import with_final_digest

        if self.loop.digest_fn is not None:  # the weights the final evaluation scored
            self.trace = with_final_digest(self.trace, weight_digest(self.case.model.state_dict()))

    def evaluate(self) -> float:
        from parabench.torch.loop import predict

        with self.case.evaluating():  # apart from training's GPU peak
            outputs = predict(self.loop.model, self.x_test).to(self.y_test.device)
        self.peak_gpu_mb()  # per-device peaks into notes while the result still reads them
        return self.workload.score(outputs, self.y_test)

    def peak_gpu_mb(self) -> float | None:
        """Training's CUDA peak; evaluation's and the data's go into ``notes``."""
        self.notes.update(self.case.gpu_memory_notes())
        return self.case.peak_gpu_mb()


class SerialTorchSession(LocalTorchSession):
    """``serial`` on a torch workload: one process, one device."""


def stage_devices(config: RunConfig) -> list[str]:
    stages = config.option("stages")
    if config.device == "cuda":
        return [f"cuda:{i}" for i in range(stages)]
    return ["cpu"] * stages


class ModelParallelSession(LocalTorchSession):
    """The model cut into FLOP-balanced stages, stage ``i`` on ``cuda:i``, in one process."""

    def build(self) -> TorchCase:
        import torch

        from parabench.torch.build import build_case
        from parabench.torch.parallelize import cut_stages, place_stages

        self.names = names = stage_devices(self.config)
        self.devices = [torch.device(d) for d in dict.fromkeys(names)]

        def place(model: torch.nn.Module, data: TorchData) -> torch.nn.Module:
            self.plan = cut_stages(self.workload, model, data.x, len(names))
            return place_stages(self.plan.modules, names)

        # the whole model stays on the host: its stages move to their devices when placed
        case = build_case(self.workload, self.config, self.devices[0], on_host=True,
                          place=place, devices=self.devices, threads=self.threads_per_worker,
                          knobs=False)
        from parabench.torch.knobs import apply_knobs

        case.notes.update(apply_knobs(list(case.placed.stages), self.config))  # per stage
        return case

    def start(self) -> None:
        from parabench.torch.parallelize import TargetsToOutput

        super().start()
        self.loop.loss_fn = TargetsToOutput(self.loop.loss_fn)
        self.notes.update(self.plan.notes())
        self.notes["devices"] = self.names
        self.notes["stages"] = len(self.names)
        if self.config.device == "cpu":
            self.notes["model_parallel_note"] = (
                f"CPU: all {len(self.names)} stages run on the one CPU device (same code "
                f"path; activations do not move)")

    def loop_clock(self) -> Clock | None:
        return None  # the loop's own (first device); the epoch is timed around it, below

    def train(self, epoch: int, indices: torch.Tensor | None = None,
              span: tuple[int, int] | None = None) -> EpochStats:
        # the whole loop call, ended by the clock's synchronise of every stage's device
        stats, seconds = self.clock.time(lambda: self.loop.train_epoch(epoch, indices, span))
        self._keep_trace()
        seconds -= self.loop.trace_s
        from parabench.torch.loop import partition  # "other" over the whole timed call

        return dataclasses.replace(stats, seconds=seconds,
                                   components=partition(stats.components, seconds))

    def state_dict(self) -> dict[str, Any]:
        """The workload model's weights (the stages share them) on the CPU."""
        return {k: v.detach().cpu().clone() for k, v in self.case.model.state_dict().items()}

    def peak_gpu_mb(self) -> float | None:
        """Training's largest per-device CUDA peak (all of them in ``notes``)."""
        if self.config.device != "cuda":
            return None
        self.notes["peak_gpu_mb_per_device"] = self.case.train_peaks_mb()
        return super().peak_gpu_mb()
