"""Environment feature maps (molntk.features.environments): configuration, coefficients
against direct computations, symmetries, batches and layouts."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from e3nn import o3
from scipy.special import eval_legendre

from molntk.data.molecule import Molecule
from molntk.errors import InputError
from molntk.features import (
    CoulombBasis,
    FeatureConfig,
    GaussianBasis,
    S2Grid,
    environment_features,
    padded_features,
    smearing_coefficients,
    vmf_density,
)
from molntk.features.environments import pair_indices
from molntk.kernels.so3.wigner import coeff_slices, wigner_blocks
from tests.helpers.features import random_molecule as _molecule, s2_integral as _s2_integral


GAUSS = FeatureConfig(band_limit=5, smearing_width=0.4, radial=GaussianBasis(n=6, r_cut=5.0))
COULOMB = FeatureConfig(band_limit=5, smearing_width=0.4, radial=CoulombBasis())
CONFIGS = [GAUSS, COULOMB, FeatureConfig(band_limit=3, smearing_width=None, radial=GaussianBasis(n=6, r_cut=5.0))]


# ---------------------------------------------------------------------------------------
# Configuration
# ---------------------------------------------------------------------------------------


def test_config_defaults_and_round_trip() -> None:
    cfg = FeatureConfig(smearing_width=0.5, radial=GaussianBasis(n=6, r_cut=5.0))
    assert cfg.elements == (1, 6, 7, 8, 9) and cfg.band_limit == 4 and cfg.smearing_width == 0.5
    assert cfg.radial == GaussianBasis(n=6, r_min=0.5, r_cut=5.0)
    assert cfg.radial.sigma == pytest.approx(0.9)
    assert cfg.n_channels == 30 and cfg.n_coeffs == 16
    assert cfg.channels[:7] == [(1, k) for k in range(6)] + [(6, 0)]
    for c in [cfg, *CONFIGS, FeatureConfig(elements=[6, 1], radial=GaussianBasis(n=1, width=0.3))]:
        assert FeatureConfig.from_dict(c.to_dict()) == c
    assert FeatureConfig.from_dict({"radial": {"kind": "coulomb", "powers": [1, 2, 6]}}).n_radial == 3


@pytest.mark.parametrize(
    "kwargs",
    [
        {"band_limit": 0},
        {"band_limit": 14},
        {"band_limit": 2.0},
        {"smearing_width": -0.1},
        {"smearing_width": float("nan")},
        {"elements": []},
        {"elements": [1, 1]},
        {"elements": [0]},
        {"elements": [119]},
        {"radial": "gaussian"},
    ],
)
def test_config_rejects_impossible_values(kwargs: dict) -> None:
    with pytest.raises(ValueError):
        FeatureConfig(**kwargs)


def test_config_from_dict_rejects_unknown_key() -> None:
    with pytest.raises(ValueError, match="band_limt"):
        FeatureConfig.from_dict({"band_limt": 4})


# ---------------------------------------------------------------------------------------
# Coefficients
# ---------------------------------------------------------------------------------------


def test_pair_indices_are_all_ordered_pairs_within_molecules() -> None:
    centre, neighbour = pair_indices(np.array([3, 1, 2]))
    expected = [(0, 1), (0, 2), (1, 0), (1, 2), (2, 0), (2, 1), (4, 5), (5, 4)]
    assert list(zip(centre.tolist(), neighbour.tolist())) == expected


def test_coefficients_of_small_molecule_match_direct_computation() -> None:
    """H–C–O: l ≤ 1 from explicit formulas (Y^0 = 1/√4π, Y^1 = √(3/4π) r̂), all l through the
    addition theorem Σ_m f̂^l_m f̂^l_m = s_l² (2l+1)/(4π) Σ_{b,b'} R_b R_b' P_l(r̂_b·r̂_b')."""
    pos = np.array([[0.0, 0.0, 0.0], [1.09, 0.0, 0.0], [-0.3, 1.3, 0.2]])
    mol = Molecule([6, 1, 8], pos)
    cfg = FeatureConfig(band_limit=6, smearing_width=0.4, radial=GaussianBasis(n=4, r_min=0.5, r_cut=3.0))
    f = environment_features(mol, cfg).coeffs.numpy()  # (3, 5·4, 36)
    s = smearing_coefficients(6, 0.4)
    mu, w = np.linspace(0.5, 3.0, 4), 2.5 / 3

    def radial(r: float) -> np.ndarray:
        return np.exp(-((r - mu) ** 2) / (2 * w * w)) * 0.5 * (np.cos(np.pi * r / 3.0) + 1)

    slot = {1: 0, 6: 1, 7: 2, 8: 3, 9: 4}
    for a in range(3):
        expected = np.zeros((5, 4, 4))  # (element, k, l ≤ 1 coefficient)
        units, radials, elems = [], [], []
        for b in range(3):
            if b == a:
                continue
            d = pos[b] - pos[a]
            r = np.linalg.norm(d)
            y01 = np.concatenate([[1 / math.sqrt(4 * math.pi)], math.sqrt(3 / (4 * math.pi)) * d / r])
            expected[slot[mol.numbers[b]]] += radial(r)[:, None] * (np.repeat(s[:2], [1, 3]) * y01)[None, :]
            units.append(d / r), radials.append(radial(r)), elems.append(slot[mol.numbers[b]])
        np.testing.assert_allclose(f[a, :, :4], expected.reshape(20, 4), rtol=0, atol=1e-14)
        for l, sl in enumerate(coeff_slices(6)):
            power = (f[a, :, sl] ** 2).sum(-1)
            direct = np.zeros(20)
            for ub, rb, eb in zip(units, radials, elems):
                for uc, rc, ec in zip(units, radials, elems):
                    if eb == ec:
                        direct[eb * 4 : eb * 4 + 4] += rb * rc * eval_legendre(l, ub @ uc)
            np.testing.assert_allclose(power, s[l] ** 2 * (2 * l + 1) / (4 * math.pi) * direct, rtol=0, atol=1e-14)


def test_coefficients_are_those_of_the_smeared_density() -> None:
    """f̂ equals the S² quadrature of f_c(x) = Σ_b R_k(r_ab) h_{r̂_ab}(x) (σ = 0.5: L = 13 loses < 1e-8)."""
    mol = _molecule(1, n=4)
    cfg = FeatureConfig(band_limit=13, smearing_width=0.5, radial=GaussianBasis(n=6, r_cut=5.0))
    f = environment_features(mol, cfg).coeffs.numpy()
    grid = S2Grid(13, n_theta=60, n_phi=120)
    for a in range(mol.n_atoms):
        density = np.zeros((cfg.n_channels,) + grid.weights.shape)
        for b in range(mol.n_atoms):
            d = mol.positions[b] - mol.positions[a]
            r = np.linalg.norm(d)
            if b == a or r >= 5.0:
                continue
            e = cfg.elements.index(mol.numbers[b])
            rad = cfg.radial(torch.tensor([r]), torch.zeros(1), torch.zeros(1)).numpy()[0]
            density[e * 6 : e * 6 + 6] += rad[:, None, None] * vmf_density(grid.points @ (d / r), 0.5)
        np.testing.assert_allclose(_s2_integral(grid, density), f[a], rtol=0, atol=1e-12)


@pytest.mark.parametrize("cfg", CONFIGS, ids=["gaussian", "coulomb", "unsmeared"])
def test_rotation_maps_coefficients_by_wigner_matrices(cfg: FeatureConfig) -> None:
    torch.manual_seed(0)
    mol = _molecule(2, n=8)
    f = environment_features(mol, cfg).coeffs
    for _ in range(3):
        rot = o3.rand_matrix(dtype=torch.float64)
        rotated = Molecule(mol.numbers, mol.positions @ rot.numpy().T)
        g = environment_features(rotated, cfg).coeffs
        blocks = wigner_blocks(cfg.band_limit, *o3.matrix_to_angles(rot))
        for d, sl in zip(blocks, coeff_slices(cfg.band_limit)):
            torch.testing.assert_close(g[..., sl], f[..., sl] @ d[0].T, rtol=0, atol=1e-12)


@pytest.mark.parametrize("cfg", CONFIGS[:2], ids=["gaussian", "coulomb"])
def test_translation_and_permutation_invariance(cfg: FeatureConfig) -> None:
    mol = _molecule(3, n=8)
    f = environment_features(mol, cfg).coeffs
    shifted = Molecule(mol.numbers, mol.positions + np.array([12.5, -3.0, 7.25]))
    torch.testing.assert_close(environment_features(shifted, cfg).coeffs, f, rtol=0, atol=1e-12)
    perm = np.random.default_rng(0).permutation(mol.n_atoms)
    permuted = Molecule(mol.numbers[perm], mol.positions[perm])
    batch = environment_features(permuted, cfg)
    torch.testing.assert_close(batch.coeffs, f[perm], rtol=0, atol=1e-12)
    assert batch.centre_numbers.tolist() == mol.numbers[perm].tolist()


@pytest.mark.parametrize("cfg", [GAUSS, COULOMB], ids=["gaussian", "coulomb"])
def test_features_in_pair_steps_equal_one_step_bit_for_bit(cfg: FeatureConfig, monkeypatch) -> None:
    """Steps of 7 pairs (cutting through molecules and cutoff-filtered pairs) add the same
    terms in the same order as one step over all pairs."""
    import molntk.features.environments as environments

    mols = [_molecule(seed, n=n) for seed, n in ((11, 6), (12, 1), (13, 9), (14, 4))]
    whole = environment_features(mols, cfg)
    monkeypatch.setattr(environments, "PAIR_CHUNK", 7)
    steps = environment_features(mols, cfg)
    assert torch.equal(steps.coeffs, whole.coeffs)
    assert torch.equal(steps.molecule_index, whole.molecule_index)


def test_neighbour_beyond_cutoff_contributes_nothing_and_map_is_continuous() -> None:
    cfg = FeatureConfig(smearing_width=0.5, radial=GaussianBasis(n=6, r_min=0.5, r_cut=4.0))
    base = [[0.0, 0.0, 0.0], [1.1, 0.0, 0.0]]

    def centre_coeffs(distance: float) -> torch.Tensor:
        mol = Molecule([6, 1, 8], base + [[0.0, distance, 0.0]])
        return environment_features(mol, cfg).coeffs[0]

    alone = environment_features(Molecule([6, 1], base), cfg).coeffs[0]
    oxygen = slice(3 * 6, 4 * 6)
    for distance in [4.0, 4.0 + 1e-12, 6.0, 50.0]:
        assert torch.equal(centre_coeffs(distance), alone)
    for eps in [1e-2, 1e-4, 1e-6]:  # fc(r_cut − ε) ≈ (πε/r_cut)²/4
        inside = centre_coeffs(4.0 - eps)
        jump = (inside - alone).abs().max().item()
        assert 0 < jump <= (math.pi * eps / 4.0) ** 2 / 4 * 1.01
        assert torch.equal(inside[:oxygen.start], alone[:oxygen.start])


def test_coulomb_channels() -> None:
    """l = 0 coefficients are Σ_b Z_a Z_b / r_ab^p · s_0 Y^0, per neighbour element; no cutoff."""
    pos = np.array([[0.0, 0.0, 0.0], [1.2, 0.0, 0.0], [0.0, 30.0, 0.0], [0.0, 0.0, -1.5]])
    mol = Molecule([8, 1, 6, 1], pos)
    cfg = FeatureConfig(smearing_width=0.3, radial=CoulombBasis(powers=(2.0, 6.0, 1.5)))
    f = environment_features(mol, cfg).coeffs.numpy()
    y0 = 1 / math.sqrt(4 * math.pi)
    dist = np.linalg.norm(pos[:, None] - pos[None], axis=-1)
    for a in range(4):
        for e, z in enumerate(cfg.elements):
            for k, p in enumerate(cfg.radial.powers):
                expected = sum(mol.numbers[a] * z / dist[a, b] ** p for b in range(4) if b != a and mol.numbers[b] == z)
                assert f[a, e * 3 + k, 0] == pytest.approx(expected * y0, rel=1e-14, abs=1e-300)


def test_element_outside_set_is_an_input_error() -> None:
    good = _molecule(4, n=3)
    bad = Molecule([6, 17, 1], [[0, 0, 0], [1.8, 0, 0], [-1.0, 0.2, 0]], id="chloro")
    with pytest.raises(InputError, match=r"chloro.*Cl"):
        environment_features([good, bad], FeatureConfig(smearing_width=0.5, radial=GaussianBasis(n=6, r_cut=5.0)))
    assert environment_features(bad, FeatureConfig(elements=[1, 6, 17], smearing_width=0.5, radial=GaussianBasis(n=6, r_cut=5.0))).coeffs.shape == (3, 18, 16)


def test_batch_equals_molecules_one_by_one() -> None:
    mols = [_molecule(5, n=6), Molecule([8], [[1.0, 2.0, 3.0]]), _molecule(6, n=9), _molecule(7, n=2)]
    batch = environment_features(mols, GAUSS)
    assert batch.n_molecules == 4 and batch.n_env == 18
    assert batch.molecule_index.tolist() == [0] * 6 + [1] + [2] * 9 + [3] * 2
    assert batch.atom_index.tolist() == list(range(6)) + [0] + list(range(9)) + [0, 1]
    single = torch.cat([environment_features(m, GAUSS).coeffs for m in mols])
    torch.testing.assert_close(batch.coeffs, single, rtol=0, atol=1e-14)
    assert torch.equal(batch.coeffs[6], torch.zeros(GAUSS.n_channels, GAUSS.n_coeffs, dtype=torch.float64))
    assert environment_features([], GAUSS).coeffs.shape == (0, 30, 25)


@pytest.mark.parametrize("cfg", CONFIGS[:2], ids=["gaussian", "coulomb"])
def test_float32_close_to_float64(cfg: FeatureConfig) -> None:
    mols = [_molecule(8, n=9), _molecule(9, n=5)]
    f64 = environment_features(mols, cfg).coeffs
    f32 = environment_features(mols, cfg, dtype=torch.float32).coeffs
    assert f32.dtype == torch.float32
    scale = f64.abs().max()
    assert ((f32.double() - f64).abs().max() / scale).item() < 1e-5


def test_padded_layout() -> None:
    mols = [_molecule(10, n=5), _molecule(11, n=3)]
    padded = padded_features(mols, GAUSS, n_atoms=6)
    batch = environment_features(mols, GAUSS)
    assert padded.coeffs.shape == (2, 6, 30, 25)
    assert padded.mask.tolist() == [[True] * 5 + [False], [True] * 3 + [False] * 3]
    torch.testing.assert_close(padded.coeffs[padded.mask], batch.coeffs, rtol=0, atol=0)
    assert torch.equal(padded.coeffs[~padded.mask], torch.zeros(4, 30, 25, dtype=torch.float64))
    assert padded.centre_numbers[1, :3].tolist() == mols[1].numbers.tolist() and padded.centre_numbers[1, 3:].tolist() == [0] * 3
    assert padded_features(mols, GAUSS).coeffs.shape == (2, 29, 30, 25)
    with pytest.raises(InputError, match="random-10"):
        padded_features(mols, GAUSS, n_atoms=4)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_cuda_matches_cpu(dtype: torch.dtype) -> None:
    mols = [_molecule(12, n=9), _molecule(13, n=4)]
    cpu = environment_features(mols, GAUSS, dtype=dtype)
    gpu = environment_features(mols, GAUSS, dtype=dtype, device="cuda")
    assert gpu.coeffs.device.type == "cuda" and gpu.atom_index.device.type == "cuda"
    tol = 1e-12 if dtype == torch.float64 else 1e-5
    torch.testing.assert_close(gpu.coeffs.cpu(), cpu.coeffs, rtol=0, atol=tol * cpu.coeffs.abs().max().item())
    padded = padded_features(mols, GAUSS, dtype=dtype, device="cuda")
    assert padded.coeffs.device.type == "cuda"


def test_coefficients_are_differentiable_in_given_positions() -> None:
    """``positions`` (a tensor) replaces the molecules' positions: the same coefficients, and
    autograd's gradient with respect to it passes gradcheck (central differences, float64)
    for a molecule with a neighbour inside and one outside the cutoff. A wrong shape is an error."""
    cfg = FeatureConfig(band_limit=3, smearing_width=0.4, radial=GaussianBasis(n=3, r_cut=3.0))
    mol = Molecule(np.array([6, 1, 8, 1]), np.array([[0.0, 0.0, 0.0], [1.1, 0.2, -0.1], [-0.3, 1.3, 0.4], [6.0, 0.0, 0.0]]))
    positions = torch.tensor(mol.positions, requires_grad=True)
    direct = environment_features([mol], cfg)
    given = environment_features([mol], cfg, positions=positions)
    torch.testing.assert_close(given.coeffs.detach(), direct.coeffs, rtol=0, atol=0)
    assert torch.autograd.gradcheck(lambda p: environment_features([mol], cfg, positions=p).coeffs, (positions,))
    with pytest.raises(ValueError, match=r"positions must have shape \(4, 3\)"):
        environment_features([mol], cfg, positions=positions[:3])
