"""Smearing of neighbour directions (molntk.features.smearing): the coefficients s_l against
the Funk–Hecke integral and S² quadrature, their limits and the switch between methods."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from e3nn import o3
from scipy.special import eval_legendre, ive

from molntk.features import S2Grid, smearing_coefficients, vmf_density
from molntk.features.smearing import HANKEL_KAPPA, concentration
from tests.helpers.features import s2_integral as _s2_integral


def _funk_hecke(l_max: int, sigma: float) -> np.ndarray:
    """s_l = 2π ∫_{-1}^{1} h(t) P_l(t) dt, integrated in u = 1 − t on [0, min(2, 60/κ)] (the rest < e^-60)."""
    kappa = concentration(sigma)
    u, w = np.polynomial.legendre.leggauss(400)
    top = min(2.0, 60.0 / kappa)
    u, w = (u + 1) * top / 2, w * top / 2
    h = vmf_density(1.0 - u, sigma)
    return np.array([2 * np.pi * np.sum(w * h * eval_legendre(l, 1.0 - u)) for l in range(l_max + 1)])


@pytest.mark.parametrize("sigma", [0.01, 0.1, 0.3, 0.5, 1.0, 3.0])
def test_smearing_coefficients_match_funk_hecke_integral(sigma: float) -> None:
    np.testing.assert_allclose(smearing_coefficients(9, sigma), _funk_hecke(8, sigma), rtol=0, atol=1e-12)


@pytest.mark.parametrize("sigma", [0.3, 0.5, 1.0])
def test_smeared_point_coefficients_by_s2_quadrature(sigma: float) -> None:
    """∫ Y^l(x) h_n(x) dx on a fine Gauss–Legendre × φ grid equals s_l Y^l(n), with ∫ h = 1."""
    grid = S2Grid(9, n_theta=90, n_phi=180)
    n = np.array([0.3, -0.8, 0.52])
    n /= np.linalg.norm(n)
    density = vmf_density(grid.points @ n, sigma)
    assert abs((grid.weights * density).sum() - 1.0) < 1e-13
    y_n = o3.spherical_harmonics(list(range(9)), torch.as_tensor(n), True, "integral").numpy()
    s = np.repeat(smearing_coefficients(9, sigma), 2 * np.arange(9) + 1)
    np.testing.assert_allclose(_s2_integral(grid, density), s * y_n, rtol=0, atol=1e-12)
    assert abs(_s2_integral(grid, density)[0] - 1 / math.sqrt(4 * math.pi)) < 1e-13


@pytest.mark.parametrize("sigma", [1e-4, 0.05, 0.5, 2.0, 10.0])
def test_smearing_coefficients_decrease_in_l(sigma: float) -> None:
    s = smearing_coefficients(13, sigma)
    assert s[0] == pytest.approx(1.0, abs=1e-15)
    assert np.all(np.diff(s) < 0) and np.all(s >= 0)


def test_smearing_small_width_limit_and_no_smearing() -> None:
    l = np.arange(13)
    for sigma in [1e-2, 1e-4, 1e-6, 1e-9, 1e-30]:  # 1 − s_l ≈ l(l+1)σ²/2
        np.testing.assert_allclose(1 - smearing_coefficients(13, sigma), l * (l + 1) * sigma**2 / 2, rtol=2e-2, atol=1e-16)
    assert np.array_equal(smearing_coefficients(6, None), np.ones(6))
    assert np.array_equal(smearing_coefficients(6, 0.0), np.ones(6))
    np.testing.assert_array_equal(smearing_coefficients(4, 1e200), [1, 0, 0, 0])  # uniform density
    with pytest.raises(ValueError):
        smearing_coefficients(4, -0.1)


def test_smearing_methods_agree_at_the_switch() -> None:
    """The Hankel series (large κ) and the ive ratio agree around the switch κ = 10⁶."""
    l = np.arange(13)
    for kappa in [HANKEL_KAPPA * 0.99, HANKEL_KAPPA * 1.01]:
        ratio = ive(l + 0.5, kappa) / ive(0.5, kappa)
        np.testing.assert_allclose(smearing_coefficients(13, 1 / math.sqrt(kappa)), ratio, rtol=0, atol=1e-15)
