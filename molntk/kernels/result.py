"""What the networks' ``kernel`` methods return: NNGP and NTK matrices between two input sets.

For inputs x1 (n1 items) and x2 (n2 items) of an infinite-width network with scalar output,

    nngp[i, j] = K(x1_i, x2_j) = E[f(x1_i) f(x2_j)],     ntk[i, j] = Θ(x1_i, x2_j),

both (n1, n2) (``ntk`` None when only the NNGP was asked for). A network's result also
carries the output self-kernels K(x1_i, x1_i) and K(x2_j, x2_j) (:class:`PooledKernel`);
an orbit-averaged kernel (:class:`~molntk.kernels.cn.models.Augmented`) returns the
matrices only (:class:`Kernels`).
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor


@dataclass(frozen=True)
class Kernels:
    """NNGP (n1, n2) and NTK (n1, n2) or None."""

    nngp: Tensor
    ntk: Tensor | None


@dataclass(frozen=True)
class PooledKernel(Kernels):
    """Kernels after the invariant pooling and readout, with self1 (n1,) = K(x1_i, x1_i) and
    self2 (n2,) = K(x2_j, x2_j), the NNGP self-kernels (variances) of each input."""

    self1: Tensor
    self2: Tensor
