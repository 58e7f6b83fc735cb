"""global_batchnorm: two gloo ranks holding uneven shards of a batch normalise, backpropagate
and update running statistics exactly as torch's own BatchNorm does on the whole batch."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.cpu

SHARDS = (slice(0, 5), slice(5, 8))  # uneven on purpose: the count must be all-reduced too


def _batch() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(3)
    x = torch.randn(8, 3, 4, 4, generator=g) * 2.0 + 0.5
    w = torch.randn(8, 3, 4, 4, generator=g)  # a loss that weights every output differently
    return x, w


def _model() -> torch.nn.BatchNorm2d:
    torch.manual_seed(0)
    bn = torch.nn.BatchNorm2d(3, momentum=0.3)
    with torch.no_grad():
        bn.weight.uniform_(0.5, 1.5)
        bn.bias.uniform_(-0.5, 0.5)
    return bn


def _step(bn: torch.nn.Module, x: torch.Tensor, w: torch.Tensor) -> dict[str, torch.Tensor]:
    x = x.clone().requires_grad_(True)
    y = bn(x)
    (y * w).sum().backward()  # a sum over samples: the ranks' losses add up to serial's
    return {"y": y.detach(), "x_grad": x.grad, "w_grad": bn.weight.grad, "b_grad": bn.bias.grad,
            "running_mean": bn.running_mean.clone(), "running_var": bn.running_var.clone()}


def _rank(rank: int, port: int, out: str) -> None:
    import torch.distributed as dist

    from parabench.torch.parallelize import global_batchnorm

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    try:
        bn = _model()
        assert global_batchnorm(bn) == 1
        x, w = _batch()
        got = _step(bn, x[SHARDS[rank]], w[SHARDS[rank]])
        for name in ("w_grad", "b_grad"):  # what DDP's gradient all-reduce (a sum) would give
            dist.all_reduce(got[name])
        torch.save(got, Path(out) / f"rank{rank}.pt")
    finally:
        dist.destroy_process_group()


def test_two_ranks_match_whole_batch_batchnorm(tmp_path: Path) -> None:
    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(_rank, args=(port, str(tmp_path)), nprocs=2)
    x, w = _batch()
    serial = _step(_model(), x, w)
    ranks = [torch.load(tmp_path / f"rank{r}.pt") for r in range(2)]
    for name in ("y", "x_grad"):
        torch.testing.assert_close(torch.cat([r[name] for r in ranks]), serial[name],
                                   rtol=1e-5, atol=1e-5)
    for rank in ranks:
        for name in ("w_grad", "b_grad", "running_mean", "running_var"):
            torch.testing.assert_close(rank[name], serial[name], rtol=1e-5, atol=1e-5)
