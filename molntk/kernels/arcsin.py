"""Coefficients of the polynomial arcsin shared by the fused dual-activation passes.

Both the compiled CPU loop (:func:`molntk.kernels.pooled_activations.asin_poly`) and the
Triton kernel (:mod:`molntk.kernels.pooled_activations_triton`) evaluate

    arcsin x = x + x t g(t),   t = x² ≤ 1/4   (and the half-angle form for |x| > 1/2),

    g(t) = Σ_{k≥1} C(2k, k) / (4^k (2k + 1)) t^(k−1),

with g replaced by the degree-12 polynomial :data:`ASIN_COEFFICIENTS` fitted here.
"""

from __future__ import annotations

import numpy as np


def asin_series_tail(t: np.ndarray) -> np.ndarray:
    """g(t) = Σ_{k≥1} C(2k,k) / (4^k (2k+1)) t^(k−1), so that arcsin x = x + x·t·g(t) at t = x².

    Summed to 80 terms (all positive; for t ≤ 1/4 the tail beyond is below 1e-40)."""
    out, term, coeff = np.zeros_like(t), np.ones_like(t), 0.5
    for k in range(1, 80):
        out += coeff / (2 * k + 1) * term
        term = term * t
        coeff *= (2 * k + 1) / (2 * k + 2)
    return out


def asin_coefficients(degree: int = 12) -> tuple[float, ...]:
    """Monomial coefficients of the least-squares fit to g on [0, 1/4] at Chebyshev points
    (relative error ≈ 1e-17; the fit is what limits the polynomial arcsin to ≈ 2 ulp)."""
    t = 0.125 * (1 - np.cos(np.pi * (np.arange(4000) + 0.5) / 4000))
    fit = np.polynomial.chebyshev.Chebyshev.fit(t, asin_series_tail(t), degree, domain=[0.0, 0.25])
    return tuple(float(c) for c in fit.convert(kind=np.polynomial.Polynomial).coef)


#: Coefficients of g, lowest degree first (13 values).
ASIN_COEFFICIENTS = asin_coefficients()
