"""Pointwise nonlinearity on SO(3) signals or pooled features: kernel rule and finite twin.

With the dual activation (F, Ḟ) of σ (:mod:`molntk.kernels.activations`) and the
variances of the two inputs at one point, K^{ff}(g, g) = ψ^{ff}(e):

    K'(u) = F(K(u); ψ^{ff}(e), ψ^{f'f'}(e)),   Θ'(u) = Θ(u) · Ḟ(K(u); ψ^{ff}(e), ψ^{f'f'}(e)),

and each self-kernel function is mapped the same way with its own variance. Followed
directly by Pool, the two steps are one (:meth:`Nonlinearity.pool_rule`): the means
Σ_k w_k F(K(u_k)) and Σ_k w_k Θ(u_k) Ḟ(K(u_k)) in one pass
(:func:`molntk.kernels.pooled_activations.pooled_dual`).
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor, nn

from molntk.kernels.activations import get_activation, recording
from molntk.kernels.pooled_activations import pooled_dual
from molntk.kernels.result import PooledKernel
from molntk.kernels.so3.context import Discretisation
from molntk.kernels.so3.state import GroupKernel, apply_rule


@dataclass(frozen=True)
class Nonlinearity:
    """Pointwise σ (``relu``, ``erf``, ``quadratic``, ``hermite2``, ``exp``, ``identity``)."""

    name: str

    def __post_init__(self) -> None:
        get_activation(self.name)

    def rule(
        self, nngp: Tensor, ntk: Tensor | None, var1: Tensor, var2: Tensor, ctx: Discretisation
    ) -> tuple[Tensor, Tensor | None]:
        """K' = F(K; var1, var2), Θ' = Θ · Ḟ(K; var1, var2) (Ḟ updated in place unless autograd records)."""
        new_nngp, fdot = get_activation(self.name).dual(nngp, var1, var2)
        if ntk is None:
            return new_nngp, None
        return new_nngp, fdot * ntk if recording(nngp, ntk, var1, var2) else fdot.mul_(ntk)

    def pool_rule(
        self, nngp: Tensor, ntk: Tensor | None, var1: Tensor, var2: Tensor, ctx: Discretisation
    ) -> tuple[Tensor, Tensor | None]:
        """This layer followed by Pool: mean F(K; var1, var2), mean Θ · Ḟ(K; var1, var2)."""
        return pooled_dual(self.name, nngp, ntk, var1, var2, ctx.measure.mean_weights(ctx.dtype, ctx.device))

    def kernel(self, state: GroupKernel | PooledKernel, ctx: Discretisation, *, ntk: bool) -> GroupKernel | PooledKernel:
        if not isinstance(state, (GroupKernel, PooledKernel)):
            raise TypeError("a nonlinearity needs a lifted or pooled signal: put it after Lift")
        return apply_rule(self.rule, state, ctx, ntk=ntk, pools=False)

    def finite(self, in_width: int, width: int, ctx: Discretisation) -> nn.Module:
        return NonlinearityModule(self.name)


class NonlinearityModule(nn.Module):
    def __init__(self, name: str) -> None:
        super().__init__()
        self.fn = get_activation(name).apply

    def forward(self, y: Tensor) -> Tensor:
        return self.fn(y)
