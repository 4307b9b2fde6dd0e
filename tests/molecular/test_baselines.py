"""Baseline kernels: closed forms against finite networks and quadrature, the augmented MLP
against the SO(3) GCNN, exact invariances, hand-checked values, brute-force assembly."""

from __future__ import annotations

import math
import sys

import numpy as np
import pytest
import torch
from e3nn import o3
from scipy import integrate

from molntk.molecular.baselines import (
    MLPNTK,
    AugmentedMLPNTK,
    BagOfBonds,
    CoulombMatrix,
    DScribeSOAPKernel,
    FCHL19Kernel,
    LaplacianKernel,
    MLPArchitecture,
    PowerSpectrumKernel,
    RotationSet,
    l1_distances,
    median_l1_width,
    mlp_kernels,
    power_spectrum,
    wigner_table,
)
from molntk.data.molecule import Molecule
from molntk.errors import InputError
from molntk.features.environments import FeatureConfig, environment_features
from molntk.features.radial import GaussianBasis
from molntk.kernels.empirical import empirical_ntk, monte_carlo_nngp
from molntk.kernels.so3 import Dense, Lift, Nonlinearity, Pool, SO3Grid, serial
from molntk.kernels.so3.wigner import coeff_slices, flatten_blocks, wigner_blocks

CONFIG = FeatureConfig(band_limit=3, smearing_width=0.5, radial=GaussianBasis(n=6, r_cut=5.0))
BOHR = 0.52917721067  # Å (ase.units.Bohr, CODATA 2014)


@pytest.fixture(scope="module")
def molecules(qm9) -> list[Molecule]:
    """Nine small QM9 molecules (H, C, N, O; 3–9 atoms)."""
    return qm9.molecules(range(0, 9))


@pytest.fixture(scope="module")
def envs(molecules) -> torch.Tensor:
    """Twelve distinct real environments (every other atom of the first molecules)."""
    return environment_features(molecules, CONFIG).coeffs[::3][:12]


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """These tests are many small tensor ops: one thread is fastest, and on a shared machine
    torch's spinning worker threads can make them several times slower."""
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


def rotated(m: Molecule, R: np.ndarray, shift: np.ndarray | None = None, perm: np.ndarray | None = None) -> Molecule:
    perm = np.arange(m.n_atoms) if perm is None else perm
    shift = np.zeros(3) if shift is None else shift
    return Molecule(m.numbers[perm], m.positions[perm] @ R.T + shift)


def random_rotation(seed: int) -> np.ndarray:
    g = torch.Generator().manual_seed(seed)
    scale = torch.tensor([2 * math.pi, math.pi, 2 * math.pi], dtype=torch.float64)
    angles = torch.rand(3, generator=g, dtype=torch.float64) * scale
    return o3.angles_to_matrix(*angles).numpy()


# --- MLP NTK ---------------------------------------------------------------------------


@pytest.mark.parametrize("activation", ["relu", "erf"])
def test_mlp_ntk_is_the_limit_of_empirical_ntks(envs, activation):
    """Θ̂ of a finite network fluctuates around Θ with relative size O(width^(-1/2)) (constant
    ≈ 1–3 measured here): at width 1024 every draw is within 4/√1024 = 0.125, and going from
    width 64 to 1024 (√16 = 4 expected) the mean error falls by more than 2."""
    kern = MLPNTK(CONFIG, MLPArchitecture(2, activation, 1.2, 0.3))
    _, ntk = kern.env_kernel(envs)

    def errors(width: int) -> list[float]:
        out = []
        for seed in range(3):
            torch.manual_seed(seed)
            theta = empirical_ntk(kern.finite(envs.shape[1], envs.shape[2], width), envs)
            out.append(float((theta - ntk).norm() / ntk.norm()))
        return out

    narrow, wide = errors(64), errors(1024)
    assert max(wide) < 4 / math.sqrt(1024)
    assert np.mean(narrow) > 2 * np.mean(wide)


@pytest.mark.parametrize("depth", [1, 2])
def test_mlp_nngp_is_the_monte_carlo_covariance(envs, depth):
    """E[f(x) f(x')] over random networks. Depth 1: the estimator is unbiased at any width
    (the readout is linear in Gaussian weights given the hidden layer), so only Monte Carlo
    error remains: 5 standard errors. Depth 2 adds an O(1/width) bias, allowed as 2/width."""
    kern = MLPNTK(CONFIG, MLPArchitecture(depth, "relu", 1.2, 0.3))
    nngp, _ = kern.env_kernel(envs[:6])
    width = 128
    mc, se = monte_carlo_nngp(lambda: kern.finite(envs.shape[1], envs.shape[2], width), envs[:6], n_samples=1500, seed=depth)
    bias = 0.0 if depth == 1 else 2 / width * float(nngp.abs().max())
    assert torch.all((mc - nngp).abs() <= 5 * se + bias)


def _gaussian_expectation(g, k11: float, k22: float, k12: float) -> float:
    """E[g(u, v)], (u, v) centred Gaussian, by quadrature in polar coordinates of the whitened
    pair (z1, z2): u = √k11 z1, v = √k22 (ρ z1 + √(1−ρ²) z2), breakpoints where u or v changes sign."""
    rho = k12 / math.sqrt(k11 * k22)
    s = math.sqrt(1 - rho * rho)

    def radial(phi: float) -> float:
        a = math.sqrt(k11) * math.cos(phi)
        b = math.sqrt(k22) * (rho * math.cos(phi) + s * math.sin(phi))
        return integrate.quad(lambda r: g(r * a, r * b) * r * math.exp(-r * r / 2), 0, np.inf, epsabs=1e-13, epsrel=1e-12)[0]

    phi_b = math.atan2(-rho, s) % (2 * math.pi)
    points = sorted({math.pi / 2, 3 * math.pi / 2, phi_b, (phi_b + math.pi) % (2 * math.pi)})
    return integrate.quad(radial, 0, 2 * math.pi, points=points, epsabs=1e-12, epsrel=1e-11, limit=200)[0] / (2 * math.pi)


@pytest.mark.parametrize("activation", ["relu", "erf"])
def test_one_layer_closed_form_matches_numerical_integration(envs, activation):
    sw, sb = 1.3, 0.4
    funcs = {
        "relu": (lambda x: max(x, 0.0), lambda x: float(x > 0)),
        "erf": (math.erf, lambda x: 2 / math.sqrt(math.pi) * math.exp(-x * x)),
    }
    sigma, dsigma = funcs[activation]
    x = envs[:3]
    v = x.reshape(3, -1)
    k1 = sw**2 / x.shape[1] * v @ v.T + sb**2
    var = torch.diagonal(k1)
    nngp, ntk = mlp_kernels(k1, var[:, None], var[None, :], depth=1, activation=activation, sigma_w=sw, sigma_b=sb)
    for i, j in [(0, 1), (0, 2), (1, 2)]:
        a, b, c = float(var[i]), float(var[j]), float(k1[i, j])
        f = _gaussian_expectation(lambda u, w: sigma(u) * sigma(w), a, b, c)
        fdot = _gaussian_expectation(lambda u, w: dsigma(u) * dsigma(w), a, b, c)
        assert float(nngp[i, j]) == pytest.approx(sw**2 * f + sb**2, rel=1e-9)
        assert float(ntk[i, j]) == pytest.approx(sw**2 * f + sb**2 + sw**2 * c * fdot, rel=1e-9)


def test_mlp_ntk_is_not_rotation_invariant(molecules):
    """The plain MLP sees orientations: rotating molecules changes its kernel (unlike the others)."""
    kern = MLPNTK(CONFIG)
    R = random_rotation(3)
    base = kern(molecules[6:]).ntk
    turned = kern(molecules[6:], [rotated(m, R) for m in molecules[6:]]).ntk
    assert float((turned - base).abs().max() / base.abs().max()) > 1e-3


# --- rotation-augmented MLP NTK → SO(3) GCNN ----------------------------------------------


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


# --- element-resolved pair sums --------------------------------------------------------


def _brute_force(kern, molecules_a, molecules_b, index: int) -> torch.Tensor:
    da, db = kern.describe(molecules_a), kern.describe(molecules_b)
    k = kern.env_kernel(da.values, db.values)[index]
    out = torch.zeros(len(molecules_a), len(molecules_b), dtype=torch.float64)
    for a in range(da.values.shape[0]):
        for b in range(db.values.shape[0]):
            if kern.pairing == "shared" or da.centre_numbers[a] == db.centre_numbers[b]:
                out[da.molecule_index[a], db.molecule_index[b]] += k[a, b]
    return out


@pytest.mark.parametrize("pairing", ["element", "shared"])
@pytest.mark.parametrize("block_size", [4, 1000])
@pytest.mark.parametrize(
    "make",
    [
        lambda p, b: MLPNTK(CONFIG, MLPArchitecture(2, "erf", 1.0, 0.1), pairing=p, block_size=b),
        lambda p, b: AugmentedMLPNTK(CONFIG, rotations=RotationSet.random(3), pairing=p, block_size=b),
        lambda p, b: PowerSpectrumKernel(CONFIG, zeta=3, pairing=p, block_size=b),
    ],
    ids=["mlp", "augmented", "power-spectrum"],
)
def test_pair_sums_equal_brute_force(molecules, make, pairing, block_size):
    kern = make(pairing, block_size)
    index = 1 if isinstance(kern, (MLPNTK, AugmentedMLPNTK)) else 0
    expected = _brute_force(kern, molecules, molecules, index)
    sym = kern(molecules)[kern.outputs[index]]
    cross = kern(molecules[:4], molecules[4:])[kern.outputs[index]]
    assert torch.allclose(sym, expected, rtol=1e-12, atol=1e-12)
    assert torch.allclose(cross, expected[:4, 4:], rtol=1e-12, atol=1e-12)


def test_features_once_and_environment_batches_are_accepted(molecules):
    """Precomputed descriptors, the SO(3) kernel's EnvironmentBatch and molecules agree; mean reduction."""
    kern = MLPNTK(CONFIG)
    feats = kern.describe(molecules)
    batch = environment_features(molecules, CONFIG)
    a = kern(molecules)
    assert torch.equal(kern(feats).ntk, a.ntk) and torch.equal(kern(batch).nngp, a.nngp)
    n = torch.tensor([m.n_atoms for m in molecules], dtype=torch.float64)
    mean = MLPNTK(CONFIG, reduce="mean")(feats).ntk
    assert torch.allclose(mean, a.ntk / n[:, None] / n[None, :], rtol=1e-14)
    ps = PowerSpectrumKernel(CONFIG)
    assert torch.equal(ps(ps.describe(molecules)).kernel, ps(batch).kernel)
    with pytest.raises(ValueError, match="pairing"):
        MLPNTK(CONFIG, pairing="atom-index")


# --- power spectrum ----------------------------------------------------------------------


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


def test_single_atom_environment_has_zero_power_spectrum():
    kern = PowerSpectrumKernel(CONFIG)
    k = kern([Molecule([6], [[0, 0, 0]]), Molecule([6, 1], [[0, 0, 0], [1.1, 0, 0]])]).kernel
    assert torch.isfinite(k).all() and float(k[0, 0]) == 0.0 and float(k[1, 1]) == pytest.approx(2.0, rel=1e-14)


# --- Coulomb matrix, Bag of Bonds, Laplacian kernel -----------------------------------


def test_coulomb_matrix_of_h2_and_hf_by_hand():
    h2 = Molecule([1, 1], [[0, 0, 0], [0, 0, 0.74]])
    cm = CoulombMatrix(n_max=3)(h2)[0].numpy()  # lower triangle of the 3×3 padded matrix
    assert np.allclose(cm, [0.5, 1 / 0.74, 0.5, 0, 0, 0], rtol=1e-15)
    bohr = CoulombMatrix(n_max=2, length_unit="bohr")(h2)[0].numpy()
    assert np.allclose(bohr, [0.5, BOHR / 0.74, 0.5], rtol=1e-9)
    hf = Molecule([1, 9], [[0, 0, 0], [0.92, 0, 0]])  # F has the larger row norm: it goes first
    assert np.allclose(CoulombMatrix(n_max=2)(hf)[0].numpy(), [0.5 * 9**2.4, 9 / 0.92, 0.5], rtol=1e-15)
    bob = BagOfBonds()(h2)[0].numpy()
    sizes = [bag.size for bag in BagOfBonds().bags]
    assert bob.size == sum(sizes) and sizes[:2] == [20, 190]  # H atoms, H–H pairs first
    assert np.allclose(bob[:2], [0.5, 0.5]) and bob[20] == pytest.approx(1 / 0.74, rel=1e-15)
    assert np.count_nonzero(bob) == 3


@pytest.mark.parametrize("descriptor", [CoulombMatrix(), BagOfBonds()], ids=["cm", "bob"])
def test_descriptors_are_permutation_rotation_and_translation_invariant(molecules, descriptor):
    """Includes the exactly symmetric C₂H₂, where only the CM's tie-break keeps the order canonical."""
    assert "C2H2" in {m.formula for m in molecules}
    base = descriptor(molecules)
    rng = np.random.default_rng(1)
    for seed in range(3):
        moved = [rotated(m, random_rotation(seed), rng.normal(size=3) * 5, rng.permutation(m.n_atoms)) for m in molecules]
        assert torch.allclose(descriptor(moved), base, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("descriptor", [CoulombMatrix(), BagOfBonds()], ids=["cm", "bob"])
def test_laplacian_kernels_are_symmetric_psd_with_median_width(qm9, descriptor):
    mols = qm9.molecules(range(0, 60))
    feats = descriptor(mols)
    kern = LaplacianKernel.with_median_width(descriptor, mols)
    d = l1_distances(feats)
    rows, cols = np.triu_indices(len(mols), 1)
    assert kern.sigma == pytest.approx(float(np.median(d.numpy()[rows, cols])), rel=1e-15)
    k = kern(kern.describe(mols)).kernel
    assert torch.equal(k, k.T) and torch.all(torch.diagonal(k) == 1)
    assert float(torch.linalg.eigvalsh(k).min()) > -1e-12
    brute = torch.exp(-(feats[:5, None, :] - feats[None, 5:9, :]).abs().sum(-1) / kern.sigma)
    assert torch.allclose(kern(mols[:5], mols[5:9]).kernel, brute, rtol=1e-13)
    assert kern.name == f"{descriptor.name}-laplacian"


def test_descriptor_limits_are_input_errors(qm9):
    big = qm9.molecules([int(np.argmax(qm9.n_atoms))])
    with pytest.raises(InputError, match="do not fit"):
        CoulombMatrix(n_max=10)(big)
    with pytest.raises(InputError, match="bag size"):
        BagOfBonds(max_counts={1: 2, 6: 9, 7: 7, 8: 5, 9: 6})(big)
    with pytest.raises(InputError, match="Cl"):
        BagOfBonds()(Molecule([17, 1], [[0, 0, 0], [1.3, 0, 0]]))
    with pytest.raises(ValueError, match="two descriptors"):
        median_l1_width(torch.zeros(1, 3))


def test_qm9_max_counts_hold_for_all_of_qm9(qm9):
    """The default bag sizes fit every QM9 molecule (checked without building descriptors)."""
    BagOfBonds()._check_counts(qm9.molecules(np.argsort(-qm9.n_atoms)[:2000]))
    mol = np.repeat(np.arange(len(qm9)), qm9.n_atoms)
    for z, limit in BagOfBonds().max_counts.items():
        assert np.bincount(mol[qm9.numbers == z], minlength=len(qm9)).max() == limit


def test_cm_and_bob_match_qmllib(molecules):
    """Same descriptors as qmllib's (entry order aside, so compare all L1 distances). The CM
    comparison leaves out C₂H₂, whose exact symmetry qmllib's plain row-norm sort resolves by
    input order (ours is canonical there: see the invariance test)."""
    reps = pytest.importorskip("qmllib.representations")
    asymmetric = [m for m in molecules if m.formula != "C2H2"]
    ours = CoulombMatrix()(asymmetric)
    theirs = torch.tensor(np.array([reps.generate_coulomb_matrix(m.numbers, m.positions, size=29) for m in asymmetric]))
    assert torch.allclose(l1_distances(ours), l1_distances(theirs), rtol=1e-12, atol=1e-10)
    asize = {"H": 20, "C": 9, "N": 7, "O": 5, "F": 6}
    ours = BagOfBonds()(molecules)
    theirs = torch.tensor(np.array([reps.generate_bob(m.numbers, m.positions, None, size=29, asize=asize) for m in molecules]))
    assert ours.shape == theirs.shape
    assert torch.allclose(l1_distances(ours), l1_distances(theirs), rtol=1e-12, atol=1e-10)


# --- optional packages ------------------------------------------------------------------


@pytest.mark.parametrize(("make", "module"), [(DScribeSOAPKernel, "dscribe"), (lambda: FCHL19Kernel(2.0), "qmllib")])
def test_missing_optional_packages_raise_a_clear_error(monkeypatch, molecules, make, module):
    for name in [n for n in sys.modules if n == module or n.startswith(module + ".")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, module, None)  # makes `import module` fail
    with pytest.raises(ImportError, match=r"molntk\[baselines\]"):
        make()(molecules[:2])


def test_fchl19_kernel_matches_qmllib_local_kernel(molecules):
    pytest.importorskip("qmllib")
    from qmllib.kernels import get_local_kernel, get_local_symmetric_kernel
    from qmllib.representations import generate_fchl19

    kern = FCHL19Kernel(sigma=2.5, block_size=7)
    reps = np.array([generate_fchl19(m.numbers, m.positions, elements=[1, 6, 7, 8, 9], pad=29) for m in molecules])
    charges = [m.numbers for m in molecules]
    assert np.allclose(kern(molecules).kernel.numpy(), get_local_symmetric_kernel(reps, charges, 2.5), rtol=1e-12)
    cross = get_local_kernel(reps[:4], reps[4:], charges[:4], charges[4:], 2.5)  # qmllib returns (N2, N1)
    assert np.allclose(kern(molecules[:4], molecules[4:]).kernel.numpy(), cross.T, rtol=1e-12)


def test_dscribe_soap_kernel_is_invariant_and_normalised(molecules):
    pytest.importorskip("dscribe")
    kern = DScribeSOAPKernel(r_cut=4.0, n_max=3, l_max=3)
    base = kern(molecules).kernel
    moved = [rotated(m, random_rotation(5), np.ones(3), np.random.default_rng(2).permutation(m.n_atoms)) for m in molecules]
    assert torch.allclose(kern(moved).kernel, base, rtol=1e-10, atol=1e-10)
    counts = torch.tensor([sum(int((m.numbers == z).sum()) ** 2 for z in (1, 6, 7, 8)) for m in molecules], dtype=torch.float64)
    assert torch.all(torch.diagonal(base) <= counts + 1e-12)  # Σ_Z n_Z² pairs, each ≤ 1
