"""Invariant pooling over SO(3): kernel rule and finite twin.

Finite layer: y_j ↦ Σ_a q_a y_j(g_a) (the grid's Haar quadrature). Kernel rule: the mean
of ψ over the engine's measure, K = Σ_k w_k ψ(u_k) (the same for Θ and self-kernels);
with the pair measure this is exactly Σ_{a,b} q_a q_b K(g_a, g_b).
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor, nn

from molntk.kernels.result import PooledKernel
from molntk.kernels.so3.context import Discretisation
from molntk.kernels.so3.state import GroupKernel, apply_rule


@dataclass(frozen=True)
class Pool:
    """Mean over SO(3)."""

    def rule(
        self, nngp: Tensor, ntk: Tensor | None, var1: Tensor, var2: Tensor, ctx: Discretisation
    ) -> tuple[Tensor, Tensor | None]:
        """Σ_k w_k ψ(u_k) over the last axis (the identity entry has weight 0)."""
        w = ctx.measure.mean_weights(ctx.dtype, ctx.device)
        return nngp @ w, None if ntk is None else ntk @ w

    def kernel(self, state: GroupKernel, ctx: Discretisation, *, ntk: bool) -> PooledKernel:
        if not isinstance(state, GroupKernel):
            raise TypeError("Pool needs a signal on SO(3) and can appear only once")
        return apply_rule(self.rule, state, ctx, ntk=ntk, pools=True)

    def finite(self, in_width: int, width: int, ctx: Discretisation) -> nn.Module:
        return PoolModule(ctx)


class PoolModule(nn.Module):
    def __init__(self, ctx: Discretisation) -> None:
        super().__init__()
        self.q = ctx.node_weights

    def forward(self, y: Tensor) -> Tensor:
        return y @ self.q
