"""Zonal angular smearing of a point on S²: the von Mises–Fisher density and its coefficients.

A point at direction n is smeared into the normalised spherical Gaussian (von Mises–Fisher)

    h_n(x) = κ / (4π sinh κ) · exp(κ x·n),   κ = 1/σ²,   ∫_{S²} h_n(x) dx = 1,

of angular width σ (radians; near n, h ∝ exp(−θ²/(2σ²)) with θ the angle to n). By the
Funk–Hecke theorem its coefficients on e3nn's real orthonormal spherical harmonics are

    ∫_{S²} Y^l(x) h_n(x) dx = s_l · Y^l(n),
    s_l = 2π ∫_{-1}^{1} h(t) P_l(t) dt = i_l(κ) / i_0(κ),

with i_l the modified spherical Bessel functions of the first kind. s_0 = 1 (so the l = 0
coefficient of one smeared point is Y^0 = 1/√(4π)), s_l decreases with l, s_l → 1 as
σ → 0, and σ = 0 or ``None`` means no smearing (s_l = 1: the point itself, a δ on S²).

Numerics: s_l = I_{l+½}(κ) / I_{½}(κ) is computed as a ratio of exponentially scaled
Bessel functions (``scipy.special.ive``) for κ ≤ 10⁶; above, ``ive`` loses accuracy and
the exact finite Hankel expansion of half-integer order is used instead,

    s_l = Σ_{k=0}^{l} (−1)^k a_k(l + ½) κ^{−k},   a_k(ν) = Π_{j=1}^{k} (4ν² − (2j − 1)²) / (k! 8^k),

(exact up to terms of order e^{−2κ}, which vanish in floating point there), so any σ ≥ 0
works, σ → 0 included.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from scipy.special import ive
from torch import Tensor

#: Above this concentration κ the finite Hankel series replaces the ``ive`` ratio.
HANKEL_KAPPA = 1e6


def concentration(sigma: float) -> float:
    """κ = 1/σ² of a smearing of angular width σ > 0 (radians)."""
    if not sigma > 0:
        raise ValueError(f"smearing width must be > 0 to have a concentration, got {sigma}")
    return 1.0 / (sigma * sigma)


def _hankel_ratios(band_limit: int, kappa: float) -> np.ndarray:
    """s_l for l < L by the finite Hankel expansion (accurate for large κ)."""
    out = np.empty(band_limit)
    for l in range(band_limit):
        mu = (2 * l + 1) ** 2
        term, total = 1.0, 1.0
        for k in range(1, l + 1):
            term *= -(mu - (2 * k - 1) ** 2) / (8.0 * k * kappa)
            total += term
        out[l] = total
    return out


def smearing_coefficients(band_limit: int, sigma: float | None) -> np.ndarray:
    """Legendre coefficients s_l = i_l(κ)/i_0(κ), l < L, of the vMF smearing of width σ (float64, shape (L,)).

    ``sigma`` None or 0: no smearing, all ones.
    """
    if band_limit < 1:
        raise ValueError(f"band limit must be >= 1, got {band_limit}")
    if sigma is None or sigma == 0:
        return np.ones(band_limit)
    if not (math.isfinite(sigma) and sigma > 0):
        raise ValueError(f"smearing width must be a finite number >= 0, got {sigma}")
    kappa = concentration(sigma)
    if kappa > HANKEL_KAPPA:
        return _hankel_ratios(band_limit, kappa)
    if kappa == 0.0:  # σ so large that κ underflows: the uniform density
        return np.eye(1, band_limit)[0]
    orders = np.arange(band_limit) + 0.5
    return ive(orders, kappa) / ive(0.5, kappa)


def smearing_vector(
    band_limit: int, sigma: float | None, *, dtype: torch.dtype = torch.float64, device: torch.device | str = "cpu"
) -> Tensor:
    """s_l repeated over each l block of a coefficient vector (e3nn order): shape (L²,)."""
    s = torch.as_tensor(smearing_coefficients(band_limit, sigma), dtype=dtype, device=device)
    widths = torch.arange(band_limit, device=device) * 2 + 1
    return torch.repeat_interleave(s, widths)


def vmf_density(cos_angle: np.ndarray, sigma: float) -> np.ndarray:
    """h(t) = κ/(4π sinh κ) e^{κt} at t = x·n, evaluated as κ e^{κ(t−1)} / (2π(1 − e^{−2κ})) (no overflow)."""
    kappa = concentration(sigma)
    t = np.asarray(cos_angle, dtype=np.float64)
    return kappa / (2.0 * np.pi * -np.expm1(-2.0 * kappa)) * np.exp(kappa * (t - 1.0))
