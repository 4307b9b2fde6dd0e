"""S² grids (molntk.features.sphere): round trips of band-limited signals, bad sizes, and the
sampled feature map against the smeared density."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from molntk.features import CoulombBasis, FeatureConfig, S2Grid, environment_features, smearing_coefficients, vmf_density
from tests.helpers.features import random_molecule as _molecule


@pytest.mark.parametrize("size", [(None, None), (9, 17), (12, 30)])
def test_s2_grid_round_trip_for_band_limited_signals(size: tuple) -> None:
    grid = S2Grid(8, *size)
    assert grid.weights.sum() == pytest.approx(4 * math.pi, rel=1e-14)
    coeffs = torch.randn(3, 5, 64, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    values = grid.to_grid(coeffs)
    assert values.shape == (3, 5, grid.n_theta, grid.n_phi)
    torch.testing.assert_close(grid.from_grid(values), coeffs, rtol=0, atol=1e-10)


def test_s2_grid_rejects_too_small_grids_and_wrong_shapes() -> None:
    with pytest.raises(ValueError):
        S2Grid(4, n_theta=3)
    with pytest.raises(ValueError):
        S2Grid(4, n_phi=6)
    with pytest.raises(ValueError):
        S2Grid(4).to_grid(torch.zeros(9, dtype=torch.float64))


def test_sampled_map_equals_smeared_density_on_grid() -> None:
    """Synthesis of f̂ at L = 13 with σ = 0.6 vs Σ_b R h_b(x); truncation bound
    |f − f_L| ≤ Σ_{l≥L} s_l (2l+1)/(4π) · Σ_b |R_b| (|P_l| ≤ 1)."""
    sigma, L = 0.6, 13
    mol = _molecule(14, n=5)
    cfg = FeatureConfig(band_limit=L, smearing_width=sigma, radial=CoulombBasis(powers=(2.0,)))
    s_tail = smearing_coefficients(60, sigma)[L:]
    assert s_tail[0] < 1e-8
    grid = S2Grid(L, n_theta=20, n_phi=40)
    values = grid.to_grid(environment_features(mol, cfg).coeffs).numpy()
    for a in range(mol.n_atoms):
        direct = np.zeros((cfg.n_channels,) + grid.weights.shape)
        total = 0.0
        for b in range(mol.n_atoms):
            if b == a:
                continue
            d = mol.positions[b] - mol.positions[a]
            r = np.linalg.norm(d)
            weight = mol.numbers[a] * mol.numbers[b] / r**2
            direct[cfg.elements.index(mol.numbers[b])] += weight * vmf_density(grid.points @ (d / r), sigma)
            total += weight
        bound = total * np.sum(s_tail * (2 * np.arange(L, 60) + 1) / (4 * math.pi))
        assert np.abs(values[a] - direct).max() <= bound + 1e-12
        assert bound < 1e-6 * np.abs(direct).max()
