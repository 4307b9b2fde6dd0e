"""Kernel states passed between the layers of an SO(3) network.

Inputs x1 (n1 items) and x2 (n2 items). On the group, every kernel is a function of
u = g g'⁻¹ stored at the K support points of the engine's measure plus the identity
(last index, see :mod:`molntk.kernels.so3.measures`). After pooling, kernels are plain
(n1, n2) matrices (:class:`~molntk.kernels.result.PooledKernel`).

Every layer after Lift has one kernel rule (:data:`Rule`) that maps cross kernels given
the variances ψ^{ff}(e) of both sides. The self-kernel of an input is the same rule on
the pair (f, f), so :func:`apply_rule` advances a full state with it, and
:class:`~molntk.kernels.so3.network.SO3Network` runs the self-kernels once per input and
the cross kernels per tile of pairs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from torch import Tensor

from molntk.kernels.result import PooledKernel

if TYPE_CHECKING:
    from molntk.kernels.so3.context import Discretisation


@dataclass(frozen=True)
class InputPair:
    """Spherical-harmonic coefficients of the two input sets, shape (n, C, L²)."""

    x1: Tensor
    x2: Tensor
    same: bool = False


@dataclass(frozen=True)
class GroupKernel:
    """ψ(u) on the measure's support (+ identity, last index).

    nngp, ntk: (n1, n2, K+1) cross kernels (ntk None when only the NNGP is asked for);
    self1 (n1, K+1), self2 (n2, K+1): NNGP self-kernel functions ψ^{ff}(u) of each input,
    needed for the variances ψ^{ff}(e) that the nonlinearities use.
    """

    nngp: Tensor
    ntk: Tensor | None
    self1: Tensor
    self2: Tensor


KernelState = InputPair | GroupKernel | PooledKernel


#: A layer's kernel rule on cross kernels: (nngp, ntk or None, var1, var2, ctx) → (nngp', ntk' or None).
#: var1, var2 are the variances ψ^{ff}(e) of the two sides, shaped to broadcast against nngp.
#: Rules never modify their inputs (so nngp and ntk may be one tensor).
Rule = Callable[[Tensor, "Tensor | None", Tensor, Tensor, "Discretisation"], "tuple[Tensor, Tensor | None]"]


def variance(self_kernel: Tensor, on_group: bool) -> Tensor:
    """ψ^{ff}(e) of each input, shape (n,): the identity entry of a self-kernel function on
    the group, or the pooled self-kernel itself."""
    return self_kernel[:, -1] if on_group else self_kernel


def pair_variances(var1: Tensor, var2: Tensor, on_group: bool) -> tuple[Tensor, Tensor]:
    """Variances (n1,), (n2,) shaped to broadcast over cross kernels (n1, n2[, K+1])."""
    extra = (None,) if on_group else ()
    return var1[(slice(None), None) + extra], var2[(None, slice(None)) + extra]


def self_variances(var: Tensor, on_group: bool) -> tuple[Tensor, Tensor]:
    """Variances (n,) shaped to broadcast over self-kernels (n[, K+1]) (both sides are the input itself)."""
    v = var[:, None] if on_group else var
    return v, v


def apply_rule(
    rule: Rule, state: GroupKernel | PooledKernel, ctx: "Discretisation", *, ntk: bool, pools: bool
) -> GroupKernel | PooledKernel:
    """One layer on a full state: ``rule`` on the cross kernels (each side's variance
    broadcast over pairs) and on each self-kernel (its own variance on both sides).
    ``pools``: the layer maps signals on SO(3) to pooled kernels."""
    on_group = isinstance(state, GroupKernel)
    var1, var2 = variance(state.self1, on_group), variance(state.self2, on_group)
    nngp, theta = rule(state.nngp, state.ntk if ntk else None, *pair_variances(var1, var2, on_group), ctx)
    self1 = rule(state.self1, None, *self_variances(var1, on_group), ctx)[0]
    self2 = self1 if state.self2 is state.self1 else rule(state.self2, None, *self_variances(var2, on_group), ctx)[0]
    kind = GroupKernel if on_group and not pools else PooledKernel
    return kind(nngp=nngp, ntk=theta, self1=self1, self2=self2)
