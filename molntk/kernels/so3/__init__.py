"""SO(3) group-convolutional networks: kernel rules (exact and fast modes) and finite twins.

Layers (each a frozen dataclass with its kernel ``rule`` on ψ(u), u = g g'⁻¹, and its
finite torch twin ``finite``), named as in :mod:`molntk.kernels.cn`:

=====================  ================================================================
:class:`Lift`          S² → SO(3): K(u) = σ_w²/C Σ_{l<L} ⟨M^l, D^l(u)⟩ + σ_b²,  Θ = K
:class:`GroupConv`     SO(3) → SO(3): K' = σ_w² P_L[K] + σ_b²,  Θ' = K' + σ_w² P_L[Θ]
:class:`Nonlinearity`  K' = F_σ(K; ψ^{ff}(e), ψ^{f'f'}(e)),  Θ' = Θ · Ḟ_σ(K; …)
:class:`Dense`         K' = σ_w² K + σ_b²,  Θ' = K' + σ_w² Θ (pointwise, or after Pool)
:class:`LayerNorm`     K' = K / √(ψ^{ff}(e) ψ^{f'f'}(e)),  Θ' = Θ / √(…) (over channels)
:class:`Pool`          the invariant pool: Haar mean over SO(3), K = Σ_k w_k ψ(u_k)
=====================  ================================================================

(M^l = Σ_c f̂^l_c f̂'^{lT}_c the lift moments, P_L the projection onto Wigner degrees
l < L.) :func:`serial` composes them into an :class:`SO3Network`;
``SO3Network.kernel(x1, x2=None, *, ctx, ntk=True)`` returns a
:class:`~molntk.kernels.result.PooledKernel` (``nngp``, ``ntk`` of shape (n1, n2)) and
``SO3Network.finite(in_shape, width, ctx)`` builds the finite network on the nodes of an
:class:`SO3Grid`. The :class:`Discretisation` (``SO3Network.discretisation(grid, mode)``)
fixes the grid, the mode ("exact": the finite network's kernel; "fast": the invariant
recursion with the grid as quadrature), dtype and device.
"""

from molntk.kernels.so3.context import Discretisation
from molntk.kernels.so3.conv import GroupConv
from molntk.kernels.so3.dense import Dense
from molntk.kernels.so3.grids import SO3Grid
from molntk.kernels.so3.layernorm import LayerNorm
from molntk.kernels.so3.lift import Lift
from molntk.kernels.so3.network import SO3Network, serial
from molntk.kernels.so3.nonlinearity import Nonlinearity
from molntk.kernels.so3.pool import Pool

__all__ = ["Dense", "Discretisation", "GroupConv", "LayerNorm", "Lift", "Nonlinearity", "Pool", "SO3Grid", "SO3Network", "serial"]
