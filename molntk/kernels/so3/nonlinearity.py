"""Pointwise nonlinearity on SO(3) signals or pooled features: kernel rule and finite twin.

With the dual activation (F, Ḟ) of σ (:mod:`molntk.kernels.activations`) and the
variances of the two inputs at one point, K^{ff}(g, g) = ψ^{ff}(e):

    K'(u) = F(K(u); ψ^{ff}(e), ψ^{f'f'}(e)),   Θ'(u) = Θ(u) · Ḟ(K(u); ψ^{ff}(e), ψ^{f'f'}(e)),

and each self-kernel function is mapped the same way with its own variance.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor, nn

from molntk.kernels.activations import get_activation
from molntk.kernels.so3.context import Discretisation
from molntk.kernels.so3.state import GroupKernel, PooledKernel


@dataclass(frozen=True)
class Nonlinearity:
    """Pointwise σ (``relu``, ``erf``, ``quadratic``, ``identity``)."""

    name: str

    def __post_init__(self) -> None:
        get_activation(self.name)

    def kernel(self, state, ctx: Discretisation, *, ntk: bool):
        if not isinstance(state, (GroupKernel, PooledKernel)):
            raise TypeError("a nonlinearity needs a lifted or pooled signal: put it after Lift")
        dual = get_activation(self.name).dual
        on_group = isinstance(state, GroupKernel)
        var1 = state.self1[:, -1] if on_group else state.self1
        var2 = state.self2[:, -1] if on_group else state.self2
        extra = (None,) if on_group else ()
        k11 = var1[(slice(None), None) + extra]
        k22 = var2[(None, slice(None)) + extra]
        nngp, fdot = dual(state.nngp, k11, k22)
        self1 = dual(state.self1, var1[(slice(None),) + extra], var1[(slice(None),) + extra])[0]
        if state.self2 is state.self1:
            self2 = self1
        else:
            self2 = dual(state.self2, var2[(slice(None),) + extra], var2[(slice(None),) + extra])[0]
        theta = state.ntk * fdot if ntk and state.ntk is not None else None
        return state.with_(nngp=nngp, ntk=theta, self1=self1, self2=self2)

    def finite(self, in_width: int, width: int, ctx: Discretisation) -> nn.Module:
        return NonlinearityModule(self.name)


class NonlinearityModule(nn.Module):
    def __init__(self, name: str) -> None:
        super().__init__()
        self.fn = get_activation(name).apply

    def forward(self, y: Tensor) -> Tensor:
        return self.fn(y)
