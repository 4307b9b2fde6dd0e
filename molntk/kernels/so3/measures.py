"""Quadrature measures on SO(3) on which the invariant kernel recursion is evaluated.

Every kernel of the SO(3) networks is a function ψ(u) of u = g g'⁻¹ (docs/mathematics.md §2). The
engine stores ψ at the support points u_k of a measure μ = Σ_k w_k δ_{u_k}, plus the
identity e (weight 0; the nonlinearities need the self-kernels ψ^{ff}(e)), and uses μ
for the two integrals of the recursion:

    P_L ψ (u) = Σ_{l<L} (2l+1) ⟨M^l, D^l(u)⟩,   M^l = Σ_k w_k ψ(u_k) D^l(u_k)
    mean ψ    = Σ_k w_k ψ(u_k).

- fast mode: μ is a quadrature grid (``grid_measure``), |μ| = |grid|;
- exact mode: μ is the *pair measure* of the grid the finite network is sampled on
  (``pair_measure``): u = g_a g_b⁻¹ with weight q_a q_b over all node pairs. With it the
  recursion reproduces, to rounding, the NTK of the discretised network whose kernels
  live on node pairs (K(g_a, g_b) = ψ(g_a g_b⁻¹) at every layer; proven in the tests).
  On a product grid g_a g_b⁻¹ depends on γ_a − γ_b only through their difference, so
  only pairs with γ_b = 0 are kept, with weight n_γ q_a q_b: |μ| = |grid|² / n_γ.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor

from molntk.kernels.so3.grids import SO3Grid
from molntk.kernels.so3.wigner import degree_weights, flatten_blocks, wigner_blocks


@dataclass
class SO3Measure:
    """Support points (as flattened Wigner tables per band limit) and weights of μ.

    ``blocks[l]`` holds D^l at the support points followed by the identity, shape
    (K + 1, 2l+1, 2l+1); ``weights`` has shape (K,).
    """

    name: str
    weights: Tensor
    blocks: list[Tensor]
    _tables: dict = field(default_factory=dict, repr=False)

    @property
    def size(self) -> int:
        return int(self.weights.shape[0])

    @property
    def max_band_limit(self) -> int:
        return len(self.blocks)

    def table(self, band_limit: int, dtype: torch.dtype, device: torch.device | str) -> Tensor:
        """D^l(u_k), l < L, flattened: shape (K + 1, L3) (last row: identity)."""
        if band_limit > self.max_band_limit:
            raise ValueError(f"measure {self.name} was built for band limit {self.max_band_limit}, asked for {band_limit}")
        key = (band_limit, dtype, str(device))
        if key not in self._tables:
            self._tables[key] = flatten_blocks(self.blocks[:band_limit]).to(dtype=dtype, device=device).contiguous()
        return self._tables[key]

    def projection_tables(self, band_limit: int, dtype: torch.dtype, device) -> tuple[Tensor, Tensor]:
        """(analysis, synthesis) for P_L: analysis (K+1, L3) = w_k D(u_k) (0 for the identity row),
        synthesis (K+1, L3) = (2l+1) D(u_k)."""
        key = ("proj", band_limit, dtype, str(device))
        if key not in self._tables:
            table = self.table(band_limit, dtype, device)
            w = torch.cat([self.weights, self.weights.new_zeros(1)]).to(dtype=dtype, device=device)
            deg = degree_weights(band_limit, dtype=dtype, device=device)
            self._tables[key] = ((table * w[:, None]).contiguous(), (table * deg).contiguous())
        return self._tables[key]

    def support_product_basis(self, band_limit: int, dtype: torch.dtype, device) -> tuple[Tensor, Tensor]:
        """(basis, coefficients) with D(u_k)_i D(u_k)_j = Σ_s basis[k, s] coefficients[s, i·L3 + j]
        over the L3 columns of the flattened table at the K support points (no identity row):
        basis (K, r) orthonormal, coefficients = basisᵀ P for the product table P (K, L3²).
        Products of D^l and D^l' entries are combinations of D^λ entries with λ ≤ l + l'
        (Clebsch–Gordan), so P has rank r ≤ Σ_{λ ≤ 2L−2} (2λ+1)² (165 for L = 3) and
        Σ_k h_k D(u_k) D(u_k)ᵀ = (h · basis) · coefficients costs K·r + r·L3² instead of
        K·L3²; the basis is P's left singular vectors above 1e-10 of its largest singular value,
        computed once per band limit, dtype and device in float64 (the curvature terms of the
        closed-form derivative kernels)."""
        key = ("products", band_limit, dtype, str(device))
        if key not in self._tables:
            table = self.table(band_limit, torch.float64, "cpu")[:-1]
            products = (table[:, :, None] * table[:, None, :]).flatten(1)
            left, singular, _ = torch.linalg.svd(products, full_matrices=False)
            basis = left[:, singular > 1e-10 * singular[0]]
            coefficients = basis.T @ products
            self._tables[key] = (basis.to(dtype=dtype, device=device).contiguous(),
                                 coefficients.to(dtype=dtype, device=device).contiguous())
        return self._tables[key]

    def mean_weights(self, dtype: torch.dtype, device) -> Tensor:
        """Weights for Σ_k w_k ψ(u_k), padded with 0 for the identity: shape (K + 1,); made
        once per dtype and device (read-only: every tile of every layer uses it)."""
        key = ("mean", dtype, str(device))
        if key not in self._tables:
            self._tables[key] = torch.cat([self.weights, self.weights.new_zeros(1)]).to(dtype=dtype, device=device)
        return self._tables[key]


def _with_identity(blocks: list[Tensor]) -> list[Tensor]:
    return [torch.cat([b, torch.eye(b.shape[-1], dtype=b.dtype)[None]], dim=0) for b in blocks]


def grid_measure(grid: SO3Grid, band_limit: int) -> SO3Measure:
    """Fast mode: μ = the grid's own quadrature (|μ| = |grid|)."""
    blocks = wigner_blocks(band_limit, *grid.angles)
    return SO3Measure(f"grid[{grid.describe()}]", grid.weights.clone(), _with_identity(blocks))


def pair_measure(grid: SO3Grid, band_limit: int) -> SO3Measure:
    """Exact mode: μ = Σ_{a,b} q_a q_b δ_{g_a g_b⁻¹}, reduced by the γ-shift symmetry.

    D^l(g_a g_b⁻¹) = D^l(g_a) D^l(g_b)ᵀ, computed from the node tables (no new angles).
    """
    node_blocks = wigner_blocks(band_limit, *grid.angles)
    q = grid.weights
    right = torch.arange(0, len(grid), grid.n_gamma)  # nodes with γ = 0
    weights = (q[:, None] * q[right][None, :] * grid.n_gamma).reshape(-1)
    blocks = [torch.einsum("amp,bnp->abmn", d, d[right]).reshape(-1, d.shape[1], d.shape[2]) for d in node_blocks]
    return SO3Measure(f"pairs[{grid.describe()}]", weights, _with_identity(blocks))
