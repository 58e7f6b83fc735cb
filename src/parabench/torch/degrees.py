"""The parallel degrees of one case (data x tensor x pipeline), validated once.

Usage::

    from parabench.torch.degrees import ParallelDegrees

    degrees = ParallelDegrees.of(world=4, tp=2)        # dp inferred: dp=2, tp=2, pp=1
    degrees.check_sizes({"heads": 4, "width": 64})      # tp divides each, else ConfigError
    degrees.position(3)                                  # (pp, dp, tp) coordinates: (0, 1, 1)
    degrees.shape, degrees.names                         # (2, 2), ("dp", "tp"): the DeviceMesh
    # ParallelDegrees.of(world=3, tp=2) raises ConfigError: the workers must be a multiple of 2

As torchtitan's ``ParallelDims``: one object checks ``dp x tp x pp == world`` and that the
tensor-parallel degree divides what it splits, and says what is wrong in a
:class:`~parabench.config.ConfigError`; methods ask it for the case's coordinates and never
re-check. Rank order is the mesh's row-major order, tensor-parallel innermost: rank ``r`` is
tensor rank ``r % tp`` of data replica ``(r // tp) % dp`` of pipeline stage ``r // (tp x dp)``,
so a tensor-parallel group is ``tp`` consecutive ranks. Kept free of torch so a method's
``check`` can use it in the CLI process.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass

from parabench.config import ConfigError


@dataclass(frozen=True, kw_only=True)
class ParallelDegrees:
    dp: int
    tp: int
    pp: int = 1

    @classmethod
    def of(cls, world: int, *, tp: int, pp: int = 1, dp: int | None = None) -> ParallelDegrees:
        """The degrees of ``world`` ranks; ``dp`` (None) is what ``tp x pp`` leaves."""
        for name, value in (("tp", tp), ("pp", pp), ("dp", dp)):
            if value is not None and (not isinstance(value, int) or value < 1):
                raise ConfigError(f"parallel degree {name} must be an integer >= 1, got {value!r}")
        inner = tp * pp
        if dp is None:
            if world % inner:
                raise ConfigError(
                    f"{world} worker(s) do not split into tensor-parallel degree {tp}"
                    + (f" x pipeline degree {pp}" if pp > 1 else "")
                    + f": the workers must be a multiple of {inner}")
            dp = world // inner
        if dp * inner != world:
            raise ConfigError(f"dp {dp} x tp {tp} x pp {pp} = {dp * inner} ranks, but "
                              f"{world} worker(s)")
        return cls(dp=dp, tp=tp, pp=pp)

    def check_sizes(self, sizes: Mapping[str, int]) -> None:
        """Raise ConfigError unless ``tp`` divides every size (name -> size) it splits."""
        bad = [f"{name} {size}" for name, size in sizes.items() if size % self.tp]
        if bad:
            raise ConfigError(f"tensor-parallel degree {self.tp} must divide "
                              f"{', '.join(f'{n} ({s})' for n, s in sizes.items())}; "
                              f"it does not divide {', '.join(bad)}")

    @property
    def world(self) -> int:
        return self.dp * self.tp * self.pp

    @property
    def names(self) -> tuple[str, ...]:
        """The DeviceMesh's dimension names (``pp`` only when there is a pipeline)."""
        return ("pp", "dp", "tp") if self.pp > 1 else ("dp", "tp")

    @property
    def shape(self) -> tuple[int, ...]:
        return (self.pp, self.dp, self.tp) if self.pp > 1 else (self.dp, self.tp)

    def position(self, rank: int) -> tuple[int, int, int]:
        """(pipeline stage, data replica, tensor rank) of ``rank``."""
        return rank // (self.tp * self.dp), (rank // self.tp) % self.dp, rank % self.tp

    def to_dict(self) -> dict[str, int]:
        return dataclasses.asdict(self)

    def label(self) -> str:
        parts = [f"pp{self.pp}"] if self.pp > 1 else []
        return " x ".join([*parts, f"dp{self.dp}", f"tp{self.tp}"])
