"""Rotation-augmented MLP NTK: the orbit average of the per-atom MLP kernel (docs/mathematics.md §4, "Augmentation").

Training the per-atom MLP of :mod:`molntk.molecular.baselines.mlp` on rotated copies of every
environment gives, at infinite width, the orbit-averaged kernels

    K_aug(f, f') = Σ_k w_k K_MLP(f, ρ(R_k) f'),    Θ_aug(f, f') = Σ_k w_k Θ_MLP(f, ρ(R_k) f'),

with ρ(R) f̂^l = D^l(R) f̂^l (e3nn Wigner matrices) and rotations R_k with weights w_k
(Σ_k w_k = 1) from a :class:`RotationSet`:

- ``RotationSet.random(n, seed)``: n Haar-random rotations, each used together with its
  inverse (2n rotations, weights 1/(2n)); the Monte Carlo error falls like n^(-1/2);
- ``RotationSet.grid(SO3Grid(B))``: the nodes and weights of an SO(3) quadrature grid;
- ``RotationSet.differences(base)``: all g⁻¹h for g, h in ``base``, which makes the
  average the NTK of the symmetrised network Σ_g w_g N(ρ(g) x) (PSD for any base set).

Because ρ(R) is orthogonal, K_MLP(f, ρ(R) f') depends on R only through the first-layer
kernel σ_w²/C ⟨f, ρ(R) f'⟩ + σ_b² = σ_w²/C Σ_l ⟨M^l, D^l(R)⟩ + σ_b² with
M^l = Σ_c f̂^l_c f̂'^{lT}_c, which is the SO(3) lifting kernel at u = R. The MLP's later dense
layers act pointwise in u, so the orbit average over a grid is *exactly* the fast-mode
kernel of the SO(3) network serial(Lift, σ, Dense, σ, …, Pool, Dense) on that grid, and it
tends to the continuum (Haar-averaged) GCNN kernel as the rotation set refines.

The kernel is symmetric, K_aug(f, f') = K_aug(f', f), when the set is closed under
inversion with equal weights (random sets by construction; Gauss–Legendre grids). It is
positive semi-definite for a group orbit, for the Haar mean and for a ``differences``
set, but not exactly for a finite random set (its Monte Carlo error need not be PSD).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np
import torch
from e3nn import o3
from torch import Tensor

from molntk.features.environments import FeatureConfig
from molntk.kernels.so3.grids import SO3Grid
from molntk.kernels.so3.wigner import float64_default, coeff_slices, flatten_blocks, wigner_slices
from molntk.molecular.baselines.mlp import FeatureMapNTK, MLPArchitecture

#: Most entries (atom pairs × rotations) of one first-layer kernel chunk (≈ 32 MiB in float64).
_CHUNK_ENTRIES = 1 << 22


@dataclass(frozen=True)
class RotationSet:
    """Rotations in e3nn Euler angles (α, β, γ) with weights summing to 1."""

    alpha: Tensor
    beta: Tensor
    gamma: Tensor
    weights: Tensor
    closed_under_inverse: bool
    description: str
    _tables: dict = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def random(cls, n: int, seed: int = 0) -> RotationSet:
        """n Haar-random rotations (α, γ uniform, cos β uniform) and their inverses.

        The inverse of Y(α) X(β) Y(γ) is Y(−γ) X(−β) Y(−α).
        """
        if n < 1:
            raise ValueError(f"number of random rotations must be >= 1, got {n}")
        rng = np.random.default_rng(seed)
        alpha, gamma = rng.uniform(0.0, 2 * np.pi, (2, n))
        beta = np.arccos(rng.uniform(-1.0, 1.0, n))
        angles = (np.concatenate([alpha, -gamma]), np.concatenate([beta, -beta]), np.concatenate([gamma, -alpha]))
        a, b, g = (torch.from_numpy(t) for t in angles)
        weights = torch.full((2 * n,), 1.0 / (2 * n), dtype=torch.float64)
        return cls(a, b, g, weights, True, f"{n} random rotations (seed {seed}) and their inverses")

    @classmethod
    def differences(cls, base: RotationSet) -> RotationSet:
        """The law of g⁻¹h for g, h drawn independently from ``base``: rotations R_iᵀ R_j with
        weights w_i w_j (the identities of i = j merged into one).

        The orbit average over this set is Σ_ij w_i w_j K(ρ(g_i) f, ρ(g_j) f'), the kernel of
        the symmetrised network x ↦ Σ_i w_i N(ρ(g_i) x): positive semi-definite for any
        base set, unlike the one-sided average over a finite random set. Closed under inversion.
        """
        with float64_default():
            mats = o3.angles_to_matrix(base.alpha, base.beta, base.gamma)
            n = mats.shape[0]
            off = ~torch.eye(n, dtype=torch.bool)
            prod = torch.einsum("iba,jbc->ijac", mats, mats)[off]
            weights = (base.weights[:, None] * base.weights[None, :])[off]
            alpha, beta, gamma = o3.matrix_to_angles(prod)
        zero = torch.zeros(1, dtype=torch.float64)
        identity_weight = (base.weights**2).sum().reshape(1)
        return cls(
            torch.cat([zero, alpha]), torch.cat([zero, beta]), torch.cat([zero, gamma]),
            torch.cat([identity_weight, weights]), True, f"pairwise differences g⁻¹h of {base.description}",
        )

    @classmethod
    def grid(cls, grid: SO3Grid) -> RotationSet:
        """The nodes and quadrature weights of ``grid`` (closed under inversion for Gauss–Legendre)."""
        a, b, g = grid.angles
        return cls(a, b, g, grid.weights, grid.sampling == "gauss-legendre", grid.describe())

    def __len__(self) -> int:
        return int(self.weights.shape[0])

    def rotate(self, x: Tensor, rows: slice = slice(None)) -> Tensor:
        """ρ(R_k) x for the rotations ``rows``: (n, C, L²) → (n, k, C, L²), (ρ(R) x)^l = D^l(R) x^l."""
        band_limit = math.isqrt(x.shape[-1])
        table = self.table(band_limit, x.dtype, x.device)[rows]
        out = x.new_empty(x.shape[0], table.shape[0], *x.shape[1:])
        for coeffs, entries in zip(coeff_slices(band_limit), wigner_slices(band_limit)):
            width = coeffs.stop - coeffs.start
            d = table[:, entries].unflatten(-1, (width, width))  # (k, 2l+1, 2l+1)
            out[..., coeffs] = torch.einsum("kmp,ncp->nkcm", d, x[..., coeffs])
        return out

    def table(self, band_limit: int, dtype: torch.dtype, device: torch.device | str) -> Tensor:
        """Flattened D^l(R_k), l < L: shape (K, Σ_l (2l+1)²) (cached)."""
        key = (band_limit, dtype, str(device))
        if key not in self._tables:
            table = wigner_table(band_limit, self.alpha, self.beta, self.gamma)
            self._tables[key] = table.to(dtype=dtype, device=device).contiguous()
        return self._tables[key]


def _axis_rotations(generator: Tensor, angles: Tensor) -> Tensor:
    """exp(θ X) for every angle θ: (n, d, d), from X = V diag(iω) V^H (X real antisymmetric with
    distinct eigenvalues i·m, m = −l…l, so V is unitary)."""
    omega, v = torch.linalg.eig(generator)
    phase = torch.exp(angles.to(torch.complex128)[:, None] * omega[None, :])
    return ((v[None] * phase[:, None, :]) @ v.conj().T).real


def wigner_table(band_limit: int, alpha: Tensor, beta: Tensor, gamma: Tensor) -> Tensor:
    """Flattened e3nn Wigner matrices D^l(α, β, γ) = exp(α X_y) exp(β X_x) exp(γ X_y), l < L:
    shape (n, Σ_l (2l+1)²), float64 — the values of :func:`molntk.kernels.so3.wigner.wigner_blocks`
    (to ~1e-14) from one eigendecomposition per generator instead of 3n matrix exponentials."""
    blocks = []
    with float64_default():
        for l in range(band_limit):
            x = o3.so3_generators(l).to(torch.complex128)
            y_alpha, x_beta, y_gamma = (_axis_rotations(x[axis], t) for axis, t in ((1, alpha), (0, beta), (1, gamma)))
            blocks.append(y_alpha @ x_beta @ y_gamma)
    return flatten_blocks(blocks)


def _default_rotations() -> RotationSet:
    return RotationSet.grid(SO3Grid(4))


@dataclass(frozen=True)
class AugmentedMLPNTK(FeatureMapNTK):
    """Molecular NNGP/NTK of per-atom MLPs trained on rotation-augmented environments.

    Same interface as :class:`~molntk.molecular.baselines.mlp.MLPNTK`; ``rotations`` defaults to the
    Gauss–Legendre grid of band limit 4 (256 rotations). Cost per atom pair: O(K·C·L²), one
    GEMM of the first inputs against the K rotated copies of the second (:meth:`RotationSet.rotate`).
    """

    features: FeatureConfig = field(default_factory=FeatureConfig)
    architecture: MLPArchitecture = field(default_factory=MLPArchitecture)
    rotations: RotationSet = field(default_factory=_default_rotations)
    name: ClassVar[str] = "augmented-mlp-ntk"

    @property
    def symmetric(self) -> bool:
        return self.rotations.closed_under_inverse

    def env_kernel(self, x1: Tensor, x2: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """(NNGP, NTK) orbit averages between coefficient sets (n1, C, L²), (n2, C, L²)."""
        arch = self.architecture
        band_limit = math.isqrt(x1.shape[-1])
        if band_limit**2 != x1.shape[-1]:
            raise ValueError(f"coefficients must have L² entries per channel, got {x1.shape[-1]}")
        x2 = x1 if x2 is None else x2
        if x2.shape[1:] != x1.shape[1:]:
            raise ValueError(f"inputs differ in channels/coefficients: {tuple(x1.shape)} vs {tuple(x2.shape)}")
        scale, bias = arch.sigma_w**2 / x1.shape[1], arch.sigma_b**2
        # first-layer variances: ρ(R) is orthogonal, so rotating f' leaves them unchanged
        var1 = scale * (x1 * x1).sum((1, 2)) + bias
        var2 = var1 if x2 is x1 else scale * (x2 * x2).sum((1, 2)) + bias
        n1, n2 = x1.shape[0], x2.shape[0]
        weights = self.rotations.weights.to(dtype=x1.dtype, device=x1.device)
        nngp = x1.new_zeros(n1, n2)
        ntk = x1.new_zeros(n1, n2)
        chunk = max(1, _CHUNK_ENTRIES // max(1, n1 * n2))
        v1, v2 = var1[:, None, None], var2[None, :, None]
        flat1 = x1.reshape(n1, -1)
        for start in range(0, len(self.rotations), chunk):
            rows = slice(start, start + chunk)
            rotated = self.rotations.rotate(x2, rows).reshape(-1, flat1.shape[1])  # ρ(R_k) f', (n2·k, C·L²)
            k1 = (flat1 @ rotated.T).view(n1, n2, -1).mul_(scale).add_(bias)  # K¹(f, ρ(R_k) f'), (n1, n2, k)
            k, theta = arch.mean_kernels(k1, v1, v2, weights[rows])
            nngp += k
            ntk += theta
        return nngp, ntk
