"""The Session every multi-process torch method shares: a pool of ranks, stats folded to one.

Usage (a method whose ranks run ``MyProgram``)::

    from parabench.methods.ddp import DDPProgram as MyProgram   # any rank program class

    class MySession(DistributedTorchSession):
        program = MyProgram           # a class; pickled by reference to the spawned ranks

    session = MySession(workload, config)
    session.start()              # pool of config.workers ranks; startup_s covers all of it
    stats = session.train_epoch(0)  # pool.call("train_epoch", epoch=0), folded by fold_epochs
    session.evaluate()           # pool.call("evaluate"): rank 0's held-out quality
    session.close()

The rank program is built as ``Program(ctx, workload=<name>, config=<RunConfig dict>)`` and
answers the protocol below; :class:`parabench.torch.data_parallel.DataParallelProgram`
implements it for data-parallel methods:

* ``describe() -> dict``: ``batch_size`` (global), ``samples_per_epoch``, ``flops_per_sample``,
  ``notes`` (all from rank 0; the session copies them into the result);
* ``train_epoch(epoch) -> EpochStats``: this rank's epoch, timed with ``ctx.timed``;
* optional ``epoch_parts(wanted) -> int`` and ``train_part(epoch, part, parts) ->
  EpochStats``: this rank's piece of part ``part`` of an epoch (time-to-target mode's
  evaluations between parts, :class:`~parabench.method.Session`); a program without them
  (TensorFlow's) trains whole epochs there;
* ``train_window(window, steps) -> EpochStats``: this rank's share of ``steps`` global batches
  of :func:`~parabench.torch.loop.window_order`, timed the same way (fedavg: one round; a
  session whose ``window_unit`` is ``"epoch"`` - TensorFlow - never asks: its window is an
  epoch);
* ``evaluate() -> float | None``: the quality on rank 0 (other ranks may return None);
* ``peak_gpu_mb() -> float | None``;
* optional ``trace() -> dict | None``: this rank's trace piece (:mod:`parabench.torch.loop`),
  asked once, after the first epoch; the session merges the pieces into ``session.trace``
  (:func:`merge_trace`). A program without ``trace`` (fedavg, TensorFlow) records none.

The ranks' group comes from ``self.launcher`` (:mod:`parabench.core.launcher`), which the
lifecycle sets: a :class:`~parabench.core.pool.WorkerPool` by default; under ``torchrun``
(``python -m parabench.cli.torchrun``) the same session runs on every rank with an
in-process stand-in for the pool (:class:`parabench.torch.launch.TorchrunGroup`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any, ClassVar

from parabench.config import RunConfig
from parabench.core.pool import resolve_program
from parabench.method import EpochStats, Session
from parabench.workload import Workload


def fold_epochs(per_rank: Sequence[EpochStats]) -> EpochStats:
    """One epoch from every rank's: slowest rank's seconds, all samples, sample-weighted loss,
    and the samples every rank's loader served, summed (``served``: checked by the lifecycle).

    Components are the slowest rank's (the first of equals): they partition that rank's epoch,
    which is the time the job reports. Taking each component's maximum over ranks would mix
    ranks and add up to more than any rank's epoch (the ranks' own figures stay with the
    caller, e.g. :func:`parabench.torch.staged.fold_stage_epochs` notes every rank's idle).
    """
    if not per_rank:
        raise ValueError("no rank reported an epoch")
    samples = sum(s.samples for s in per_rank)
    loss = sum(s.loss * s.samples for s in per_rank) / samples if samples else float("nan")
    slowest = max(per_rank, key=lambda s: s.seconds)
    # the loaders' own count, summed apart from the claims (None unless every rank kept one)
    served = [s.served for s in per_rank]
    return EpochStats(seconds=slowest.seconds, loss=loss, samples=samples,
                      components=dict(slowest.components),
                      served=None if None in served else sum(s or 0 for s in served))


def merge_trace(pieces: Sequence[dict[str, Any] | None]) -> dict[str, Any] | None:
    """One trace from the ranks' pieces (None when none has losses or none a digest).

    A step's loss is the global batch's mean: every piece's loss sum over every piece's
    samples (DDP's shards, pipeline's last stages). The digest is the union of the pieces'
    tensors, the first piece holding a name winning (rank order: replica 0 under hybrid);
    ``covered`` says how many tensors and elements it holds, ``model`` (the first piece's
    :func:`~parabench.torch.loop.model_size`) how many the model has.
    """
    real = [p for p in pieces if p]
    lossy = [p for p in real if p["loss_sums"]]
    if not lossy or not any(p["digest"] for p in real):
        return None
    steps = len(lossy[0]["loss_sums"])
    losses = [sum(p["loss_sums"][k] for p in lossy) / sum(p["samples"][k] for p in lossy)
              for k in range(steps)]
    digest: dict[str, Any] = {}
    for piece in real:
        for name, figures in (piece["digest"] or {}).items():
            digest.setdefault(name, figures)
    from parabench.torch.loop import digest_coverage

    model = next((p["model"] for p in real if p.get("model")), None)
    return {"steps": steps, "losses": losses, "digest": digest,
            "covered": digest_coverage(digest), "model": model}


def with_final_digest(trace: dict[str, Any] | None,
                      digest: dict[str, Any] | None) -> dict[str, Any] | None:
    """``trace`` with the digest of the weights the final held-out evaluation scored
    (:meth:`~parabench.method.Session.keep_final_weights`)."""
    if trace is None or not digest:
        return trace
    from parabench.torch.loop import digest_coverage

    return {**trace, "final_digest": digest, "final_covered": digest_coverage(digest)}


class DistributedTorchSession(Session):
    """A torch session whose work runs in ``config.workers`` rank processes."""

    #: the rank program class (its "module:Class" string is still accepted)
    program: ClassVar[str | type]
    window_unit: ClassVar[str] = "steps"
    spans_nodes: ClassVar[bool] = True  # its group comes from the launcher (make_pool)

    def __init__(self, workload: Workload, config: RunConfig) -> None:
        super().__init__(workload, config)
        self.pool: Any = None
        self._peaks: list[float | None] = []
        self._trace_asked = False
        self._parts: dict[int, int] = {}

    def program_args(self) -> dict[str, Any]:
        """Keyword arguments of the rank program's constructor (picklable)."""
        return {"workload": self.workload.name, "config": self.config.to_dict()}

    def make_pool(self) -> Any:
        """The ranks' group, not yet started: the launcher's (a pool, or torchrun's ranks)."""
        return self.launcher.group(self.program, self.program_args(), self.config)

    def start(self) -> None:
        self.pool = self.make_pool()
        self.pool.start()
        # What the ranks really run with: the thread count each one reported after set-up.
        threads = {info["threads"] for info in self.pool.rank_info}
        self.threads_per_worker = max(threads)
        info = self.pool.call("describe")[0]
        self.batch_size = info["batch_size"]
        self.samples_per_epoch = info["samples_per_epoch"]
        self.flops_per_sample = info.get("flops_per_sample")
        self.notes.update(info.get("notes", {}))
        self.facts = dataclasses.replace(
            self.facts, rank_threads=[i["threads"] for i in self.pool.rank_info],
            rank_cores=[i.get("cores") for i in self.pool.rank_info],
            samples_per_client=info.get("samples_per_client"),  # fedavg's program says
            ranks_forked=getattr(self.pool, "forked", None))  # a pool's, not torchrun's
        self.notes["rank_devices"] = [i["device"] for i in self.pool.rank_info]
        self.notes["startup_rendezvous_s"] = self.pool.startup_s

    def fold(self, per_rank: list[EpochStats], window: bool = False) -> EpochStats:
        """The ranks' epochs (or speed windows) as one: :func:`fold_epochs`."""
        return fold_epochs(per_rank)

    def train_epoch(self, epoch: int) -> EpochStats:
        stats = self.fold(self.pool.call("train_epoch", epoch=epoch))
        self.collect_trace()
        return stats

    def epoch_parts(self, wanted: int) -> int:
        """The program's parts (asked once per ``wanted``); 1 when it has no ``train_part``."""
        if not hasattr(resolve_program(self.program), "train_part"):
            return 1
        if wanted not in self._parts:
            self._parts[wanted] = int(self.pool.call("epoch_parts", wanted=wanted)[0])
        return self._parts[wanted]

    def train_part(self, epoch: int, part: int, parts: int) -> EpochStats:
        if parts == 1:
            return self.train_epoch(epoch)
        stats = self.fold(self.pool.call("train_part", epoch=epoch, part=part, parts=parts))
        self.collect_trace(last=part == parts - 1)  # the trace may span the first parts
        return stats

    def train_window(self, window: int, steps: int) -> EpochStats:
        if self.window_unit == "epoch":  # TensorFlow's programs: one more epoch
            return super().train_window(window, steps)
        return self.fold(self.pool.call("train_window", window=window, steps=steps),
                         window=True)

    def collect_trace(self, last: bool = True) -> None:
        """The ranks' trace pieces merged (outside the clock): after the first epoch, or
        after each of its parts until they are there (``last``: the epoch's last part)."""
        if self._trace_asked or not hasattr(resolve_program(self.program), "trace"):
            return
        self.trace = merge_trace(self.pool.call("trace"))
        self._trace_asked = last or self.trace is not None

    def evaluate(self) -> float:
        value = self.pool.call("evaluate")[0]
        self._collect_peaks()
        return float(value)

    def keep_final_weights(self) -> None:
        if self.trace is not None and hasattr(resolve_program(self.program), "digest"):
            # the weights just scored (a collective under FSDP and pipeline: every rank)
            self.trace = with_final_digest(self.trace, self.pool.call("digest")[0])

    def _collect_peaks(self) -> None:
        if self.config.device == "cuda" and self.pool is not None and self.pool.running:
            self._peaks = self.pool.call("peak_gpu_mb")
            self.notes["peak_gpu_mb_per_rank"] = self._peaks

    def peak_gpu_mb(self) -> float | None:
        """The largest per-rank CUDA peak (every rank's is in ``notes``)."""
        peaks = [p for p in self._peaks if p is not None]
        return max(peaks) if peaks else None

    def close(self) -> None:
        if self.pool is None:
            return
        try:
            if not self._peaks:
                self._collect_peaks()  # an epoch failed before evaluate: keep what was reached
            if self.pool.running and hasattr(self.pool, "final_notes"):  # torchrun's group
                final = self.pool.final_notes()  # summed by parabench.cli.torchrun.finish
                self.facts = dataclasses.replace(
                    self.facts, rank_max_rss_mb=final.pop("rank_max_rss_mb"),
                    rank_peak_pss_mb=final.pop("rank_peak_pss_mb"),
                    rank_hosts=final.pop("rank_hosts"))
                self.notes.update(final)
        except Exception:  # noqa: BLE001 - the pool may be what failed; closing matters more
            pass
        self.pool.close()
