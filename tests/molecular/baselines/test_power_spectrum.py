"""Power-spectrum kernel (molntk.molecular.baselines.power_spectrum): invariances, known values
on hand-built environments, the Haar mean of the squared lift kernel."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from molntk.data.molecule import Molecule
from molntk.features.environments import environment_features
from molntk.kernels.so3 import Dense, LayerNorm, Lift, Nonlinearity, Pool, SO3Grid, serial
from molntk.kernels.so3.network import SO3Network
from molntk.molecular import BlockKernelOf
from molntk.molecular.baselines import PowerSpectrumKernel, power_spectrum
from molntk.molecular.baselines.power_spectrum import _CHUNK
from molntk.scale import SerialExecutor, kernel_matrices
from tests.helpers.baselines import CONFIG, random_rotation, rotated


def test_power_spectrum_kernel_is_rotation_translation_and_permutation_invariant(molecules):
    kern = PowerSpectrumKernel(CONFIG)
    base = kern(molecules).kernel
    rng = np.random.default_rng(0)
    for seed in range(3):
        moved = [rotated(m, random_rotation(seed), rng.normal(size=3), rng.permutation(m.n_atoms)) for m in molecules]
        assert torch.allclose(kern(moved).kernel, base, rtol=0, atol=1e-12 * float(base.abs().max()))
        assert torch.allclose(kern(molecules, moved).kernel, base, rtol=0, atol=1e-12 * float(base.abs().max()))
    eig = torch.linalg.eigvalsh(base)
    assert float(eig.min()) > -1e-12 * float(eig.max())


def _radial(r: float, z_centre: int, z_neighbour: int) -> np.ndarray:
    t = lambda v: torch.tensor([float(v)], dtype=torch.float64)  # noqa: E731
    return CONFIG.radial(t(r), t(z_centre), t(z_neighbour))[0].numpy()


def _expected_power_spectrum(neighbours: list[tuple[int, np.ndarray]], z_centre: int) -> np.ndarray:
    """p of one environment from the addition theorem Σ_m Y^l_m(a) Y^l_m(b) = (2l+1)/(4π) P_l(a·b):
    p^l_{cc'} = s_l² (2l+1)/(4π)/√(2l+1) Σ_{b,b'} R_c(b) R_c'(b') P_l(r̂_b · r̂_b')."""
    n_rad, elements = CONFIG.n_radial, CONFIG.elements
    s = CONFIG.smearing_coefficients()
    radial = np.zeros((len(neighbours), CONFIG.n_channels))
    for i, (z, vec) in enumerate(neighbours):
        slot = elements.index(z)
        radial[i, slot * n_rad : (slot + 1) * n_rad] = _radial(np.linalg.norm(vec), z_centre, z)
    unit = np.array([vec / np.linalg.norm(vec) for _, vec in neighbours])
    rows, cols = np.triu_indices(CONFIG.n_channels)
    weight = np.where(rows == cols, 1.0, math.sqrt(2))
    parts = []
    for l in range(CONFIG.band_limit):
        legendre = np.polynomial.legendre.legval(np.clip(unit @ unit.T, -1, 1), [0] * l + [1])
        p = s[l] ** 2 * math.sqrt(2 * l + 1) / (4 * math.pi) * radial.T @ legendre @ radial
        parts.append(p[rows, cols] * weight)
    return np.concatenate(parts)


def test_power_spectrum_known_values_on_hand_built_environments():
    # C–H: each atom sees one neighbour; H2O: the O environment has two H at 104.5°.
    ch = Molecule([6, 1], [[0, 0, 0], [0.3, -0.5, 0.9]])
    theta = math.radians(104.5)
    water = Molecule([8, 1, 1], [[0, 0, 0], [0.96, 0, 0], [0.95 * math.cos(theta), 0.95 * math.sin(theta), 0]])
    p = power_spectrum(environment_features([ch, water], CONFIG).coeffs).numpy()
    d = ch.positions[1] - ch.positions[0]
    assert np.allclose(p[0], _expected_power_spectrum([(1, d)], 6), rtol=1e-12, atol=1e-15)
    assert np.allclose(p[1], _expected_power_spectrum([(6, -d)], 1), rtol=1e-12, atol=1e-15)
    expected_o = _expected_power_spectrum([(1, water.positions[1]), (1, water.positions[2])], 8)
    assert np.allclose(p[2], expected_o, rtol=1e-12, atol=1e-15)
    # normalised kernel of two one-neighbour environments: ((R·R')² / (|R|²|R'|²))^ζ, any directions
    kern = PowerSpectrumKernel(CONFIG, zeta=3)
    longer = Molecule([6, 1], [[0, 0, 0], [-1.3, 0.2, 0.4]])
    r, r2 = _radial(np.linalg.norm(d), 6, 1), _radial(np.linalg.norm(longer.positions[1]), 6, 1)
    k_c = (r @ r2) ** 2 / ((r @ r) * (r2 @ r2))
    r_h, r2_h = _radial(np.linalg.norm(d), 1, 6), _radial(np.linalg.norm(longer.positions[1]), 1, 6)
    k_h = (r_h @ r2_h) ** 2 / ((r_h @ r_h) * (r2_h @ r2_h))
    assert float(kern([ch], [longer]).kernel[0, 0]) == pytest.approx(k_c**3 + k_h**3, rel=1e-12)


def test_power_spectrum_is_the_haar_mean_of_the_squared_lift_kernel(envs):
    """Quadratic SO(3) network: pooled K = mean_u (|f|²|f'|² + 2⟨f, ρ(u) f'⟩²)/C² and the Haar
    mean of ⟨f, ρ(u) f'⟩² is p·p' (exact on a grid integrating degree 2(L−1))."""
    net = serial(Lift(CONFIG.band_limit), Nonlinearity("quadratic"), Pool(), Dense())
    pooled = net.kernel(envs, ctx=net.discretisation(SO3Grid(CONFIG.band_limit), "fast")).nngp
    p = power_spectrum(envs)
    sq = (envs * envs).sum((1, 2))
    expected = (sq[:, None] * sq[None, :] + 2 * p @ p.T) / envs.shape[1] ** 2
    assert torch.allclose(pooled, expected, rtol=1e-12, atol=0)


@pytest.mark.parametrize("closed_form", [True, False])
def test_normalised_power_spectrum_is_the_layer_normed_hermite_square(envs, closed_form, monkeypatch):
    """With a layer norm on the group, σ(x) = x² − 1 and a layer norm after the pool (no
    biases), the pooled kernel is 2 ∫ K(u)² du / (v v′) normalised: the correlation
    p̂·p̂′ of the power spectra, i.e. the ζ = 1 power-spectrum kernel (σ_w² times it after
    the dense layer), on the closed-form route and on the grid's quadrature; a unit-variance
    dense layer and σ again square it into 2 (p̂·p̂′)², the ζ = 2 kernel."""
    normed = (Lift(CONFIG.band_limit, 1.3, 0.0), LayerNorm(), Nonlinearity("hermite2"), Pool(), LayerNorm())
    zeta1, zeta2 = serial(*normed, Dense(1.7, 0.0)), serial(*normed, Dense(1.0, 0.0), Nonlinearity("hermite2"), Dense(1.7, 0.0))
    ctx = zeta1.discretisation(SO3Grid(CONFIG.band_limit), "fast")
    if not closed_form:
        monkeypatch.setattr(SO3Network, "pools_in_closed_form", lambda self, ctx: False)
    p = power_spectrum(envs)
    p = p / p.norm(dim=1, keepdim=True)
    assert torch.allclose(zeta1.kernel(envs, ctx=ctx).nngp, 1.7**2 * p @ p.T, rtol=1e-12, atol=1e-14)
    assert torch.allclose(zeta2.kernel(envs, ctx=ctx).nngp, 1.7**2 * 2 * (p @ p.T) ** 2, rtol=1e-12, atol=1e-14)


def test_single_atom_environment_has_zero_power_spectrum():
    kern = PowerSpectrumKernel(CONFIG)
    k = kern([Molecule([6], [[0, 0, 0]]), Molecule([6, 1], [[0, 0, 0], [1.1, 0, 0]])]).kernel
    assert torch.isfinite(k).all() and float(k[0, 0]) == 0.0 and float(k[1, 1]) == pytest.approx(2.0, rel=1e-14)


@pytest.mark.parametrize("block_size", [7, 1024])
def test_kernel_from_spectra_formed_per_block_is_the_pair_sum_of_normalised_spectra(molecules, block_size):
    """The kernel forms p̂ per block of atoms from the coefficients it holds; summed over same-element
    atom pairs it equals (p̂_a · p̂_b)^ζ of the spectra of every atom formed at once, by numpy."""
    feats = environment_features(molecules, CONFIG)
    p = power_spectrum(feats.coeffs).numpy()
    p /= np.linalg.norm(p, axis=1, keepdims=True)
    same = feats.centre_numbers.numpy()[:, None] == feats.centre_numbers.numpy()[None, :]
    incidence = np.zeros((len(molecules), len(p)))
    incidence[feats.molecule_index.numpy(), np.arange(len(p))] = 1.0
    expected = incidence @ (((p @ p.T) ** 3) * same) @ incidence.T
    got = PowerSpectrumKernel(CONFIG, zeta=3, block_size=block_size)(molecules).kernel.numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=0)


def test_power_spectra_over_several_chunks_equal_the_sum_over_m_by_numpy():
    """p^l_{cc'} = Σ_m f̂^l_{c,m} f̂^l_{c',m} / √(2l+1) (√2 on c < c'), by numpy per degree,
    for more environments than one chunk holds (the last chunk partial)."""
    n, n_chan, band_limit = 2 * _CHUNK + 7, 5, 3
    coeffs = torch.randn(n, n_chan, band_limit**2, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    f = coeffs.numpy()
    rows, cols = np.triu_indices(n_chan)
    weight = np.where(rows == cols, 1.0, math.sqrt(2.0))
    expected = np.concatenate([
        np.einsum("ncm,ndm->ncd", f[..., l * l : (l + 1) ** 2], f[..., l * l : (l + 1) ** 2])[:, rows, cols] * weight / math.sqrt(2 * l + 1)
        for l in range(band_limit)
    ], axis=1)
    np.testing.assert_allclose(power_spectrum(coeffs).numpy(), expected, rtol=1e-13, atol=1e-15)


def test_block_kernel_forms_a_row_blocks_spectra_once_for_all_its_blocks(molecules, monkeypatch):
    """Through the block engine the kernel equals the direct call; blocks taken row block by
    row block (the engine's order) form a row block's spectra once for all the blocks of its
    row, and a column block's each time: 2 row blocks × 3 column blocks, 2 + 6 preparations."""
    kernel = PowerSpectrumKernel(CONFIG, zeta=2)
    train, test = np.arange(6), np.arange(6, len(molecules))
    K = kernel_matrices(BlockKernelOf(kernel, molecules), train, test, block_size=2, executor=SerialExecutor())
    np.testing.assert_allclose(K["kernel_test"], kernel(molecules[6:], molecules[:6]).kernel.numpy(), rtol=1e-13, atol=0)

    formed = []
    compared = PowerSpectrumKernel.compared
    monkeypatch.setattr(PowerSpectrumKernel, "compared", lambda self, values: formed.append(len(values)) or compared(self, values))
    block_kernel = BlockKernelOf(kernel, molecules)
    for rows in (test[:2], test[2:]):
        for cols in np.split(train, 3):
            np.testing.assert_allclose(block_kernel.compute_block(rows, cols)["kernel"],
                                       K["kernel_test"][rows - 6][:, cols], rtol=1e-13, atol=0)
    assert len(formed) == 2 + 6  # 12 if every block formed both sides' spectra
