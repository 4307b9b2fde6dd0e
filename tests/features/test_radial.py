"""Radial bases (molntk.features.radial): the radial scaling against its formula; impossible
settings are refused."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from molntk.features import radial_basis_from_dict
from molntk.features.radial import GaussianBasis


@pytest.mark.parametrize(
    "radial",
    [
        {"kind": "gaussian", "n": 0},
        {"kind": "gaussian", "r_min": 5.0, "r_cut": 5.0},
        {"kind": "gaussian", "r_min": -1.0},
        {"kind": "gaussian", "width": 0.0},
        {"kind": "gaussian", "scaling_r0": 0.0},
        {"kind": "gaussian", "scaling_r0": 2.0, "scaling_power": -1.0},
        {"kind": "gaussian", "width_growth": 0.0},
        {"kind": "gaussian", "width_growth": 1.5, "width": 0.3},
        {"kind": "coulomb", "powers": []},
        {"kind": "coulomb", "powers": [2, 2]},
        {"kind": "coulomb", "powers": [0]},
        {"kind": "bessel"},
        {"kind": "gaussian", "r_cutoff": 4.0},
    ],
)
def test_radial_basis_rejects_impossible_values(radial: dict) -> None:
    with pytest.raises(ValueError):
        radial_basis_from_dict(radial)


def test_radial_scaling_multiplies_each_gaussian_by_one_over_one_plus_r_over_r0_to_the_p() -> None:
    """R_k(r) = exp(−(r − μ_k)²/(2w²)) · ½(cos(πr/r_cut) + 1) · 1/(1 + (r/r₀)^p), written out
    per entry; u(r₀) = ½ exactly; without r₀ the basis and its settings are the unscaled ones."""
    plain = GaussianBasis(n=5, r_min=0.5, r_cut=5.0)
    scaled = GaussianBasis(n=5, r_min=0.5, r_cut=5.0, scaling_r0=2.5, scaling_power=3.0)
    r = torch.tensor([0.7, 1.4, 2.5, 3.9, 4.99, 5.0, 6.0], dtype=torch.float64)
    z = torch.ones_like(r, dtype=torch.long)
    got = scaled(r, z, z)
    for i, radius in enumerate(r.tolist()):
        cutoff = 0.5 * (math.cos(math.pi * radius / 5.0) + 1.0) if radius < 5.0 else 0.0
        for k, mu in enumerate(plain.centres):
            expected = math.exp(-((radius - mu) ** 2) / (2 * plain.sigma**2)) * cutoff / (1 + (radius / 2.5) ** 3)
            assert got[i, k].item() == pytest.approx(expected, rel=1e-13, abs=1e-300)
    assert torch.allclose(got[2], 0.5 * plain(r, z, z)[2], rtol=1e-15)
    assert "scaling_r0" not in plain.to_dict()
    assert radial_basis_from_dict(scaled.to_dict()) == scaled


def test_width_growth_places_centres_evenly_in_one_minus_exp_and_widths_at_the_local_spacing() -> None:
    """Centres μ_k with 1 − e^{−(μ_k − r_min)/ℓ} evenly spaced from 0 to 1 − e^{−(r_cut − r_min)/ℓ},
    so μ_0 = r_min and μ_{n−1} = r_cut; widths w_k = ℓ Δt e^{(μ_k − r_min)/ℓ} equal the
    derivative dμ/dk of the centre map μ(k) = r_min − ℓ ln(1 − k Δt) (a central difference with
    h = 1e-5, truncation error ~h² relative, confirms it to 1e-8); ℓ → ∞ gives the even grid of
    width = spacing."""
    basis = GaussianBasis(n=20, r_min=0.7, r_cut=5.0, width_growth=1.5)
    mu, width = basis.centres, basis.sigma
    t = 1.0 - np.exp(-(mu - 0.7) / 1.5)
    assert mu[0] == pytest.approx(0.7, abs=1e-14) and mu[-1] == pytest.approx(5.0, rel=1e-14)
    np.testing.assert_allclose(np.diff(t), np.diff(t)[0], rtol=1e-10)
    step, h, k = np.diff(t)[0], 1e-5, np.arange(20)

    def centre(index: np.ndarray) -> np.ndarray:
        return 0.7 - 1.5 * np.log1p(-index * step)

    np.testing.assert_allclose(centre(k), mu, rtol=1e-12)
    np.testing.assert_allclose(width[:-1], (centre(k[:-1] + h) - centre(k[:-1] - h)) / (2 * h), rtol=1e-8)
    assert np.all(np.diff(width) > 0)
    even = GaussianBasis(n=8, r_min=0.5, r_cut=3.0)
    wide = GaussianBasis(n=8, r_min=0.5, r_cut=3.0, width_growth=1e7)
    np.testing.assert_allclose(wide.centres, even.centres, atol=1e-6)
    np.testing.assert_allclose(wide.sigma, even.sigma, rtol=1e-6)
    r = torch.tensor([0.9, 1.5, 4.2], dtype=torch.float64)
    z = torch.ones_like(r, dtype=torch.long)
    expected = np.exp(-((r.numpy()[:, None] - mu) ** 2) / (2 * width**2)) * (0.5 * (np.cos(np.pi * r.numpy() / 5.0) + 1))[:, None]
    np.testing.assert_allclose(basis(r, z, z).numpy(), expected, rtol=1e-12)
    assert radial_basis_from_dict(basis.to_dict()) == basis
    assert "width_growth" not in even.to_dict()
