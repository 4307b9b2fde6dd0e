"""The FCHL19 force fields (molntk/models/fchl19_force_field.py), exact and on inducing atoms, on
the committed ethanol sample (GFN2-xTB, eV, eV/Å): their kernels and rows against finite
differences of the plain FCHL19 kernel, their fits against dense solves built from those,
forces against the gradient of the energy, rotations, the searches, the inducing atoms,
held-out accuracy and bad input."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from scipy.spatial.distance import cdist
from scipy.spatial.transform import Rotation

from molntk.data.labelled import read_labelled
from molntk.data.molecule import Molecule
from molntk.errors import InputError
from molntk.models.fchl19_force_field import (
    FCHL19ForceField,
    SparseFCHL19ForceField,
    _Atoms,
    _Basis,
    _Reps,
    basis_kernel,
    basis_rows,
    energy_kernel,
    query_kernel,
    training_kernel,
)

pytest.importorskip("qmllib", reason="the FCHL19 force field needs the optional package qmllib (molntk[baselines])")
from qmllib.kernels import get_gp_kernel, get_symmetric_gp_kernel  # noqa: E402
from qmllib.representations import generate_fchl19  # noqa: E402

SAMPLE = Path(__file__).resolve().parents[2] / "data" / "md" / "ethanol_sample.extxyz"
ELEMENTS = (1, 6, 8)


@pytest.fixture(scope="module")
def frames():
    data = read_labelled(SAMPLE, ["energy"], forces=True)
    return data.molecules, np.asarray(data.targets["energy"]), data.forces


#: Every fifth frame (50 fs apart) trains; 20 of the others test (predicting forces costs
#: a Hessian block per test × training frame).
TRAIN = np.arange(0, 100, 5)
TEST = np.arange(2, 100, 5)
SIGMAS, LAMBDAS = (2.0, 8.0, 32.0), (1e-8, 1e-5)


@pytest.fixture(scope="module")
def fitted(frames):
    molecules, energies, forces = frames
    return FCHL19ForceField(sigmas=SIGMAS, lambdas=LAMBDAS).fit(
        [molecules[i] for i in TRAIN], energies[TRAIN], [forces[i] for i in TRAIN])


@pytest.fixture(scope="module")
def sparse(frames):
    molecules, energies, forces = frames
    return SparseFCHL19ForceField(inducing=60, sigmas=(1.0, 4.0, 16.0)).fit(
        [molecules[i] for i in TRAIN], energies[TRAIN], [forces[i] for i in TRAIN])


# ----------------------------------------------------------------------------- an independent kernel

def fd_kernel(rows: list[Molecule], cols: list[Molecule], sigma: float, h: float) -> np.ndarray:
    """The joint energy/force kernel in qmllib's layout (energies, then each molecule's forces
    atom by atom, x y z) from nothing but FCHL19 vectors (no gradients) and the plain local
    kernel Σ_ij [Z_i = Z_j] exp(−‖q_i − q_j‖²/2σ²) computed here: central differences in
    the positions, cov(E, F) = −∂k/∂r', cov(F, F) = ∂²k/∂r∂r'."""

    def perturbed(molecules):
        out, base, plus, minus = [], [], [], []
        for m in molecules:
            base.append(len(out))
            out.append(m)
            for c in range(3 * m.n_atoms):
                for sign, where in ((1, plus), (-1, minus)):
                    positions = m.positions.copy()
                    positions.flat[c] += sign * h
                    where.append(len(out))
                    out.append(Molecule(m.numbers, positions))
        return out, np.array(base), np.array(plus), np.array(minus)

    def atoms(molecules):
        q = np.concatenate([generate_fchl19(m.numbers, m.positions, elements=list(ELEMENTS)) for m in molecules])
        z = np.concatenate([m.numbers for m in molecules])
        owner = np.repeat(np.arange(len(molecules)), [m.n_atoms for m in molecules])
        return q, z, np.eye(len(molecules))[owner]  # (atoms, molecules) indicator

    (a, a0, ap, am), (b, b0, bp, bm) = perturbed(rows), perturbed(cols)
    (qa, za, ia), (qb, zb, ib) = atoms(a), atoms(b)
    k_atoms = np.exp(-cdist(qa, qb, "sqeuclidean") / (2 * sigma**2)) * (za[:, None] == zb[None, :])
    k = ia.T @ k_atoms @ ib  # molecule × molecule
    ee = k[np.ix_(a0, b0)]
    ef = -(k[np.ix_(a0, bp)] - k[np.ix_(a0, bm)]) / (2 * h)
    fe = -(k[np.ix_(ap, b0)] - k[np.ix_(am, b0)]) / (2 * h)
    ff = (k[np.ix_(ap, bp)] - k[np.ix_(ap, bm)] - k[np.ix_(am, bp)] + k[np.ix_(am, bm)]) / (4 * h * h)
    return np.block([[ee, ef], [fe, ff]])


def test_the_kernels_are_finite_differences_of_the_plain_local_kernel(frames):
    """qmllib's joint kernels (training, query × training, the energy rows) against central
    differences (h = 1e-3 Å) of the plain kernel; one training molecule has a hydrogen less
    (8 atoms: the padding of molecules of different sizes). The second difference errs by
    h²/12 · ∂⁴k (≈ 1e-6 of the largest entry, measured: ~3e-7) and by round-off
    ε · k / h² ≈ 1e-16 · 40 / 1e-6 ≈ 4e-9: tolerance 1e-5 of the largest entry."""
    molecules = frames[0]
    fragment = Molecule(molecules[40].numbers[:-1].copy(), molecules[40].positions[:-1].copy())
    train, query = [molecules[0], fragment, molecules[60]], [molecules[20], molecules[80]]
    sigma = 4.0
    train_reps, query_reps = _Reps(train, ELEMENTS), _Reps(query, ELEMENTS)
    expected = fd_kernel(train, train, sigma, 1e-3)
    np.testing.assert_allclose(training_kernel(train_reps, sigma), expected, rtol=0, atol=1e-5 * np.abs(expected).max())
    cross = fd_kernel(query, train, sigma, 1e-3)
    np.testing.assert_allclose(query_kernel(train_reps, query_reps, sigma), cross, rtol=0,
                               atol=1e-5 * np.abs(cross).max())
    np.testing.assert_allclose(energy_kernel(train_reps, query_reps, sigma), cross[:2], rtol=0,
                               atol=1e-5 * np.abs(cross[:2]).max())


def test_a_fit_with_one_sigma_and_lambda_is_the_dense_solve_of_the_finite_difference_kernel(frames):
    """y = [E − Ē; F] (the forces, not −F: qmllib's gradient blocks are covariances with the
    forces), (K + λ mean(diag K) I) c = y by a dense LU solve of the finite-difference kernel,
    then [E*; F*] = K_* c + Ē. The kernels agree to ~1e-8 relative (σ = 8, h = 1e-3 Å), the
    condition of K + λI is ~1e6 at λ = 1e-4 relative: measured 8e-6 eV and 5e-5 eV/Å apart;
    tolerances 1e-3 of the energies' spread and of the largest force (labels −F instead of F
    move the forces by ~5 eV/Å)."""
    molecules, energies, forces = frames
    train, query = [0, 25, 50, 75], [10, 90]
    sigma, lam = 8.0, 1e-4
    model = FCHL19ForceField(sigmas=(sigma,), lambdas=(lam,)).fit(
        [molecules[i] for i in train], energies[train], [forces[i] for i in train])
    assert model.sigma_ == sigma and model.reg_relative_ == lam and model.sigma_at_grid_edge_ is None
    K = fd_kernel([molecules[i] for i in train], [molecules[i] for i in train], sigma, 1e-3)
    K = (K + K.T) / 2
    mean = energies[train].mean()
    y = np.concatenate([energies[train] - mean] + [forces[i].ravel() for i in train])
    coef = np.linalg.solve(K + lam * np.mean(np.diag(K)) * np.eye(len(K)), y)
    pred = fd_kernel([molecules[i] for i in query], [molecules[i] for i in train], sigma, 1e-3) @ coef
    e, f = model.predict_forces([molecules[i] for i in query], return_energy=True)
    spread = np.ptp(energies)
    np.testing.assert_allclose(e, pred[:2] + mean, rtol=0, atol=1e-3 * spread)
    np.testing.assert_allclose(np.concatenate(f).ravel(), pred[2:], rtol=0, atol=1e-3 * np.abs(pred[2:]).max())
    np.testing.assert_allclose(model.dressed_atom_.predict([[6, 2, 1]]), [mean], rtol=1e-12)  # = the mean here


# ----------------------------------------------------------------------------- the fitted model

@pytest.fixture(scope="module")
def conditioned(frames):
    """One (σ, λ) that keeps the coefficients moderate (|c| ≲ 1e3, Σ|k c| ≈ 1e5 eV for an
    energy): at (8, 1e-8) they reach 5e5 and an energy is a sum of ±1e8 eV terms, whose
    float64 round-off (≈ 1e-8 eV) no finite difference resolves to 1e-5 eV/Å."""
    molecules, energies, forces = frames
    return FCHL19ForceField(sigmas=(2.0,), lambdas=(1e-5,)).fit(
        [molecules[i] for i in TRAIN], energies[TRAIN], [forces[i] for i in TRAIN])


@pytest.mark.parametrize("name", ["conditioned", "sparse"])
def test_forces_are_minus_the_gradient_of_the_predicted_energy(name, request, frames):
    """Central differences of ``predict`` (the exact model's energy rows come from qmllib's local
    and local gradient kernels, its forces from its GP kernel's Hessian block; the sparse
    model's from the local and atomic gradient kernels): h = 1e-4 Å; truncation h²/6 · ∂³E
    (measured at h = 1e-3 Å: 3e-5, so ≈ 3e-7 eV/Å here), round-off ε · Σ|k c| / h
    ≈ 2e-16 · 1e5 eV / 1e-4 Å ≈ 2e-7 eV/Å; tolerance 1e-5 eV/Å (the forces are ~1 eV/Å)."""
    model = request.getfixturevalue(name)
    molecule = frames[0][TEST[3]]
    forces = model.predict_forces([molecule])[0]
    h, shifted = 1e-4, []
    for c in range(3 * molecule.n_atoms):
        for sign in (1, -1):
            positions = molecule.positions.copy()
            positions.flat[c] += sign * h
            shifted.append(Molecule(molecule.numbers, positions))
    e = model.predict(shifted).reshape(-1, 2)
    numeric = (-(e[:, 0] - e[:, 1]) / (2 * h)).reshape(-1, 3)
    np.testing.assert_allclose(forces, numeric, rtol=0, atol=1e-5)


@pytest.mark.parametrize("name", ["conditioned", "sparse"])
def test_forces_rotate_with_the_molecule_and_the_energy_does_not_change(name, request, frames):
    """FCHL19 is invariant, its gradients covariant: F(Rx) = R F(x) up to round-off
    (ε · Σ|k c| ≈ 1e-11)."""
    molecule = frames[0][TEST[5]]
    R = Rotation.random(random_state=3).as_matrix()
    rotated = Molecule(molecule.numbers, molecule.positions @ R.T)
    (e, e_rot), (f, f_rot) = request.getfixturevalue(name).predict_forces([molecule, rotated], return_energy=True)
    np.testing.assert_allclose(f_rot, f @ R.T, rtol=0, atol=1e-8)
    assert abs(e_rot - e) < 1e-8


def test_the_search_picks_the_grid_minimum_and_an_entry_recomputes_independently(fitted, frames):
    """The (σ, λ) with the lowest criterion is chosen; the entry (8, 1e-5) again from qmllib's
    kernels, this test's own split (seed 0, 4 of 20 held out) and a dense LU solve."""
    assert set(fitted.search_) == {(s, lam) for s in SIGMAS for lam in LAMBDAS}
    assert fitted.search_[fitted.sigma_, fitted.reg_relative_] == min(fitted.search_.values())
    assert fitted.sigma_at_grid_edge_ == (fitted.sigma_ in (2.0, 32.0))
    assert fitted.reg_at_grid_edge_ is True  # two values: both are edges
    molecules, energies, forces = frames
    order = np.random.default_rng(0).permutation(len(TRAIN))
    val, rest = TRAIN[order[:4]], TRAIN[order[4:]]

    def reps(rows):
        pairs = [generate_fchl19(molecules[i].numbers, molecules[i].positions, elements=[1, 6, 8], gradients=True)
                 for i in rows]
        return np.array([p[0] for p in pairs]), np.array([p[1] for p in pairs]), [molecules[i].numbers for i in rows]

    (x, dx, q), (xv, dxv, qv) = reps(rest), reps(val)
    K = get_symmetric_gp_kernel(x, dx, q, 8.0)
    mean = energies[rest].mean()
    y = np.concatenate([energies[rest] - mean] + [forces[i].ravel() for i in rest])
    coef = np.linalg.solve(K + 1e-5 * np.mean(np.diag(K)) * np.eye(len(K)), y)
    pred = get_gp_kernel(x, xv, dx, dxv, q, qv, 8.0) @ coef
    f_val = np.concatenate([forces[i].ravel() for i in val])
    criterion = (np.mean((pred[:4] + mean - energies[val]) ** 2) / np.mean((energies[val] - mean) ** 2)
                 + np.mean((pred[4:] - f_val) ** 2) / np.mean(f_val**2))
    assert fitted.search_[8.0, 1e-5] == pytest.approx(criterion, rel=1e-6)


@pytest.mark.parametrize("name, bound", [("fitted", 0.2), ("sparse", 0.5)])
def test_it_predicts_held_out_frames_far_better_than_their_mean_and_zero_forces(name, bound, request, frames):
    """A model that learned nothing predicts the training mean and zero forces (ratio 1 here);
    from 20 frames the exact model reaches a tenth of those errors or less, the sparse one
    (60 inducing atoms) a third for the energies and a fifth for the forces (measured 0.33 and
    0.22): bounds 0.2 and 0.5. ``predict`` computes the energy rows by other qmllib routines
    than ``predict_forces``: equal up to the round-off of the exact model's ±1e8 eV sums (1e-8)."""
    model = request.getfixturevalue(name)
    molecules, energies, forces = frames
    e, f = model.predict_forces([molecules[i] for i in TEST], return_energy=True)
    true_f = np.stack([forces[i] for i in TEST])
    assert np.abs(e - energies[TEST]).mean() < bound * np.abs(energies[TEST] - energies[TRAIN].mean()).mean()
    assert np.abs(np.stack(f) - true_f).mean() < bound * np.abs(true_f).mean()
    np.testing.assert_allclose(model.predict([molecules[i] for i in TEST]), e, rtol=0, atol=1e-6)


# ----------------------------------------------------------------------------- the sparse model

def fd_rows(molecules: list[Molecule], s: np.ndarray, z: np.ndarray, sigma: float, h: float) -> np.ndarray:
    """[K_E; K_F] of ``molecules`` against atoms with FCHL19 vectors s (m, d) and numbers z from
    nothing but FCHL19 vectors (no gradients) and the plain kernel [Z_i = Z_j] exp(−‖q_i − s_j‖²/2σ²)
    computed here: energy rows Σ_{i∈x} k(q_i, s_j), force rows −∂/∂r of them by central differences."""

    def energy_row(numbers, positions):
        q = generate_fchl19(numbers, positions, elements=list(ELEMENTS))
        return (np.exp(-cdist(q, s, "sqeuclidean") / (2 * sigma**2)) * (numbers[:, None] == z[None, :])).sum(0)

    energies, forces = [], []
    for m in molecules:
        energies.append(energy_row(m.numbers, m.positions))
        for c in range(3 * m.n_atoms):
            plus, minus = m.positions.copy(), m.positions.copy()
            plus.flat[c] += h
            minus.flat[c] -= h
            forces.append(-(energy_row(m.numbers, plus) - energy_row(m.numbers, minus)) / (2 * h))
    return np.vstack(energies + forces)


def test_rows_and_basis_kernel_are_the_plain_kernel_and_its_finite_differences(frames):
    """qmllib's local and atomic gradient kernels against the plain kernel and central
    differences (h = 1e-3 Å: truncation h²/6 · ∂³k ≈ 1e-7 of the largest entry, round-off
    ε · k / h ≈ 1e-12); one molecule has a hydrogen less (zero padding). Tolerance 1e-5 of the
    largest entry; the sign (a covariance with the forces, −∂/∂r) is what the fit's labels need.
    The force rows computed a molecule or two at a time (``chunk``) are those of one call: each
    molecule's rows are the same sums in the same order (rtol 1e-12)."""
    molecules = frames[0]
    fragment = Molecule(molecules[40].numbers[:-1].copy(), molecules[40].positions[:-1].copy())
    train = [molecules[0], fragment, molecules[60]]
    reps = _Reps(train, ELEMENTS)
    basis = _Basis.pick(_Atoms.of(reps), 10, "random", 3)
    s, z = basis.X[:, 0], np.concatenate(basis.Q)
    assert sorted(set(z.tolist())) == [1, 6, 8]  # every element gets inducing atoms
    sigma = 4.0
    expected = fd_rows(train, s, z, sigma, 1e-3)
    rows = basis_rows(basis, reps, sigma)
    assert rows.shape == (3 + 3 * (9 + 8 + 9), 10)
    np.testing.assert_allclose(rows, expected, rtol=0, atol=1e-5 * np.abs(expected).max())
    np.testing.assert_allclose(basis_rows(basis, reps, sigma, forces=False), rows[:3], rtol=1e-12, atol=0)
    whole = basis_rows(basis, reps, sigma, chunk=3)
    for chunk in (1, 2):
        np.testing.assert_allclose(basis_rows(basis, reps, sigma, chunk=chunk), whole, rtol=1e-12, atol=0)
    plain = np.exp(-cdist(s, s, "sqeuclidean") / (2 * sigma**2)) * (z[:, None] == z[None, :])
    np.testing.assert_allclose(basis_kernel(basis, sigma), plain, rtol=1e-12, atol=1e-14)


def test_a_fit_at_fixed_noise_is_the_dense_least_squares_solve_of_its_objective(frames):
    """Every atom of 4 frames inducing, fixed λ_E, λ_F: w = argmin Σ (y − K w)²/λ + wᵀ K_mm w,
    solved here as one dense least-squares problem on the finite-difference rows,
    ‖[Λ^{-1/2} K; Lᵀ] w − [Λ^{-1/2} y; 0]‖² with K_mm = L Lᵀ, y = [E − Ē; F] (the forces
    themselves). The rows agree to ~1e-8 relative, the problem's condition number is ≈ 1e4
    (λ_E = 1e-4, λ_F = 1e-3 against K_mm's spectrum): predictions agree to ~1e-6; tolerances
    1e-4 of the energies' spread and of the largest force (labels −F move the forces by ~1 eV/Å)."""
    molecules, energies, forces = frames
    train, query = [0, 25, 50, 75], [10, 90]
    sigma, lam_e, lam_f = 4.0, 1e-4, 1e-3
    mols = [molecules[i] for i in train]
    model = SparseFCHL19ForceField(inducing=100, sigmas=(sigma,), reg_energy=lam_e, reg_force=lam_f).fit(
        mols, energies[train], [forces[i] for i in train])
    assert model.n_inducing_ == 36 and model.rank_ == 36 and model.cv_score_ is None and model.sigma_ == sigma
    s, z = model.basis_.X[:, 0], np.concatenate(model.basis_.Q)
    K = fd_rows(mols, s, z, sigma, 1e-3)
    K_mm = np.exp(-cdist(s, s, "sqeuclidean") / (2 * sigma**2)) * (z[:, None] == z[None, :])
    mean = energies[train].mean()
    y = np.concatenate([energies[train] - mean] + [forces[i].ravel() for i in train])
    lam = np.where(np.arange(len(y)) < len(train), lam_e, lam_f)
    stacked = np.vstack([K / np.sqrt(lam)[:, None], np.linalg.cholesky(K_mm).T])
    w = np.linalg.lstsq(stacked, np.concatenate([y / np.sqrt(lam), np.zeros(len(K_mm))]), rcond=None)[0]
    pred = fd_rows([molecules[i] for i in query], s, z, sigma, 1e-3) @ w
    e, f = model.predict_forces([molecules[i] for i in query], return_energy=True)
    np.testing.assert_allclose(e, pred[:2] + mean, rtol=0, atol=1e-4 * np.ptp(energies))
    np.testing.assert_allclose(np.concatenate(f).ravel(), pred[2:], rtol=0, atol=1e-4 * np.abs(pred[2:]).max())
    np.testing.assert_allclose(model.dressed_atom_.predict([[6, 2, 1]]), [mean], rtol=1e-12)  # = the mean here


def test_the_search_keeps_the_sigma_of_lowest_criterion_and_its_fit(sparse, frames):
    """σ of the lowest grouped-LOO criterion; the model is that σ's fit (the criterion at the
    chosen σ with its λ's again from a fit with that σ alone); 60 inducing atoms in proportion
    to the elements (180 atoms of 20 frames: 120 H, 40 C, 20 O → 40, 13, 7 by largest remainders)."""
    assert set(sparse.search_) == {1.0, 4.0, 16.0}
    assert sparse.cv_score_ == min(sparse.search_.values()) == sparse.search_[sparse.sigma_]
    assert sparse.sigma_at_grid_edge_ == (sparse.sigma_ in (1.0, 16.0))
    counts = np.bincount(np.concatenate(sparse.basis_.Q), minlength=9)
    assert (counts[1], counts[6], counts[8]) == (40, 13, 7)
    molecules, energies, forces = frames
    alone = SparseFCHL19ForceField(inducing=60, sigmas=(sparse.sigma_,)).fit(
        [molecules[i] for i in TRAIN], energies[TRAIN], [forces[i] for i in TRAIN])
    assert alone.cv_score_ == pytest.approx(sparse.cv_score_, rel=1e-10)
    np.testing.assert_allclose(alone.inducing_weights_, sparse.inducing_weights_, rtol=1e-8, atol=0)


# ----------------------------------------------------------------------------- input

def test_bad_input_is_refused_naming_it(fitted, frames):
    molecules, energies, forces = frames
    X, E, F = molecules[:5], energies[:5], forces[:5]
    one = dict(sigmas=(8.0,), lambdas=(1e-6,))
    cases = [
        (dict(sigmas=(-1.0,)), (X, E, F), "sigmas"),
        (dict(sigmas=()), (X, E, F), "sigmas"),
        (dict(sigmas=(np.nan, 2.0)), (X, E, F), "sigmas"),
        (dict(sigmas=("wide",)), (X, E, F), "sigmas"),
        (dict(sigmas=(8.0,), lambdas=(0.0,)), (X, E, F), "lambdas"),
        (dict(validation_fraction=1.0), (X, E, F), "validation_fraction"),
        (one, ([], E[:0], []), r"^X: no molecules"),
        (one, (X, E[:4], F), "energies"),
        (one, (X, np.r_[E[:4], np.inf], F), "energies"),
        (one, (X, E, F[:4]), "forces"),
        (one, (X, E, None), "forces"),
        (one, (X, E, F[:4] + [np.zeros((9, 2))]), r"forces\[4\]"),
        (one, (X, E, F[:4] + [np.full((9, 3), np.nan)]), r"forces\[4\]"),
        (one, (X[:4] + ["not a molecule file"], E, F), r"X\[4\]"),
        (dict(validation_fraction=0.01), (X, E, F), "too few"),
    ]
    for params, (x, e, f), match in cases:
        with pytest.raises(InputError, match=match):
            FCHL19ForceField(**params).fit(x, e, f)
    with pytest.raises(InputError, match="before fit"):
        FCHL19ForceField().predict([molecules[0]])
    nitrogen = Molecule(np.array([7, 1, 1, 1]), np.array([[0, 0, 0], [1, 0, 0], [0, 1, 0], [0, 0, 1.0]]))
    with pytest.raises(InputError, match=r"X\[1\].*\[7\].*training elements"):
        fitted.predict_forces([molecules[0], nitrogen])
    with pytest.raises(InputError, match=r"^X: no molecules"):
        fitted.predict([])


def test_bad_input_to_the_sparse_model_is_refused_naming_it(sparse, frames):
    molecules, energies, forces = frames
    X, E, F = molecules[:5], energies[:5], forces[:5]
    cases = [
        (dict(inducing=None), "inducing"),
        (dict(inducing=0), "inducing"),
        (dict(inducing_selection="best"), "inducing_selection"),
        (dict(sigmas=(-1.0,)), "sigmas"),
        (dict(sigmas=(1.0, 2.0), reg_energy=1e-4, reg_force=1e-3), "sigmas"),
        (dict(reg_energy=1e-4), "reg_energy"),
        (dict(reg_force="loo"), "reg_force"),
    ]
    for params, match in cases:
        with pytest.raises(InputError, match=match):
            SparseFCHL19ForceField(**params).fit(X, E, F)
    with pytest.raises(InputError, match=r"forces\[4\]"):
        SparseFCHL19ForceField(sigmas=(4.0,)).fit(X, E, F[:4] + [np.zeros((9, 2))])
    with pytest.raises(InputError, match="before fit"):
        SparseFCHL19ForceField().predict([molecules[0]])
    nitrogen = Molecule(np.array([7, 1, 1, 1]), np.array([[0, 0, 0], [1, 0, 0], [0, 1, 0], [0, 0, 1.0]]))
    with pytest.raises(InputError, match=r"X\[1\].*\[7\].*training elements"):
        sparse.predict_forces([molecules[0], nitrogen])
