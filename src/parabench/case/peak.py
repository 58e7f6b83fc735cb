"""The machine's measured fp32 matmul peak: the denominator of model FLOPs utilisation (MFU).

Usage::

    peak = matmul_peak_flops("cpu", threads=2)        # FLOP/s, best of a few timed matmuls
    mfu = result.achieved_flops / peak

The peak is *measured*, not read from a datasheet: the best of ``repeats`` timed square
fp32 matmuls (2·n³ FLOPs each) at the thread count the case used, after a warm-up, with a
CUDA synchronise before every clock read on a GPU. A training step can approach it only
where its work is large matmuls or convolutions; small layers, element-wise ops and data
movement keep real MFU well below 1.
"""

from __future__ import annotations

from parabench.case.clock import Clock


def matmul_peak_flops(device: str = "cpu", threads: int | None = None, n: int = 2048,
                      repeats: int = 5) -> float:
    import torch

    previous = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        dev = torch.device("cuda:0" if device == "cuda" else "cpu")
        if dev.type == "cuda":
            n *= 4  # a GPU needs a bigger problem to reach its peak
        gen = torch.Generator(device=dev).manual_seed(0)
        a = torch.randn(n, n, device=dev, generator=gen)
        b = torch.randn(n, n, device=dev, generator=gen)

        def sync() -> None:
            if dev.type == "cuda":
                torch.cuda.synchronize(dev)

        a @ b  # warm-up: thread pool, kernels, caches
        clock = Clock(sync=sync)  # sync; t0; a @ b; sync; t1
        best = min(clock.time(lambda: a @ b)[1] for _ in range(repeats))
        return 2 * n**3 / best
    finally:
        torch.set_num_threads(previous)
