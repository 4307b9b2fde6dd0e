"""Kernel states passed between the layers of an SO(3) network.

Inputs x1 (n1 items) and x2 (n2 items). On the group, every kernel is a function of
u = g g'⁻¹ stored at the K support points of the engine's measure plus the identity
(last index, see :mod:`molntk.kernels.so3.measures`). After pooling, kernels are plain
(n1, n2) matrices.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from torch import Tensor


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

    def with_(self, **changes) -> "GroupKernel":
        return replace(self, **changes)


@dataclass(frozen=True)
class PooledKernel:
    """Kernels after pooling: nngp, ntk (n1, n2); self-variances self1 (n1,), self2 (n2,)."""

    nngp: Tensor
    ntk: Tensor | None
    self1: Tensor
    self2: Tensor

    def with_(self, **changes) -> "PooledKernel":
        return replace(self, **changes)


KernelState = InputPair | GroupKernel | PooledKernel
