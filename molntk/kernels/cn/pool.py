"""Pooling and flattening: from feature maps on C_n ⋉ R² to vectors.

Rules (the NTK rule is the same linear map applied to Θ):
  Pool          the invariant pool, mean over positions and rotations:
                K' = mean_{a, a'} K(a, a');
  SpatialPool   mean over positions, rotations kept: K'(r, r') = mean_{x,x'} K((x,r),(x',r'));
  RotationPool  mean over rotations of per-rotation vectors (after SpatialPool and
                per-rotation Dense layers): K' = mean_{r,r'} K(r, r');
  Flatten       concatenate all sites (the next Dense has fan-in C·|sites|):
                K' = mean_a K(a, a) — as a first layer, K' = ⟨f, f'⟩ / (C H W).
On orbit blocks every mean over all rotation pairs is the plain mean over the blocks
(each block stands for the same number of pairs); the site diagonal a = a' lies in
block q = 0 with s = s'.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from molntk.kernels.cn.state import InputPair, KernelState


def _vector_state(nngp: Tensor, ntk: Tensor | None, orbit: int) -> KernelState:
    return KernelState(nngp=nngp, ntk=ntk, orbit=orbit, spatial=())


def _scalar(c: Tensor) -> Tensor:
    """Mean over all block entries, as (b1, b2, 1, 1, 1)."""
    return c.mean(dim=tuple(range(2, c.ndim))).reshape(*c.shape[:2], 1, 1, 1)


@dataclass(frozen=True)
class Pool:
    """Average over space and rotations (invariant features; SO(3): :class:`~molntk.kernels.so3.pool.Pool`)."""

    def kernel(self, state: KernelState) -> KernelState:
        ntk = None if state.ntk is None else _scalar(state.ntk)
        return _vector_state(_scalar(state.nngp), ntk, orbit=1)

    def finite(
        self, in_shape: tuple[int, ...], width: int, generator: torch.Generator, dtype: torch.dtype
    ) -> tuple[nn.Module, tuple[int, ...]]:
        if len(in_shape) != 4:
            raise ValueError("Pool needs feature maps (C, n, H, W)")
        return _Mean((2, 3, 4)), in_shape[:1]


@dataclass(frozen=True)
class SpatialPool:
    """Average over space; keeps one vector per rotation."""

    def kernel(self, state: KernelState) -> KernelState:
        dims = state.grid_dims

        def pool(c: Tensor | None) -> Tensor | None:
            return None if c is None else c.mean(dim=dims)

        return _vector_state(pool(state.nngp), pool(state.ntk), orbit=state.orbit)

    def finite(
        self, in_shape: tuple[int, ...], width: int, generator: torch.Generator, dtype: torch.dtype
    ) -> tuple[nn.Module, tuple[int, ...]]:
        if len(in_shape) != 4:
            raise ValueError("SpatialPool needs feature maps (C, n, H, W)")
        return _Mean((3, 4)), in_shape[:2]


@dataclass(frozen=True)
class RotationPool:
    """Average per-rotation vectors over the rotations (after SpatialPool)."""

    def kernel(self, state: KernelState) -> KernelState:
        if state.spatial:
            raise ValueError("RotationPool acts on per-rotation vectors: put SpatialPool first")
        ntk = None if state.ntk is None else _scalar(state.ntk)
        return _vector_state(_scalar(state.nngp), ntk, orbit=1)

    def finite(
        self, in_shape: tuple[int, ...], width: int, generator: torch.Generator, dtype: torch.dtype
    ) -> tuple[nn.Module, tuple[int, ...]]:
        if len(in_shape) != 2:
            raise ValueError("RotationPool needs per-rotation vectors (C, n): put SpatialPool first")
        return _Mean((2,)), in_shape[:1]


@dataclass(frozen=True)
class Flatten:
    """Concatenate all sites and channels into one vector."""

    def kernel(self, state: KernelState) -> KernelState:
        def diagonal_mean(c: Tensor | None) -> Tensor | None:
            if c is None:
                return None
            c = c[:, :, 0].diagonal(dim1=2, dim2=3)  # s = s'
            for _ in state.spatial:
                c = c.diagonal(dim1=2, dim2=3)  # x_i = x'_i, then x_j = x'_j
            return c.mean(dim=tuple(range(2, c.ndim))).reshape(*c.shape[:2], 1, 1, 1)

        return _vector_state(diagonal_mean(state.nngp), diagonal_mean(state.ntk), orbit=1)

    def kernel_inputs(self, inputs: InputPair, ntk: bool) -> KernelState:
        """Input kernel ⟨f, f'⟩ / (C H W) of flattened images (no parameters: Θ = 0)."""
        f1 = inputs.x1.flatten(2).unsqueeze(-2)
        f2 = inputs.x2.flatten(2).unsqueeze(-1)
        nngp = torch.matmul(f1, f2).reshape(*torch.broadcast_shapes(f1.shape[:2], f2.shape[:2]), 1, 1, 1)
        nngp = nngp / f1.shape[-1]
        return KernelState(nngp=nngp, ntk=torch.zeros_like(nngp) if ntk else None, orbit=1, spatial=())

    def finite(
        self, in_shape: tuple[int, ...], width: int, generator: torch.Generator, dtype: torch.dtype
    ) -> tuple[nn.Module, tuple[int, ...]]:
        return nn.Flatten(), (int(torch.Size(in_shape).numel()),)


class _Mean(nn.Module):
    def __init__(self, dims: tuple[int, ...]):
        super().__init__()
        self.dims = dims

    def forward(self, x: Tensor) -> Tensor:
        return x.mean(dim=self.dims)
