"""Radial bases (molntk.features.radial): the radial scaling against its formula; impossible
settings are refused."""

from __future__ import annotations

import math

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
