"""Rotation-augmented MLP NTK (molntk.molecular.baselines.augmented): orbit averages against the
SO(3) GCNN, Monte Carlo convergence, Wigner tables, rotation-difference sets."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from molntk.features.environments import FeatureConfig
from molntk.features.radial import GaussianBasis
from molntk.kernels.so3 import Dense, Lift, Nonlinearity, Pool, SO3Grid, serial
from molntk.kernels.so3.wigner import coeff_slices, flatten_blocks, wigner_blocks
from molntk.molecular.baselines import MLPNTK, AugmentedMLPNTK, MLPArchitecture, RotationSet, wigner_table
from tests.helpers.baselines import CONFIG


def _gcnn(activation: str, sw: float, sb: float, band_limit: int):
    """lift → σ → pointwise dense → σ → pool → dense: the orbit average of a depth-2 MLP."""
    sigma = Nonlinearity(activation)
    return serial(Lift(band_limit, sw, sb), sigma, Dense(sw, sb), sigma, Pool(), Dense(sw, sb))


@pytest.mark.parametrize("activation", ["relu", "erf"])
def test_augmented_mlp_on_grid_nodes_equals_gcnn_fast_mode(envs, activation):
    """Orbit average over the nodes of an SO(3) grid = fast-mode GCNN kernel on that grid."""
    sw, sb = 1.3, 0.2
    grid = SO3Grid(5)
    net = _gcnn(activation, sw, sb, CONFIG.band_limit)
    ref = net.kernel(envs, ctx=net.discretisation(grid, "fast"))
    aug = AugmentedMLPNTK(CONFIG, MLPArchitecture(2, activation, sw, sb), RotationSet.grid(grid))
    nngp, ntk = aug.env_kernel(envs)
    assert torch.allclose(nngp, ref.nngp, rtol=0, atol=1e-10 * float(ref.nngp.abs().max()))
    assert torch.allclose(ntk, ref.ntk, rtol=0, atol=1e-10 * float(ref.ntk.abs().max()))
    cross_nngp, cross_ntk = aug.env_kernel(envs[:5], envs[5:])
    assert torch.allclose(cross_ntk, ref.ntk[:5, 5:], rtol=0, atol=1e-10 * float(ref.ntk.abs().max()))


def test_augmented_mlp_with_random_rotations_converges_like_monte_carlo(envs):
    """Random orbits → GCNN kernel (fast mode on a fine grid, converged to < 1e-8 relative):
    the error, RMS over 16 seeds, falls with K = 10, 100, 1000 at the Monte Carlo rate K^(-1/2)
    (measured slope −0.49; 4 seeds are too few, their RMS still fluctuates by ~50 %)."""
    sw, sb = 1.3, 0.2
    net = _gcnn("erf", sw, sb, CONFIG.band_limit)
    ref = net.kernel(envs, ctx=net.discretisation(SO3Grid(8), "fast")).ntk
    coarser = net.kernel(envs, ctx=net.discretisation(SO3Grid(6), "fast")).ntk
    assert float((coarser - ref).norm() / ref.norm()) < 1e-8
    arch = MLPArchitecture(2, "erf", sw, sb)
    errors = []
    for k in (10, 100, 1000):
        kernels = [AugmentedMLPNTK(CONFIG, arch, RotationSet.random(k, seed)).env_kernel(envs)[1] for seed in range(16)]
        errors.append(math.sqrt(np.mean([float((t - ref).norm() / ref.norm()) ** 2 for t in kernels])))
    assert errors[0] > errors[1] > errors[2]
    slope = math.log(errors[2] / errors[0]) / math.log(100)
    assert -0.65 < slope < -0.35


def test_fast_wigner_table_matches_e3nn():
    g = torch.Generator().manual_seed(0)
    alpha, beta, gamma = (torch.rand(50, generator=g, dtype=torch.float64) * 14 - 7 for _ in range(3))
    table = wigner_table(5, alpha, beta, gamma)
    assert torch.allclose(table, flatten_blocks(wigner_blocks(5, alpha, beta, gamma)), rtol=0, atol=1e-13)


def test_random_rotation_sets_give_symmetric_kernels(envs):
    aug = AugmentedMLPNTK(CONFIG, rotations=RotationSet.random(7, seed=1))
    _, ntk = aug.env_kernel(envs)
    assert torch.allclose(ntk, ntk.T, rtol=1e-12, atol=0)
    assert len(aug.rotations) == 14


def _rotate(x, table, k, band_limit):
    out, offset = torch.empty_like(x), 0
    for l, s in enumerate(coeff_slices(band_limit)):
        d = 2 * l + 1
        out[..., s] = x[..., s] @ table[k, offset : offset + d * d].reshape(d, d).T
        offset += d * d
    return out


def test_rotation_differences_give_the_symmetrised_network_kernel():
    """Σ_k w_k Θ(f, ρ(g_i⁻¹g_j) f') over the difference set = Σ_ij w_i w_j Θ(ρ(g_i) f, ρ(g_j) f'),
    computed by rotating the coefficients (erf: smooth, so rounding-level agreement), and PSD."""
    torch.manual_seed(0)
    x = torch.randn(5, 3, 9, dtype=torch.float64)
    base = RotationSet.random(2, seed=3)
    arch = MLPArchitecture(1, "erf", 1.0, 0.1)
    got = AugmentedMLPNTK(FeatureConfig(band_limit=3, smearing_width=0.5, radial=GaussianBasis(n=6, r_cut=5.0)), arch, RotationSet.differences(base)).env_kernel(x)[1]
    table = wigner_table(3, base.alpha, base.beta, base.gamma)
    mlp = MLPNTK(FeatureConfig(band_limit=3, smearing_width=0.5, radial=GaussianBasis(n=6, r_cut=5.0)), arch)
    expected = sum(
        base.weights[i] * base.weights[j] * mlp.env_kernel(_rotate(x, table, i, 3), _rotate(x, table, j, 3))[1]
        for i in range(len(base))
        for j in range(len(base))
    )
    assert torch.allclose(got, expected, rtol=1e-12, atol=1e-12)
    assert torch.linalg.eigvalsh(got).min() > 0
