"""When splitting a global batch changes the mathematics: BatchNorm, a token-mean loss.

Usage::

    grading = split_batch_grading(workload, parts=2, where="each rank's shard")  # or None
    check_split_batch_grading(workload, model, 2, "each rank's shard")   # raises on a mismatch
    split_batch_note(workload, model, 2, "each micro-batch")   # {"parity_kind": ..., ...}

Data parallelism (:mod:`parabench.torch.data_parallel`, which re-exports these) and the
pipelines split each global batch into parts; the methods grade such a case statistical, with
the reason, where the split changes what is computed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from parabench.core.records import Grading
from parabench.workload import Workload

if TYPE_CHECKING:
    import torch


def split_batch_grading(workload: Workload, parts: int, where: str, *,
                        batchnorm_synced: bool = False) -> Grading | None:
    """The grading "statistical" (and why) when splitting the batch into ``parts`` changes
    the mathematics, from what the workload declares (``batchnorm``,
    ``loss_mean_over_tokens``); None when it does not. The methods that split the batch
    return it from ``Method.grading``; their rank programs check the declaration against the
    model (:func:`check_split_batch_grading`). Why a split changes the mathematics: see
    :func:`split_batch_note`."""
    if parts <= 1:
        return None
    reason = _split_reason(getattr(workload, "batchnorm", False),
                           getattr(workload, "loss_mean_over_tokens", False), parts, where,
                           batchnorm_synced)
    return None if reason is None else Grading(kind="statistical", reason=reason)


def check_split_batch_grading(workload: Workload, model: torch.nn.Module, parts: int,
                              where: str, *, batchnorm_synced: bool = False) -> None:
    """Raise when the workload's declared grading (:func:`split_batch_grading`) is not what
    its model says (:func:`split_batch_note`): a BatchNorm model declared without
    ``batchnorm = True`` would be graded exact and fail for the wrong reason."""
    note = split_batch_note(workload, model, parts, where, batchnorm_synced=batchnorm_synced)
    declared = split_batch_grading(workload, parts, where, batchnorm_synced=batchnorm_synced)
    if note.get("parity_kind") != (declared.kind if declared else None):
        raise RuntimeError(f"workload {workload.name!r} declares batchnorm="
                           f"{getattr(workload, 'batchnorm', False)}, but its model "
                           f"{'has' if note else 'has no'} BatchNorm layers: fix the declaration")


def _split_reason(batchnorm: bool, token_mean: bool, parts: int, where: str,
                  batchnorm_synced: bool) -> str | None:
    if batchnorm:
        if batchnorm_synced:
            return ("BatchNorm statistics are all-reduced (the global batch's), but a "
                    "BatchNorm model's trajectory drifts chaotically even between serial "
                    "runs at 1 and 2 threads (vgg11: loss 2.3e-2), so it cannot prove "
                    "exactness")
        return (f"BatchNorm normalises {where} ({parts} parts of each global batch) with "
                f"its own statistics, not the global batch's")
    if token_mean:
        return (f"the loss is a mean over tokens: {where} ({parts} parts of each global "
                f"batch) is averaged over its own token count, not the global batch's")
    return None


def split_batch_note(workload: Workload, model: torch.nn.Module, parts: int, where: str,
                     *, batchnorm_synced: bool = False) -> dict[str, Any]:
    """``parity_kind`` "statistical" (and why) when splitting the batch changes the mathematics,
    from the model itself (what :func:`split_batch_grading` must agree with).

    * BatchNorm normalises with the statistics of the batch it is given: split the global
      batch (ranks, micro-batches) and each part uses its own mean and variance. Data
      parallelism all-reduces them (``batchnorm_synced``:
      :func:`parabench.torch.parallelize.global_batchnorm`, since torch's SyncBatchNorm
      refuses CPU tensors); a pipeline's micro-batches within one stage cannot. Even synced,
      a BatchNorm model stays statistical: its trajectory cannot prove exactness, because
      serial itself at 1 vs 2 threads differs by 2.3e-2 in the loss and 1.7 in the weights
      after 20 steps of vgg11 tiny (conv biases before BatchNorm get rounding noise as their
      gradient; 2026-11-23); ddp x2 with synced statistics: 5.4e-3 in the loss.
    * A loss averaged over tokens (``loss_mean_over_tokens``: seq2seq ignores padding) gives
      each part's tokens the weight 1 / that part's token count, so the average over parts is
      not serial's mean over the batch's tokens (measured: seq2seq ddp x2 moves the weights by
      1.3e-2 relative in 20 steps, where reduction order alone moves them by 1e-15 to 2e-4).
    """
    from torch.nn.modules.batchnorm import _BatchNorm

    if parts <= 1:
        return {}
    reason = _split_reason(any(isinstance(m, _BatchNorm) for m in model.modules()),
                           getattr(workload, "loss_mean_over_tokens", False), parts, where,
                           batchnorm_synced)
    return {} if reason is None else {"parity_kind": "statistical", "parity_reason": reason}
