"""The histogram-forest kernels by name: one :class:`~parabench.forest.kernel.Kernel` class each.

Usage::

    from parabench.forest.kernels import KERNELS, make_kernel, register_kernel

    kernel = make_kernel("numba")                     # KERNELS["numba"]("cpu")

    @register_kernel                                  # a new backend: one file (see
    class MyKernel(Kernel):                           # tests/plugins/numpy_rows.py)
        name = "mine"
        ...

Naming a kernel class imports no engine: each class imports torch, TensorFlow or numba
when it is instantiated, so ``parabench list`` stays light.
"""

from __future__ import annotations

from typing import TypeVar

from parabench.forest.kernel import Kernel, NumpyKernel
from parabench.forest.numba_cuda_kernel import NumbaCudaKernel
from parabench.forest.numba_kernel import NumbaKernel
from parabench.forest.tf_kernel import TfKernel
from parabench.forest.torch_kernel import TorchKernel

K = TypeVar("K", bound=type[Kernel])

#: kernel name -> class
KERNELS: dict[str, type[Kernel]] = {
    k.name: k for k in (NumpyKernel, TorchKernel, TfKernel, NumbaKernel, NumbaCudaKernel)
}


def register_kernel(cls: K) -> K:
    """Class decorator: make ``cls`` known to :func:`make_kernel` under ``cls.name``."""
    if KERNELS.get(cls.name, cls) is not cls:
        raise ValueError(f"kernel name {cls.name!r} is taken by {KERNELS[cls.name].__name__}")
    KERNELS[cls.name] = cls
    return cls


def make_kernel(name: str, device: str = "cpu") -> Kernel:
    if name not in KERNELS:
        raise ValueError(f"unknown kernel {name!r}; valid: {', '.join(KERNELS)}")
    return KERNELS[name](device)
