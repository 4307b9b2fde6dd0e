"""Layer normalisation over channels, on SO(3) signals or pooled features: kernel rule and finite twin.

Finite layer: each channel vector is divided by its root mean square over the n channels,

    y_j ↦ y_j / √((1/n) Σ_i y_i²)

(at every grid node for signals on SO(3); no centring and no affine parameters: the channel
mean of an infinite-width layer vanishes, so centring changes nothing in the limit). As
n → ∞, (1/n) Σ_i y_i(g)² → ψ^{ff}(g, g) = ψ^{ff}(e), and the kernel rule is the
normalisation by the two inputs' variances:

    K'(u) = K(u) / √(ψ^{ff}(e) ψ^{f'f'}(e)),    Θ'(u) = Θ(u) / √(ψ^{ff}(e) ψ^{f'f'}(e)).

The NTK term from differentiating the norm itself, −y_j/‖y‖² · (1/n) Σ_i y_i ∂y_i, is
O(1/n) per channel pair and drops out (as in neural-tangents' ``LayerNorm``). After the
pool it turns the pooled kernel into the correlation ρ = K / √(K_aa K_bb), the SO(3)
NTK's counterpart of the power spectrum's p̂ = p / ‖p‖ (docs/mathematics.md).
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor, nn

from molntk.kernels.activations import inverse_sqrt
from molntk.kernels.result import PooledKernel
from molntk.kernels.so3.context import Discretisation
from molntk.kernels.so3.state import GroupKernel, apply_rule


@dataclass(frozen=True)
class LayerNorm:
    """Division of every channel vector by its root mean square over channels."""

    def rule(
        self, nngp: Tensor, ntk: Tensor | None, var1: Tensor, var2: Tensor, ctx: Discretisation
    ) -> tuple[Tensor, Tensor | None]:
        """K' = K / √(var1 var2), Θ' = Θ / √(var1 var2) (elementwise, any shape); 0 where a
        variance is 0 (a signal that is 0 everywhere, e.g. an atom without neighbours under
        σ_b = 0, stays 0, as the power spectrum's p̂ does)."""
        scale = inverse_sqrt(var1 * var2)
        return nngp * scale, None if ntk is None else ntk * scale

    def kernel(self, state: GroupKernel | PooledKernel, ctx: Discretisation, *, ntk: bool) -> GroupKernel | PooledKernel:
        if not isinstance(state, (GroupKernel, PooledKernel)):
            raise TypeError("LayerNorm needs a lifted or pooled signal: put it after Lift")
        return apply_rule(self.rule, state, ctx, ntk=ntk, pools=False)

    def finite(self, in_width: int, width: int, ctx: Discretisation) -> nn.Module:
        return LayerNormModule()


class LayerNormModule(nn.Module):
    """(B, n, ...) → the same, each channel vector (axis 1) divided by its root mean square
    (a zero vector stays zero)."""

    def forward(self, y: Tensor) -> Tensor:
        return y * inverse_sqrt(y.square().mean(dim=1, keepdim=True))
