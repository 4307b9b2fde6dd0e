"""Feature maps sampled on S²: synthesis on a product grid and quadrature back to coefficients.

Grid (e3nn's angle convention, polar axis y): n_θ polar angles θ_j = arccos t_j at the
Gauss–Legendre nodes t_j (weights w_j, Σ w_j = 2), ascending in θ, times n_φ equiangular
azimuths φ_k = 2πk/n_φ; the point is ``o3.angles_to_xyz(φ_k, θ_j)`` =
(sin θ sin φ, cos θ, sin θ cos φ). Quadrature weight of node (j, k): w_j · 2π/n_φ (they
sum to 4π).

- synthesis: f(x_jk) = Σ_{l<L} Σ_m f̂^l_m Y^l_m(x_jk);
- analysis:  f̂^l_m = Σ_{j,k} w_j (2π/n_φ) Y^l_m(x_jk) f(x_jk).

The rule integrates every polynomial of degree ≤ min(2n_θ − 1, n_φ − 1) on S² exactly, so
with n_θ ≥ L and n_φ ≥ 2L − 1 (the defaults are these minima) analysis inverts synthesis
exactly for signals of band limit L (products Y^l_m Y^l'_m' have degree ≤ 2L − 2). Grids
smaller than that are rejected. This is e3nn's ``ToS2Grid`` idea with Gauss–Legendre
instead of Kostelec–Rockmore polar nodes (e3nn's grid needs an even n_θ ≥ 2L).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import torch
from e3nn import o3
from torch import Tensor

from molntk.features.radial import check_int


@dataclass(frozen=True)
class S2Grid:
    """Gauss–Legendre × equiangular grid on S² for signals of band limit L (l < L).

    ``n_theta`` (default L, at least L) polar and ``n_phi`` (default 2L − 1, at least
    2L − 1) azimuthal nodes; larger grids give finer plots.
    """

    band_limit: int
    n_theta: int | None = None
    n_phi: int | None = None

    def __post_init__(self) -> None:
        band_limit = check_int("band_limit", self.band_limit, 1)
        n_theta = band_limit if self.n_theta is None else check_int("n_theta", self.n_theta, band_limit)
        n_phi = 2 * band_limit - 1 if self.n_phi is None else check_int("n_phi", self.n_phi, 2 * band_limit - 1)
        object.__setattr__(self, "band_limit", band_limit)
        object.__setattr__(self, "n_theta", n_theta)
        object.__setattr__(self, "n_phi", n_phi)

    @cached_property
    def _nodes(self) -> tuple[np.ndarray, np.ndarray]:
        t, w = np.polynomial.legendre.leggauss(self.n_theta)
        return np.arccos(t[::-1]), w[::-1].copy()

    @property
    def theta(self) -> np.ndarray:
        """Polar angles θ_j (radians, ascending), shape (n_θ,)."""
        return self._nodes[0]

    @property
    def phi(self) -> np.ndarray:
        """Azimuths φ_k = 2πk/n_φ, shape (n_φ,)."""
        return 2.0 * np.pi * np.arange(self.n_phi) / self.n_phi

    @cached_property
    def weights(self) -> np.ndarray:
        """Quadrature weights w_j · 2π/n_φ, shape (n_θ, n_φ), summing to 4π."""
        return np.repeat(self._nodes[1][:, None] * (2.0 * math.pi / self.n_phi), self.n_phi, axis=1)

    @cached_property
    def points(self) -> np.ndarray:
        """Unit vectors of the nodes, shape (n_θ, n_φ, 3)."""
        beta = torch.as_tensor(self.theta, dtype=torch.float64)[:, None]
        alpha = torch.as_tensor(self.phi, dtype=torch.float64)[None, :]
        return o3.angles_to_xyz(alpha, beta).numpy()

    @cached_property
    def _basis(self) -> Tensor:
        """Y^l_m at the nodes (e3nn, integral normalisation), float64, shape (n_θ, n_φ, L²)."""
        pts = torch.as_tensor(self.points)
        return o3.spherical_harmonics(list(range(self.band_limit)), pts, normalize=True, normalization="integral")

    def _basis_like(self, x: Tensor) -> Tensor:
        return self._basis.to(dtype=x.dtype, device=x.device)

    def to_grid(self, coeffs: Tensor) -> Tensor:
        """Synthesis: coefficients (..., L²) → values (..., n_θ, n_φ)."""
        if coeffs.shape[-1] != self.band_limit**2:
            raise ValueError(
                f"coefficients need {self.band_limit ** 2} entries (L = {self.band_limit}) in the last axis, "
                f"got shape {tuple(coeffs.shape)}"
            )
        return torch.einsum("...i,tpi->...tp", coeffs, self._basis_like(coeffs))

    def from_grid(self, values: Tensor) -> Tensor:
        """Analysis (quadrature): values (..., n_θ, n_φ) → coefficients (..., L²)."""
        if tuple(values.shape[-2:]) != (self.n_theta, self.n_phi):
            raise ValueError(f"grid values need trailing shape ({self.n_theta}, {self.n_phi}), got {tuple(values.shape)}")
        weights = torch.as_tensor(self.weights, dtype=values.dtype, device=values.device)
        weighted = self._basis_like(values) * weights[..., None]
        return torch.einsum("...tp,tpi->...i", values, weighted)
