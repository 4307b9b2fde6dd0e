"""Derivative kernels of the molecular SO(3) NTK (molntk.molecular.derivative_kernels) on
ethanol frames of the committed MD sample: central finite differences (for both routes,
autograd and the closed form of molntk.molecular.pooled_derivatives), the empirical NTK of
finite networks' energies and forces (their wide limit), the symmetry of
swapping the molecules, rotation equivariance, translation invariance, and the assembled
joint matrix (the other tests use the default route: the closed form for this network).

Kernel: ``lift:3 erf pool dense`` on feature maps of H, C, O with 4 radial Gaussians on
[0.5, 3] Å, fast mode on a Lebedev grid of band limit 2 (a few tenths of a second per pair)
unless a test needs the quadrature accuracy of band limit 5.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from scipy.spatial.transform import Rotation

from molntk.data.labelled import read_labelled
from molntk.data.molecule import Molecule
from molntk.errors import InputError
from molntk.features.environments import FeatureConfig, environment_features
from molntk.features.radial import GaussianBasis
from molntk.models.so3_recipe import SO3ModelRecipe
from molntk.molecular import derivative_kernels
from molntk.molecular.derivative_kernels import derivative_rows, expansion_energy_and_gradient, joint_kernel
from molntk.scale.devices import torch_threads

pytestmark = pytest.mark.usefixtures("one_thread")

SAMPLE = Path(__file__).resolve().parents[2] / "data" / "md" / "ethanol_sample.extxyz"
FEATURES = FeatureConfig(elements=(1, 6, 8), radial=GaussianBasis(n=4, r_min=0.5, r_cut=3.0))


def kernel(grid_band_limit: int = 2):
    return SO3ModelRecipe(grid_band_limit=grid_band_limit, features=FEATURES).molecular_kernel()


@pytest.fixture(scope="module")
def frames() -> list[Molecule]:
    return read_labelled(SAMPLE, "energy").molecules


def moved(molecule: Molecule, positions: np.ndarray) -> Molecule:
    return Molecule(molecule.numbers, positions, id=molecule.id)


@pytest.mark.parametrize("method", ["autograd", "closed-form"])
def test_first_derivatives_are_central_differences(frames, method):
    """∂Θ/∂r' and ∂Θ/∂r against (Θ(r + h e) − Θ(r − h e)) / 2h for all 27 coordinates of each
    side, h = 1e-4 Å. Truncation h²/6 |∂³Θ| ≈ 1e-8/6 · |∂Θ| / (0.3 Å)² ≈ 2e-8 relative (Θ varies
    on the ≈ 0.3 Å scale of the radial Gaussians); rounding ε |Θ| / h ≈ 1e-16 · 200 / 1e-4 =
    2e-10 against |∂Θ| ≈ 3. Measured ≈ 5e-9 relative to max |∂Θ|; bound 1e-6, while a wrong
    term of the chain rule is an O(1) error."""
    k, a, b = kernel(), frames[0], frames[7]
    rows = derivative_rows(k, a, [b], method=method)

    h = 1e-4
    steps = [sign * h * np.eye(27)[j].reshape(9, 3) for j in range(27) for sign in (1, -1)]
    on_query = k([moved(a, a.positions + e) for e in steps], [b]).ntk[:, 0].numpy().reshape(27, 2)
    on_ref = k([a], [moved(b, b.positions + e) for e in steps]).ntk[0].numpy().reshape(27, 2)
    num_query, num_ref = (on_query[:, 0] - on_query[:, 1]) / (2 * h), (on_ref[:, 0] - on_ref[:, 1]) / (2 * h)
    assert rows.theta[0] == pytest.approx(float(k([a], [b]).ntk[0, 0]), rel=1e-12)
    assert np.abs(rows.d_ref).max() > 0.1
    assert np.abs(rows.d_ref - num_ref).max() < 1e-6 * np.abs(rows.d_ref).max()
    assert np.abs(rows.d_query[:, 0] - num_query).max() < 1e-6 * np.abs(rows.d_query).max()


@pytest.mark.parametrize("method", ["autograd", "closed-form"])
def test_mixed_derivatives_are_central_differences(frames, method):
    """∂²Θ/∂r_i∂r' against central differences in r_i of the (checked) first derivative ∂Θ/∂r',
    h = 1e-4 Å, for 6 query coordinates on different atoms, each against all 27 of the other
    molecule. Same error budget as the first derivatives (measured ≤ 5e-9 relative to
    max |∂²Θ|); bound 1e-6."""
    k, a, b = kernel(), frames[3], frames[40]
    rows = derivative_rows(k, a, [b], method=method)
    h = 1e-4
    scale = np.abs(rows.mixed).max()
    assert scale > 0.1
    for i in (0, 5, 10, 15, 20, 26):
        e = np.zeros(27)
        e[i] = h
        e = e.reshape(9, 3)
        plus = derivative_rows(k, moved(a, a.positions + e), [b], second=False, method=method).d_ref
        minus = derivative_rows(k, moved(a, a.positions - e), [b], second=False, method=method).d_ref
        assert np.abs((plus - minus) / (2 * h) - rows.mixed[i]).max() < 1e-6 * scale


def empirical_joint_ntk(network, ctx, molecules: list[Molecule], width: int, seed: int) -> np.ndarray:
    """Θ̂ = J Jᵀ of one draw of finite networks (``network.finite`` at ``width``, one per element,
    parameters N(0, 1) from ``seed``), J the Jacobian with respect to all their parameters of the
    outputs [E(M_1) … E(M_N), F(M_1) … F(M_N)], E(M) = Σ_a N_{Z_a}(env_a(r)) and F = −∂E/∂r
    through the feature maps (autograd; a force does not depend on the output bias, whose
    gradient is then zero): the finite twin of :func:`joint_kernel`."""
    torch.manual_seed(seed)
    shape = tuple(environment_features(molecules[:1], FEATURES).coeffs.shape[1:])
    nets = {z: network.finite(shape, width, ctx).double() for z in FEATURES.elements}
    params = [p for net in nets.values() for p in net.parameters()]
    energies, forces = [], []
    for molecule in molecules:
        r = torch.tensor(molecule.positions, requires_grad=True)
        feats = environment_features([molecule], FEATURES, positions=r)
        energy = sum(nets[z](feats.coeffs[feats.centre_numbers == z]).sum() for z in FEATURES.elements)
        (gradient,) = torch.autograd.grad(energy, r, create_graph=True)
        energies.append(energy)
        forces.extend(-gradient.reshape(-1))
    jacobian = torch.stack([torch.cat([g.reshape(-1) for g in torch.autograd.grad(y, params, retain_graph=True,
                                                                           materialize_grads=True)])
                            for y in energies + forces])
    return (jacobian @ jacobian.T).detach().numpy()


@pytest.mark.slow
def test_joint_kernel_is_the_wide_limit_of_the_finite_networks_energy_force_ntk(frames):
    """The derivative kernels against the empirical NTK of finite networks' energies and forces
    (:func:`empirical_joint_ntk`, an independent computation: parameters, the network's forward
    pass and autograd through the feature maps; no kernel recursion). The kernel in exact mode is
    the finite network's on the grid's nodes (Lebedev, band limit 1), so Θ̂ → Θ as width → ∞,
    each entry's error ∝ width^(−1/2). Two frames, the EE, EF and FF blocks of the 56-square
    joint matrix each by ‖Θ̂ − Θ‖_F / ‖Θ‖_F, median over 6 seeds. Measured (first network):
    0.09 / 0.37 / 0.19 at width 64 and 0.005 / 0.042 / 0.020 at 4,096, ratios 18 / 8.9 / 9.8
    (8 for width^(−1/2)); the median of 6 spreads by ≈ 15 % (seed-to-seed variation ≈ 0.35,
    tests/kernels/so3/test_network.py), so each ratio must exceed 4 (8 less two spreads on
    each median) and the widest errors stay below 0.08 (the largest measured, 0.042, plus
    three spreads of it and a margin); a sign or layout error in a block is an O(1) error
    at every width. Both routes (closed form and autograd) against the same draws; deeper
    networks take the autograd route, checked against finite differences above (their
    finite twins' Jacobians at width 4,096 exceed this machine's memory: a dense layer on
    the group, 56 outputs × 17M parameters)."""
    k = SO3ModelRecipe(grid_band_limit=1, mode="exact", features=FEATURES).molecular_kernel()
    molecules = [frames[0], frames[30]]
    joints = [joint_kernel(k, molecules, method=method) for method in ("closed-form", "autograd")]
    n = len(molecules)
    blocks = {"EE": np.s_[:n, :n], "EF": np.s_[:n, n:], "FF": np.s_[n:, n:]}
    medians = {}
    for width in (64, 4096):
        draws = [empirical_joint_ntk(k.network, k.ctx, molecules, width, seed) for seed in range(6)]
        medians[width] = [{name: float(np.median([np.linalg.norm(d[b] - J[b]) / np.linalg.norm(J[b]) for d in draws]))
                           for name, b in blocks.items()} for J in joints]
    for narrow, wide in zip(medians[64], medians[4096]):
        for name in blocks:
            assert narrow[name] / wide[name] > 4, medians
            assert wide[name] < 0.08, medians


@pytest.mark.parametrize("layers", ["lift:3 erf dense erf pool dense", "lift:3 erf pool dense layernorm quadratic dense"])
def test_deeper_networks_derivatives_are_central_differences(frames, layers):
    """Networks outside the closed form take the autograd route, whose second pass
    differentiates a recorded backward: a nonlinearity after a dense layer on the group, and
    a layer-normed quadratic head after the pool (both need the self-kernels' gradients).
    ∂Θ/∂r' (from the second-derivative pass) against central differences of Θ for all 27
    coordinates, ∂²Θ/∂r_i∂r' against central differences of ∂Θ/∂r' for 3 query coordinates;
    h = 1e-4 Å, the error budget of the tests above: measured 4e-9 to 8e-9 relative, bound 1e-6
    (a recorded backward that counted the variance paths twice gave 0.07 and 1.05)."""
    k = SO3ModelRecipe(layers=layers, sigma_w=1.5, sigma_b=0.5, grid_band_limit=2, features=FEATURES).molecular_kernel()
    a, b = frames[2], frames[9]
    rows = derivative_rows(k, a, [b], method="autograd")
    h = 1e-4
    steps = [sign * h * np.eye(27)[j].reshape(9, 3) for j in range(27) for sign in (1, -1)]
    on_ref = k([a], [moved(b, b.positions + e) for e in steps]).ntk[0].numpy().reshape(27, 2)
    assert np.abs(rows.d_ref - (on_ref[:, 0] - on_ref[:, 1]) / (2 * h)).max() < 1e-6 * np.abs(rows.d_ref).max()
    scale = np.abs(rows.mixed).max()
    for i in (1, 13, 25):
        e = h * np.eye(27)[i].reshape(9, 3)
        plus = derivative_rows(k, moved(a, a.positions + e), [b], second=False, method="autograd").d_ref
        minus = derivative_rows(k, moved(a, a.positions - e), [b], second=False, method="autograd").d_ref
        assert np.abs((plus - minus) / (2 * h) - rows.mixed[i]).max() < 1e-6 * scale


def test_swapping_the_molecules_transposes_the_blocks(frames):
    """Cov(F_a, F'_b) = Cov(F'_b, F_a)ᵀ and Cov(F, E') of (M, M') = Cov(E, F') of (M', M),
    as far as Θ(M, M') = Θ(M', M). On the band-limit-2 grid the quadrature is symmetric
    (measured 2e-15: rounding; bound 1e-12); on band limit 5 the fast-mode recursion is
    symmetric only to its accuracy (measured 1.1e-5; bound 1e-4)."""
    a, b = frames[0], frames[7]
    for k, bound in ((kernel(2), 1e-12), (kernel(5), 1e-4)):
        ab, ba = derivative_rows(k, a, [b]), derivative_rows(k, b, [a])
        scale = np.abs(ab.mixed).max()
        assert np.abs(ba.mixed - ab.mixed.T).max() < bound * scale
        assert np.abs(ba.d_query[:, 0] - ab.d_ref).max() < bound * np.abs(ab.d_ref).max()


def test_force_blocks_rotate_with_the_molecules(frames):
    """Rotating M by R and M' by R': Cov(F_a, F'_b) → R Cov(F_a, F'_b) R'ᵀ and Cov(E, F'_b) → Cov(E, F'_b) R'ᵀ,
    to the accuracy of the SO(3) quadrature. Measured (max error / max entry): band limit 5
    2.1e-5 (F–F) and 8e-7 (E–F); band limit 2 0.11 and 8e-3. Bounds: 2e-4 and 1e-5 on band
    limit 5, and the band-limit-2 F–F error above 1e-2 (the error is the quadrature's and
    shrinks with the grid, it is no bug in the transformation)."""
    a, b = frames[0], frames[7]
    rot, rot2 = Rotation.random(random_state=0).as_matrix(), Rotation.random(random_state=1).as_matrix()
    errors = {}
    for band in (2, 5):
        k = kernel(band)
        plain = derivative_rows(k, a, [b])
        turned = derivative_rows(k, moved(a, a.positions @ rot.T), [moved(b, b.positions @ rot2.T)])
        expect = np.einsum("ij,ajbk,lk->aibl", rot, plain.mixed.reshape(9, 3, 9, 3), rot2)
        ff = np.abs(turned.mixed.reshape(9, 3, 9, 3) - expect).max() / np.abs(plain.mixed).max()
        ef = np.abs(turned.d_ref.reshape(9, 3) - plain.d_ref.reshape(9, 3) @ rot2.T).max() / np.abs(plain.d_ref).max()
        errors[band] = (ff, ef)
    assert errors[5][0] < 2e-4 and errors[5][1] < 1e-5
    assert errors[2][0] > 1e-2


def test_force_covariances_sum_to_zero_over_atoms(frames):
    """Θ depends on positions only through differences r_b − r_a, so Σ_a ∂Θ/∂r_a = 0 and
    Σ_a ∂²Θ/∂r_a∂r'_b = 0 (each side): exact in exact arithmetic, to rounding here (measured
    ≤ 1e-15 relative; bound 1e-12)."""
    rows = derivative_rows(kernel(), frames[0], frames[5:8])
    mixed = rows.mixed.reshape(9, 3, 3, 9, 3)  # query atom, xyz, reference molecule, its atom, xyz
    sums = {
        "E-F' over the reference atoms": (rows.d_ref.reshape(3, 9, 3).sum(axis=1), rows.d_ref),
        "F-E' over the query atoms": (rows.d_query.reshape(9, 3, 3).sum(axis=0), rows.d_query),
        "F-F' over the query atoms": (mixed.sum(axis=0), mixed),
        "F-F' over the reference atoms": (mixed.sum(axis=3), mixed),
    }
    for name, (total, block) in sums.items():
        scale = np.abs(block).max()
        assert scale > 0.1, name
        assert np.abs(total).max() < 1e-12 * scale, name


def test_joint_kernel_assembles_the_rows(frames):
    """The symmetric joint matrix (pairs computed once, mirrored) equals the one from the
    unsymmetric call (every pair from its row) up to the grid's Θ(M, M') − Θ(M', M)
    (rounding on band limit 2: bound 1e-12), is symmetric, and has the blocks of
    :func:`derivative_rows` with the covariance signs: [[Θ, −∂Θ/∂r'], [−∂Θ/∂r, ∂²Θ/∂r∂r']].
    Also: the expansion's energy and gradient equal the rows contracted with its coefficients."""
    k, mols = kernel(), frames[10:13]
    sym, full = joint_kernel(k, mols), joint_kernel(k, mols, mols)
    n = 3 + 81
    assert sym.shape == full.shape == (n, n)
    scale = np.abs(full).max()
    np.testing.assert_allclose(sym, full, rtol=0, atol=1e-12 * scale)
    np.testing.assert_allclose(sym, sym.T, rtol=0, atol=1e-12 * scale)
    rows = derivative_rows(k, mols[1], mols)
    np.testing.assert_allclose(full[1, :3], rows.theta, rtol=1e-13)
    np.testing.assert_allclose(full[1, 3:], -rows.d_ref, rtol=0, atol=1e-13 * scale)
    np.testing.assert_allclose(full[3 + 27 : 3 + 54, :3], -rows.d_query, rtol=0, atol=1e-13 * scale)
    np.testing.assert_allclose(full[3 + 27 : 3 + 54, 3:], rows.mixed, rtol=0, atol=1e-13 * scale)
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=3), rng.normal(size=81)
    value, grad = expansion_energy_and_gradient(k, mols[1], mols, a, b)
    assert value == pytest.approx(rows.theta @ a + rows.d_ref @ b, rel=1e-12)
    np.testing.assert_allclose(grad.reshape(-1), rows.d_query @ a + rows.mixed @ b, rtol=0, atol=1e-12 * np.abs(grad).max())


@pytest.mark.parametrize("method", ["closed-form", "autograd"])
def test_rows_computed_side_by_side_on_two_threads_equal_one_threads(frames, method):
    """The molecules' rows of a block are computed on two Python threads when torch has two
    (:func:`~molntk.scale.devices.map_over_threads`): the joint kernel, symmetric and against
    others, equals the one computed on one thread, where only the summation order inside
    torch's operations can differ (bound 1e-13 of the largest entry)."""
    k, mols = kernel(), frames[20:25]
    with torch_threads(1):
        one = joint_kernel(k, mols, method=method), joint_kernel(k, mols[:2], mols[2:], method=method)
    with torch_threads(2):
        two = joint_kernel(k, mols, method=method), joint_kernel(k, mols[:2], mols[2:], method=method)
    for a, b in zip(one, two):
        np.testing.assert_allclose(b, a, rtol=0, atol=1e-13 * np.abs(a).max())


@pytest.mark.parametrize("against", [None, (5, 7)], ids=["symmetric", "against-others"])
def test_joint_kernel_resumes_from_its_block_cache(frames, tmp_path, monkeypatch, against):
    """With ``cache_dir`` the joint matrix of 5 molecules, symmetric (blocks of 2: rows of
    molecules {0, 1}, {2, 3}, {4} against those after them) or against 2 others (the frames
    model's N × m rows: each block's rows against all of them), equals the uncached one to
    rounding (the same computation; BLAS may round differently from call to call: bound 1e-13
    of the largest entry); a computation killed in its second block resumes with the last two
    blocks; a later call reads every block (exactly the stored float64 values) and computes no
    row; other molecules (or other others, or the symmetric matrix) find none of those blocks."""
    monkeypatch.setattr(derivative_kernels, "CACHED_MOLECULES", 2)
    k, mols = kernel(), frames[:5]
    others = None if against is None else frames[slice(*against)]
    plain = joint_kernel(k, mols, others)
    computed, kill_at = [], [2]  # the first row of the second block
    real_rows = derivative_kernels.closed_form_rows

    def counted(kernel_, query, references, **kw):
        if len(computed) in kill_at:
            kill_at.clear()
            raise RuntimeError("killed")
        computed.append(query)
        return real_rows(kernel_, query, references, **kw)

    monkeypatch.setattr(derivative_kernels, "closed_form_rows", counted)
    with pytest.raises(RuntimeError, match="killed"):
        joint_kernel(k, mols, others, cache_dir=tmp_path)
    assert len(list(tmp_path.glob("*/*.npz"))) == 1
    computed.clear()
    resumed = joint_kernel(k, mols, others, cache_dir=tmp_path)
    assert len(computed) == 3 and resumed.shape == plain.shape  # molecules 2, 3, 4
    np.testing.assert_allclose(resumed, plain, rtol=0, atol=1e-13 * np.abs(plain).max())
    computed.clear()
    np.testing.assert_array_equal(joint_kernel(k, mols, others, cache_dir=tmp_path), resumed)
    assert computed == []
    if others is None:
        joint_kernel(k, frames[1:6], cache_dir=tmp_path)
        assert len(computed) == 5
    else:
        joint_kernel(k, mols, cache_dir=tmp_path)
        joint_kernel(k, mols, frames[6:8], cache_dir=tmp_path)
        assert len(computed) == 10


def test_joint_kernel_makes_the_query_tangents_a_block_at_a_time(frames, monkeypatch):
    """Against others (the frames model's N × m rows) the query molecules' tangent maps are
    made CACHED_MOLECULES at a time (here 2: {0, 1}, {2, 3}, {4}), each once, the others' once,
    so the N molecules' maps are never held together; the rows equal those of one block of all
    5 (the same arithmetic per molecule; bound 1e-13 of the largest entry, BLAS rounding)."""
    k, mols, others = kernel(), frames[:5], frames[5:7]
    monkeypatch.setattr(derivative_kernels, "CACHED_MOLECULES", 5)
    whole = joint_kernel(k, mols, others)
    made, real = [], derivative_kernels.tangent_features
    monkeypatch.setattr(derivative_kernels, "tangent_features", lambda k_, ms: made.append(list(ms)) or real(k_, ms))
    monkeypatch.setattr(derivative_kernels, "CACHED_MOLECULES", 2)
    blocked = joint_kernel(k, mols, others)
    assert made == [list(others), mols[0:2], mols[2:4], mols[4:5]]
    np.testing.assert_allclose(blocked, whole, rtol=0, atol=1e-13 * np.abs(whole).max())


def test_joint_kernel_reports_its_blocks(frames, tmp_path, monkeypatch):
    """``progress(done, total)`` once the stored blocks are read and after each block of rows
    (blocks of 2 of 5 molecules: 3): 0 … 3 computed; a resumed computation starts at the
    blocks it read (1, killed in the second block), a stored matrix reports 3 of 3 at once."""
    monkeypatch.setattr(derivative_kernels, "CACHED_MOLECULES", 2)
    k, mols = kernel(), frames[:5]
    calls: list[tuple[int, int]] = []
    joint_kernel(k, mols, progress=lambda done, total: calls.append((done, total)))
    assert calls == [(0, 3), (1, 3), (2, 3), (3, 3)]
    real_rows, computed = derivative_kernels.closed_form_rows, []

    def killed_in_the_second_block(kernel_, query, references, **kw):
        computed.append(query)
        if len(computed) == 3:
            raise RuntimeError("killed")
        return real_rows(kernel_, query, references, **kw)

    monkeypatch.setattr(derivative_kernels, "closed_form_rows", killed_in_the_second_block)
    calls.clear()
    with pytest.raises(RuntimeError, match="killed"):
        joint_kernel(k, mols, cache_dir=tmp_path, progress=lambda done, total: calls.append((done, total)))
    assert calls == [(0, 3), (1, 3)]
    monkeypatch.setattr(derivative_kernels, "closed_form_rows", real_rows)
    calls.clear()
    joint_kernel(k, mols, cache_dir=tmp_path, progress=lambda done, total: calls.append((done, total)))
    assert calls == [(1, 3), (2, 3), (3, 3)]
    calls.clear()
    joint_kernel(k, mols, cache_dir=tmp_path, progress=lambda done, total: calls.append((done, total)))
    assert calls == [(3, 3)]


def test_bad_inputs_name_the_argument(frames):
    k = kernel()
    with pytest.raises(InputError, match="references"):
        derivative_rows(k, frames[0], [])
    with pytest.raises(InputError, match="kernel"):
        derivative_rows(SO3ModelRecipe(grid_band_limit=2, features=FEATURES, dtype="float32").molecular_kernel(), frames[0], frames[1:2])
    with pytest.raises(InputError, match="molecules"):
        joint_kernel(k, [])


def test_the_pass_that_completes_the_cache_skips_the_stored_blocks(frames, tmp_path, monkeypatch):
    """``joint_blocks(..., stored=False)`` (blocks of 2 of 5 molecules: {0, 1}, {2, 3}, {4})
    reads and yields no stored block: with all stored it yields nothing and reports 3 of 3;
    with the middle block's file removed it computes and yields that block alone, equal to
    the stored one to rounding (BLAS may round differently between calls: bound 1e-13)."""
    monkeypatch.setattr(derivative_kernels, "CACHED_MOLECULES", 2)
    k, mols = kernel(), frames[:5]
    whole = {a: block for a, _, block in derivative_kernels.joint_blocks(k, mols, cache_dir=tmp_path)}
    reports = []
    assert list(derivative_kernels.joint_blocks(k, mols, cache_dir=tmp_path, stored=False,
                                                progress=lambda *r: reports.append(r))) == []
    assert reports == [(3, 3)]
    cache = derivative_kernels.joint_block_cache(tmp_path, k, mols, closed=True)
    cache.path(np.arange(2, 4), np.arange(2, 5)).unlink()
    again = list(derivative_kernels.joint_blocks(k, mols, cache_dir=tmp_path, stored=False))
    assert [(a, b) for a, b, _ in again] == [(2, 4)]
    np.testing.assert_allclose(again[0][2], whole[2], rtol=0, atol=1e-13 * np.abs(whole[2]).max())
