"""Dense layer: a pointwise (1×1) layer on SO(3) signals, or a dense layer after pooling.

Finite layer (NTK parametrisation): z_j = σ_w/√n_in · Σ_i W_ji y_i + σ_b b_j, applied
at every group element for signals on SO(3). Kernel rule (the same on ψ(u) pointwise
and on pooled kernels):

    K' = σ_w² K + σ_b²,    Θ' = K' + σ_w² Θ.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from molntk.kernels.result import PooledKernel
from molntk.kernels.so3.context import Discretisation
from molntk.kernels.so3.state import GroupKernel, apply_rule


@dataclass(frozen=True)
class Dense:
    """Pointwise layer on the group (before Pool) or dense layer (after Pool)."""

    sigma_w: float = 1.0
    sigma_b: float = 0.0

    def rule(
        self, nngp: Tensor, ntk: Tensor | None, var1: Tensor, var2: Tensor, ctx: Discretisation
    ) -> tuple[Tensor, Tensor | None]:
        """K' = σ_w² K + σ_b², Θ' = K' + σ_w² Θ (elementwise, any shape)."""
        out = (nngp * self.sigma_w**2).add_(self.sigma_b**2)
        return out, None if ntk is None else torch.add(out, ntk, alpha=self.sigma_w**2)

    def kernel(self, state: GroupKernel | PooledKernel, ctx: Discretisation, *, ntk: bool) -> GroupKernel | PooledKernel:
        if not isinstance(state, (GroupKernel, PooledKernel)):
            raise TypeError("Dense needs a lifted or pooled signal: put it after Lift")
        return apply_rule(self.rule, state, ctx, ntk=ntk, pools=False)

    def finite(self, in_width: int, width: int, ctx: Discretisation) -> nn.Module:
        return DenseModule(self, in_width, width, ctx)


class DenseModule(nn.Module):
    """Finite dense layer over the channel axis (axis 1): (B, n_in, ...) → (B, n, ...)."""

    def __init__(self, layer: Dense, in_width: int, width: int, ctx: Discretisation) -> None:
        super().__init__()
        self.layer, self.in_width = layer, in_width
        opts = dict(dtype=ctx.dtype, device=ctx.device)
        self.weight = nn.Parameter(torch.randn(width, in_width, **opts))
        self.bias = nn.Parameter(torch.randn(width, **opts))

    def forward(self, y: Tensor) -> Tensor:
        out = torch.einsum("ji,bi...->bj...", self.weight, y)
        bias = self.bias.reshape((1, -1) + (1,) * (y.ndim - 2))
        return self.layer.sigma_w / math.sqrt(self.in_width) * out + self.layer.sigma_b * bias
