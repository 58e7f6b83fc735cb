"""How far float32 reduction order moves serial's weights: the yardstick for "exact" parity.

Usage::

    python scripts/weight_drift.py                 # mlp and cnn, the parity tests' set-ups
    python scripts/weight_drift.py cnn --ranks     # also the real pipeline / hybrid / ddp ranks
    python scripts/weight_drift.py --trace mlp cnn  # the trace figures of the real cases
    python scripts/weight_drift.py --trace gpt      # also tp / fsdp_tp (workloads with a plan)

Trains ``serial`` at the set-ups of ``tests/methods/test_pipeline_mp.py`` (tiny profile, 1 thread)
and prints, per variant, the worst per-tensor relative L2 difference ``|w - w_serial| /
|w_serial|`` and the worst ``max|w - w_serial| / max|w_serial|``. Variants: serial at 2
threads; serial with each batch's gradient accumulated over 2, 4 or 8 chunks (the same
mathematics, another summation order: what micro-batches and shards do); and with
``--ranks``, the real rank pools. ``tests/weight_parity.py`` states the figures and the
tolerance derived from them.

``--trace`` runs whole cases instead (:func:`parabench.case.execute.execute`, tiny profile,
one epoch, the workload's default batch, 1 thread per worker) and prints what exact parity
reads (:func:`parabench.analysis.trajectory.compare_traces`): the largest relative step-loss
difference and the estimated relative L2 weight difference after the traced steps, for
serial at 2 threads, every exact method, and serial with its gradient x (1 + 1e-3) (a bug's
size); ``analysis/trajectory.py`` states the figures next to its tolerances.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from typing import Any

import torch

from parabench.config import RunConfig
from parabench.core.pool import WorkerPool
from parabench.registry import methods, workloads
from parabench.torch.loop import TorchLoop

#: workload -> (epochs, global batch, micro-batches): tests/methods/test_pipeline_mp.py's SETUP
SETUP = {"mlp": (2, 48, 3), "cnn": (1, 64, 4)}
PIPELINE = "parabench.torch.pipeline:PipelineProgram"
RANKS = {  # name -> (program, workers, args, options)
    "pipeline 2 stages": (PIPELINE, 2, {"stages": 2}, {"schedule": "1f1b"}),
    "hybrid 2x2": (PIPELINE, 4, {"stages": 2}, {"schedule": "1f1b", "stages": 2}),
    "ddp x2": ("parabench.methods.ddp:DDPProgram", 2, {}, {}),
}
Weights = dict[str, torch.Tensor]


def _config(workload: str, method: str = "serial", workers: int = 1, threads: int = 1,
            **options: Any) -> RunConfig:
    epochs, batch, _micro = SETUP[workload]
    return RunConfig(workload=workload, method=method, workers=workers,
                     threads_per_worker=threads, profile="tiny", epochs=epochs,
                     batch_size=batch, options=options)


def _chunked_forward(chunks: int) -> Callable[..., torch.Tensor]:
    """A TorchLoop._forward that back-propagates each batch in ``chunks`` weighted parts."""

    def forward(loop: TorchLoop, xb: torch.Tensor, yb: torch.Tensor) -> torch.Tensor:
        total = torch.zeros(())
        for xc, yc in zip(xb.chunk(chunks), yb.chunk(chunks), strict=True):
            part = loop.loss_fn(loop.model(xc), yc) * (len(xc) / len(xb))
            part.backward()
            total = total + part.detach()
        # the loop calls backward() on what we return: add exact zeros to every gradient
        return total + sum(p.sum() for p in loop.model.parameters()) * 0.0

    return forward


def serial_weights(workload: str, threads: int = 1, chunks: int = 1) -> tuple[Weights, int]:
    original = TorchLoop._forward
    if chunks > 1:
        TorchLoop._forward = _chunked_forward(chunks)  # type: ignore[method-assign]
    try:
        config = _config(workload, threads=threads)
        with methods.get("serial").session(workloads.get(workload), config) as session:
            session.start()
            torch.set_num_threads(threads)
            for epoch in range(config.epochs):
                session.train_epoch(epoch)
            steps = config.epochs * math.ceil(session.samples_per_epoch / config.batch_size)
            return {k: v.detach().double().clone()
                    for k, v in session.loop.model.state_dict().items()}, steps
    finally:
        TorchLoop._forward = original  # type: ignore[method-assign]


def rank_weights(workload: str, name: str) -> list[Weights]:
    program, workers, args, options = RANKS[name]
    if program == PIPELINE:
        options = {"microbatches": SETUP[workload][2], **options}
    config = _config(workload, name.split()[0], workers, **options)
    args = {"workload": workload, "config": config.to_dict(), **args}
    with WorkerPool(workers, program, args, threads=1, timeout_s=900) as pool:
        for epoch in range(config.epochs):
            pool.call("train_epoch", epoch=epoch)
        return [{k: v.double() for k, v in w.items()} for w in pool.call("state_dict")]


def drift(reference: Weights, other: Weights) -> tuple[float, float]:
    """(worst relative L2, worst max-abs relative to the tensor's max) over float tensors."""
    rel_l2 = rel_max = 0.0
    for name, ref in reference.items():
        if not ref.is_floating_point() or not ref.norm() > 0:
            continue
        diff = other[name] - ref
        rel_l2 = max(rel_l2, float(diff.norm() / ref.norm()))
        rel_max = max(rel_max, float(diff.abs().max() / ref.abs().max()))
    return rel_l2, rel_max


#: --trace: label -> (method, workers, threads, options)
TRACE_CASES = {
    "serial, 2 threads": ("serial", 1, 2, {}),
    "model_parallel 2 stages": ("model_parallel", 1, 1, {}),
    "ddp x2": ("ddp", 2, 1, {}),
    "fsdp x2": ("fsdp", 2, 1, {}),
    "pipeline 2 stages": ("pipeline", 2, 1, {}),
    "hybrid 2x2": ("hybrid", 4, 1, {}),
    # tensor parallelism: only workloads with a plan (gpt); the others are skipped
    "tp x2": ("tp", 2, 1, {}),
    "tp x2, sequence parallel": ("tp", 2, 1, {"sequence_parallel": True}),
    "tp x4": ("tp", 4, 1, {}),
    "fsdp_tp 2x2": ("fsdp_tp", 4, 1, {"tp": 2}),
    "pipeline_tp 2x2": ("pipeline_tp", 4, 1, {"tp": 2, "stages": 2}),
}


def _trace(workload: str, method: str = "serial", workers: int = 1, threads: int = 1,
           **options: Any) -> dict[str, Any] | None:
    from parabench.case.execute import execute

    config = RunConfig(workload=workload, method=method, workers=workers,
                       threads_per_worker=threads, profile="tiny", epochs=1, options=options)
    result = execute(config)
    if result.status != "ok":
        print(f"  {method}: {result.status} {result.reason[:200]}")
    return None if result.trace is None else result.trace.to_dict()  # a Trace record now


def _grad_scaled(scale: float) -> Callable[..., torch.Tensor]:
    """A TorchLoop._forward whose loss value is serial's but whose gradient is x ``scale``."""
    original = TorchLoop._forward

    def forward(loop: TorchLoop, xb: torch.Tensor, yb: torch.Tensor) -> torch.Tensor:
        loss = original(loop, xb, yb)
        return loss * scale - (loss * (scale - 1.0)).detach()

    return forward


def trace_drift(workloads_: list[str]) -> None:
    from parabench.analysis.trajectory import compare_traces

    for workload in workloads_:
        reference = _trace(workload)
        assert reference is not None, "serial recorded no trace"
        print(f"{workload}: {reference['steps']} traced steps")
        traces = {label: (lambda m=m, w=w, t=t, o=o, wl=workload: _trace(wl, m, w, t, **o))
                  for label, (m, w, t, o) in TRACE_CASES.items()}
        original = TorchLoop._forward
        TorchLoop._forward = _grad_scaled(1 + 1e-3)  # type: ignore[method-assign]
        try:
            bug = _trace(workload)
        finally:
            TorchLoop._forward = original  # type: ignore[method-assign]
        traces["serial, gradient x (1 + 1e-3)"] = lambda b=bug: b
        for label, run in traces.items():
            if (trace := run()) is None:
                continue
            v = compare_traces(trace, reference)
            print(f"  {label:32s} loss rel max {v['loss_rel_max']:.2e}  "
                  f"weight rel L2 {v['weight_rel_l2']:.2e} ({v['worst_parameter']})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("workloads", nargs="*", help=f"default and --ranks: {', '.join(SETUP)}")
    parser.add_argument("--ranks", action="store_true", help="also run the real rank pools")
    parser.add_argument("--trace", action="store_true",
                        help="the trace figures of whole cases (any torch workload)")
    args = parser.parse_args()
    if args.trace:
        trace_drift(args.workloads or list(SETUP))
        return
    if unknown := set(args.workloads) - set(SETUP):
        parser.error(f"set-ups exist for {', '.join(SETUP)}, not {', '.join(sorted(unknown))}")
    for workload in args.workloads or list(SETUP):
        reference, steps = serial_weights(workload)
        print(f"{workload}: {steps} steps of batch {SETUP[workload][1]}")
        variants = {"serial, 2 threads": lambda w=workload: serial_weights(w, threads=2)[0]}
        for chunks in (2, 4, 8):
            variants[f"serial, batch in {chunks} chunks"] = (
                lambda w=workload, c=chunks: serial_weights(w, chunks=c)[0])
        for label, weights in variants.items():
            print("  {:32s} rel L2 {:.2e}  max|d|/max|w| {:.2e}".format(
                label, *drift(reference, weights())))
        for name in RANKS if args.ranks else ():
            worst = max(drift(reference, w) for w in rank_weights(workload, name))
            print("  {:32s} rel L2 {:.2e}  max|d|/max|w| {:.2e}".format(name, *worst))


if __name__ == "__main__":
    main()
