"""Quadrature grids on SO(3) and the two quadrature measures of the kernel engine.

Rotations are written in e3nn's Euler angles, g = Y(α) X(β) Y(γ), with normalised Haar
measure dμ = sin β dα dβ dγ / (8π²). A *product grid* takes n_α equispaced α, n_γ
equispaced γ and n_β polar angles β with weights w_β:

    ∫ f dμ ≈ Σ_{i,j,k} w_β[j] / (n_α n_γ) · f(α_i, β_j, γ_k),   Σ_j w_β[j] = 1.

The α and γ sums kill every Wigner entry D^l_{mm'} with 0 < |m| or 0 < |m'| below
n_α and n_γ, leaving d^l_00 = P_l(cos β) for the β rule. A grid of band limit B
integrates exactly every function of Wigner degree l ≤ 2B − 2 (the products of two
functions of band limit B); see :attr:`SO3Grid.exact_degree`. The samplings offered:

- ``gauss-legendre`` (default): β_j = arccos x_j at the n_β = B Gauss–Legendre nodes
  (exact to degree 2B − 1 in cos β) and n_α = n_γ = 2B. The even count makes the grid
  closed under g ↦ g⁻¹ (Y(α)X(β)Y(γ))⁻¹ = Y(π−γ)X(β)Y(−π−α)), so fast-mode kernel
  matrices are exactly symmetric;
- ``driscoll-healy``: β_j = π(2j + 1)/(4B), j < 2B, and n_α = n_γ = 2B − 1 as in s2fft's
  "dh" SO(3) sampling with L = N = B, weights solved from exactness on P_l, l < 2B.
  This grid is not closed under inversion: fast-mode matrices are symmetric only to
  quadrature accuracy;
- ``lebedev``: the point g ŷ = Y(α) X(β) ŷ on a Lebedev rule of degree 2B − 1 (scipy)
  times n_γ = 2B equispaced γ. The γ sum leaves the Wigner entries D^l_{m0} ∝ Y^m_l(g ŷ),
  which the Lebedev rule integrates up to degree 2B − 1: the same exactness as the
  Gauss–Legendre grid with about 3/4 of the nodes (B = 5: 38 × 10 = 380 instead of 500).
  Not closed under inversion; kernels of a set with itself are computed on and above the
  diagonal and mirrored (:attr:`~molntk.kernels.so3.context.Discretisation.symmetric`).

The kernel engine needs a *measure* on SO(3): points u_k with weights w_k. The fast
mode uses the grid itself; the exact mode uses the pair measure of a grid, the
distribution of u = g_a g_b⁻¹ over node pairs with weight q_a q_b (see docs/mathematics.md §2 and
:mod:`molntk.kernels.so3.measures`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import torch
from e3nn import o3
from scipy.integrate import lebedev_rule
from torch import Tensor

SAMPLINGS = ("gauss-legendre", "driscoll-healy", "lebedev")


def _dh_weights(n_beta: int) -> np.ndarray:
    """Driscoll–Healy polar weights: w_j with Σ_j w_j P_l(cos β_j) = δ_l0 for l < n_β."""
    beta = np.pi * (2 * np.arange(n_beta) + 1) / (2 * n_beta)
    x = np.cos(beta)
    vander = np.polynomial.legendre.legvander(x, n_beta - 1).T  # (l, j) = P_l(x_j)
    rhs = np.zeros(n_beta)
    rhs[0] = 1.0
    return np.linalg.solve(vander, rhs)


@dataclass(frozen=True)
class SO3Grid:
    """A product quadrature grid on SO(3) (e3nn Euler angles Y(α) X(β) Y(γ)).

    ``band_limit`` B is the degree bound (l < B) integrated exactly; ``sampling`` chooses
    the polar rule. Nodes are ordered with γ fastest, then α, then β:
    index = (j · n_α + i) · n_γ + k.
    """

    band_limit: int
    sampling: str = "gauss-legendre"

    def __post_init__(self) -> None:
        if self.band_limit < 1:
            raise ValueError(f"SO3Grid band_limit must be >= 1, got {self.band_limit}")
        if self.sampling not in SAMPLINGS:
            raise ValueError(f"unknown SO(3) sampling {self.sampling!r}; choose one of {SAMPLINGS}")

    @property
    def n_alpha(self) -> int:
        """α values of a product grid (Gauss–Legendre, Driscoll–Healy)."""
        self._require_product()
        return 2 * self.band_limit if self.sampling == "gauss-legendre" else 2 * self.band_limit - 1

    @property
    def n_gamma(self) -> int:
        return 2 * self.band_limit - (self.sampling == "driscoll-healy")

    @property
    def n_beta(self) -> int:
        """Polar angles of a product grid (Gauss–Legendre, Driscoll–Healy)."""
        self._require_product()
        return self.band_limit if self.sampling == "gauss-legendre" else 2 * self.band_limit

    @property
    def n_sphere(self) -> int:
        """Nodes per γ value: the points g ŷ (n_α · n_β for product grids)."""
        if self.sampling == "lebedev":
            return int(self._lebedev_rule[1].shape[0])
        return self.n_alpha * self.n_beta

    @property
    def exact_degree(self) -> int:
        """Largest Wigner degree l integrated exactly: 2B − 1 (Gauss–Legendre, Lebedev), 2B − 2 (Driscoll–Healy)."""
        if self.sampling == "lebedev":
            return min(self.n_gamma - 1, self._lebedev_rule[2])
        return min(self.n_alpha - 1, 2 * self.n_beta - 1 if self.sampling == "gauss-legendre" else self.n_beta - 1)

    def __len__(self) -> int:
        return self.n_sphere * self.n_gamma

    def _require_product(self) -> None:
        if self.sampling == "lebedev":
            raise AttributeError("a Lebedev grid has sphere points (n_sphere), not α × β rings")

    @cached_property
    def _lebedev_rule(self) -> tuple[np.ndarray, np.ndarray, int]:
        """(points (3, n), weights summing to 1, degree): the Lebedev rule of the lowest
        degree ≥ 2B − 1 that scipy tabulates."""
        degree = max(3, 2 * self.band_limit - 1)
        while True:
            try:
                points, weights = lebedev_rule(degree)
                return points, weights / weights.sum(), degree
            except ValueError:
                if degree > 131:
                    raise ValueError(f"no Lebedev rule of degree >= {2 * self.band_limit - 1} in scipy") from None
                degree += 2

    @cached_property
    def _beta_rule(self) -> tuple[np.ndarray, np.ndarray]:
        if self.sampling == "gauss-legendre":
            x, w = np.polynomial.legendre.leggauss(self.n_beta)
            return np.arccos(x), w / w.sum()
        beta = np.pi * (2 * np.arange(self.n_beta) + 1) / (2 * self.n_beta)
        return beta, _dh_weights(self.n_beta)

    @cached_property
    def angles(self) -> tuple[Tensor, Tensor, Tensor]:
        """(α, β, γ) of every node, float64, each of shape (len(self),); γ varies fastest."""
        gamma = 2 * np.pi * np.arange(self.n_gamma) / self.n_gamma
        if self.sampling == "lebedev":
            points = torch.from_numpy(np.ascontiguousarray(self._lebedev_rule[0].T))
            alpha, beta = (t.numpy() for t in o3.xyz_to_angles(points))  # Y(α) X(β) ŷ = point
            a, g = np.meshgrid(alpha, gamma, indexing="ij")
            b = np.repeat(beta, self.n_gamma).reshape(a.shape)
        else:
            beta, _ = self._beta_rule
            alpha = 2 * np.pi * np.arange(self.n_alpha) / self.n_alpha
            b, a, g = np.meshgrid(beta, alpha, gamma, indexing="ij")
        return tuple(torch.from_numpy(np.ascontiguousarray(t.reshape(-1))) for t in (a, b, g))  # type: ignore[return-value]

    @cached_property
    def weights(self) -> Tensor:
        """Normalised quadrature weights q_a (Σ q_a = 1), float64."""
        if self.sampling == "lebedev":
            return torch.from_numpy(np.repeat(self._lebedev_rule[1], self.n_gamma) / self.n_gamma)
        _, wb = self._beta_rule
        w = np.repeat(wb, self.n_alpha * self.n_gamma) / (self.n_alpha * self.n_gamma)
        return torch.from_numpy(w)

    @cached_property
    def matrices(self) -> Tensor:
        """Rotation matrices of the nodes, shape (len(self), 3, 3), float64."""
        return o3.angles_to_matrix(*self.angles)

    def describe(self) -> str:
        nodes = (
            f"{self.n_sphere} points × {self.n_gamma} γ" if self.sampling == "lebedev" else f"{self.n_alpha}×{self.n_beta}×{self.n_gamma}"
        )
        return f"{self.sampling} SO(3) grid, band limit {self.band_limit}: {nodes} = {len(self)} nodes"


def haar_volume() -> float:
    """Volume of SO(3) under dα sin β dβ dγ: 8π² (the engine uses the normalised measure)."""
    return 8 * math.pi**2
