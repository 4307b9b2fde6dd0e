"""What the layers share when evaluated: the grid, the measure, dtype and device.

``mode="exact"``: the kernel of the finite network sampled on ``grid`` (pair measure);
``mode="fast"``: the invariant recursion on ``grid`` as quadrature for u (grid measure).
The finite-width twins always run on the nodes of ``grid``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import torch
from torch import Tensor

from molntk.kernels.so3.grids import SO3Grid
from molntk.kernels.so3.measures import SO3Measure, grid_measure, pair_measure
from molntk.kernels.so3.wigner import wigner_blocks

MODES = ("exact", "fast")


@dataclass
class Discretisation:
    grid: SO3Grid
    band_limit: int
    mode: str = "fast"
    dtype: torch.dtype = torch.float64
    device: torch.device | str = "cpu"
    _measure: SO3Measure | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"unknown kernel mode {self.mode!r}; choose one of {MODES}")

    @property
    def measure(self) -> SO3Measure:
        if self._measure is None:
            build = pair_measure if self.mode == "exact" else grid_measure
            self._measure = build(self.grid, self.band_limit)
        return self._measure

    @property
    def symmetric(self) -> bool:
        """Whether the kernel of a set with itself is computed on and above the diagonal and
        mirrored: exact mode and fast-mode grids closed under inversion (Gauss–Legendre),
        where ψ_{ff'}(u_k) = ψ_{f'f}(u_k⁻¹) permutes the support and the matrices are exactly
        symmetric; and Lebedev grids, symmetric to their quadrature accuracy, where the mirror
        halves the work and makes them exactly symmetric (entry i < j is the quadrature of
        the pair in the order (f_i, f_j)). Driscoll–Healy grids are computed in full."""
        return self.mode == "exact" or self.grid.sampling in ("gauss-legendre", "lebedev")

    @property
    def support_size(self) -> int:
        """Entries of a kernel function on the group: the measure's K points + the identity."""
        return self.measure.size + 1

    @cached_property
    def node_blocks(self) -> list[Tensor]:
        """D^l(g_a) at the grid nodes, l < band_limit, in the working dtype/device (finite twins)."""
        return [b.to(self.dtype).to(self.device) for b in wigner_blocks(self.band_limit, *self.grid.angles)]

    @cached_property
    def node_weights(self) -> Tensor:
        """Quadrature weights q_a of the grid nodes (finite twins)."""
        return self.grid.weights.to(self.dtype).to(self.device)
