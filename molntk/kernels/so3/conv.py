"""Group convolution SO(3) → SO(3) with global support: kernel rule and finite twin.

Finite layer (n_in → n, band limit L): filters κ_ji(g) = Σ_{l<L} √(2l+1) ⟨W^l_ji, D^l(g)⟩,
W ~ N(0, 1), Haar mean over h (quadrature q_a on the grid nodes):

    z_j(g) = σ_w/√n_in · Σ_i mean_h κ_ji(g⁻¹h) y_i(h) + σ_b b_j
           = σ_w/√n_in · Σ_i Σ_{l<L} √(2l+1) ⟨W^l_ji, D^l(g)ᵀ ŷ^l_i⟩ + σ_b b_j,
    ŷ^l_i = Σ_a q_a D^l(g_a) y_i(g_a).

Kernel rule on ψ(u): with M^l = Σ_k w_k ψ(u_k) D^l(u_k) (the engine's measure),

    K'(u) = σ_w² · P_L[K](u) + σ_b²,       P_L[ψ](u) = Σ_{l<L} (2l+1) ⟨M^l, D^l(u)⟩,
    Θ'(u) = K'(u) + σ_w² · P_L[Θ](u).

Followed directly by Pool, the projection needs no synthesis: the mean of P_L ψ over a
measure that integrates every D^l, l < L, exactly is its l = 0 coefficient, the mean of
ψ itself (for the grid measure and for the pair measure alike):

    mean K' = σ_w² · mean K + σ_b²,    mean Θ' = mean K' + σ_w² · mean Θ.
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
class GroupConv:
    """Global-support SO(3) group convolution with band-limited filters (l < band_limit).

    P_L is linear, so Θ' = σ_w² P_L[K + Θ] + σ_b²: the rule analyses K and Θ (two GEMMs
    onto the Wigner coefficients, summed there) and synthesises K' and Θ' in one GEMM.
    """

    band_limit: int
    sigma_w: float = 1.0
    sigma_b: float = 0.0

    def rule(
        self, nngp: Tensor, ntk: Tensor | None, var1: Tensor, var2: Tensor, ctx: Discretisation
    ) -> tuple[Tensor, Tensor | None]:
        """K' = σ_w² P_L[K] + σ_b², Θ' = σ_w² P_L[K + Θ] + σ_b² on (..., K+1) tensors."""
        analysis, synthesis = ctx.measure.projection_tables(self.band_limit, ctx.dtype, ctx.device)
        shape = nngp.shape
        coeffs = nngp.reshape(-1, shape[-1]) @ analysis
        if ntk is not None:
            coeffs = torch.cat([coeffs, torch.addmm(coeffs, ntk.reshape(-1, shape[-1]), analysis)])
        out = torch.addmm(coeffs.new_full((), self.sigma_b**2), coeffs, synthesis.T, alpha=self.sigma_w**2)
        if ntk is None:
            return out.view(shape), None
        out = out.view((2,) + shape)
        return out[0], out[1]

    def pool_rule(
        self, nngp: Tensor, ntk: Tensor | None, var1: Tensor, var2: Tensor, ctx: Discretisation
    ) -> tuple[Tensor, Tensor | None]:
        """This layer followed by Pool (valid when :meth:`pools_exactly`): mean K' = σ_w² mean K + σ_b²,
        mean Θ' = mean K' + σ_w² mean Θ."""
        w = ctx.measure.mean_weights(ctx.dtype, ctx.device)
        pooled = (nngp @ w).mul_(self.sigma_w**2).add_(self.sigma_b**2)
        return pooled, None if ntk is None else torch.add(pooled, ntk @ w, alpha=self.sigma_w**2)

    def kernel(self, state: GroupKernel, ctx: Discretisation, *, ntk: bool) -> GroupKernel:
        if not isinstance(state, GroupKernel):
            raise TypeError("GroupConv needs a signal on SO(3): put it after Lift and before Pool")
        return apply_rule(self.rule, state, ctx, ntk=ntk, pools=False)

    def pools_exactly(self, ctx: Discretisation) -> bool:
        """Whether ``ctx``'s measure integrates every D^l, l < band_limit, exactly."""
        return self.band_limit - 1 <= ctx.grid.exact_degree

    def kernel_then_pool(self, state: GroupKernel, ctx: Discretisation, *, ntk: bool) -> PooledKernel:
        """This layer followed by Pool, without the synthesis (valid when :meth:`pools_exactly`)."""
        if not self.pools_exactly(ctx):
            raise ValueError(f"{ctx.grid.describe()} does not integrate degree {self.band_limit - 1} exactly")
        return apply_rule(self.pool_rule, state, ctx, ntk=ntk, pools=True)

    def finite(self, in_width: int, width: int, ctx: Discretisation) -> nn.Module:
        return GroupConvModule(self, in_width, width, ctx)


class GroupConvModule(nn.Module):
    """Finite group convolution on the grid nodes: (B, n_in, N) → (B, n, N)."""

    def __init__(self, layer: GroupConv, in_width: int, width: int, ctx: Discretisation) -> None:
        super().__init__()
        self.layer, self.in_width = layer, in_width
        self.blocks = ctx.node_blocks[: layer.band_limit]
        self.weighted = [d * ctx.node_weights[:, None, None] for d in self.blocks]
        opts = dict(dtype=ctx.dtype, device=ctx.device)
        self.weights = nn.ParameterList(
            [nn.Parameter(torch.randn(width, in_width, 2 * l + 1, 2 * l + 1, **opts)) for l in range(layer.band_limit)]
        )
        self.bias = nn.Parameter(torch.randn(width, **opts))

    def forward(self, y: Tensor) -> Tensor:
        out = 0
        for l, (d, dq, w) in enumerate(zip(self.blocks, self.weighted, self.weights)):
            coeffs = torch.einsum("apq,bia->bipq", dq, y)  # ŷ^l_i
            mixed = torch.einsum("bipq,jimq->bjpm", coeffs, w)
            out = out + math.sqrt(2 * l + 1) * torch.einsum("apm,bjpm->bja", d, mixed)
        return self.layer.sigma_w / math.sqrt(self.in_width) * out + self.layer.sigma_b * self.bias[None, :, None]
