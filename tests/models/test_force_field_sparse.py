"""The sparse energy+force model ``SO3ForceFieldRegressor(inducing=m)`` (molntk.models.force_field,
molntk.regression.sparse_joint) on ethanol frames of the committed GFN2-xTB MD sample (eV, eV/Å):
the solve against a dense least-squares solve of its objective, the closed-form grouped LOO
against refits, and an end-to-end fit.

Model: ``lift:3 erf pool dense`` on feature maps of H, C, O with 4 radial Gaussians on
[0.5, 3] Å, fast mode on the default Lebedev grid of band limit 5 (kernels accurate to ≈ 5e-11:
a sparse model needs K_mm's small eigenvalues, which a coarse grid's quadrature error buries).
"""

from __future__ import annotations

import numpy as np
import pytest

from molntk.errors import InputError, ModelFileError
from molntk.models.force_field import SO3ForceFieldRegressor, joint_rows
from molntk.models.so3_ntk import SO3NTKRegressor
from molntk.molecular.force_rows import force_rows
from molntk.regression.sparse_joint import fit_sparse_joint
from tests.helpers.forces import assert_same_energies_and_forces, with_array

pytestmark = pytest.mark.usefixtures("one_thread", "one_blas_thread")

PARAMS = dict(elements=(1, 6, 8), radial={"kind": "gaussian", "n": 4, "r_min": 0.5, "r_cut": 3.0})


def flat(forces) -> np.ndarray:
    return np.concatenate([np.asarray(f).reshape(-1) for f in forces])


def _fit(train, e, f, **params) -> SO3ForceFieldRegressor:
    return SO3ForceFieldRegressor(**PARAMS, **params).fit(train, e, f)


def design(model: SO3ForceFieldRegressor, molecules) -> np.ndarray:
    """[K_E; K_F] of ``molecules`` against the model's inducing environments."""
    rows = force_rows(model.kernel_, molecules, model.inducing_)
    return np.vstack([rows.energy, -rows.gradient])


def brute_force(K_nm: np.ndarray, K_mm: np.ndarray, y: np.ndarray, lam: np.ndarray) -> np.ndarray:
    """argmin_w Σ (y − K_nm w)²/λ + wᵀ K_mm w as one dense least-squares problem,
    ‖[Λ^{-1/2} K_nm; Lᵀ] w − [Λ^{-1/2} y; 0]‖² with K_mm = L Lᵀ (Cholesky): backward stable, unlike
    the normal equations, whose condition number (≈ 4e13 here) costs ≈ 1e-4 of the predictions."""
    root = np.sqrt(lam)[:, None]
    stacked = np.vstack([K_nm / root, np.linalg.cholesky(K_mm).T])
    return np.linalg.lstsq(stacked, np.concatenate([y / root[:, 0], np.zeros(len(K_mm))]), rcond=None)[0]


def test_the_solve_is_the_brute_force_objective(sample):
    """All 36 environments of 4 frames inducing, fixed λ's: w minimises Σ (y − K w)²/λ + wᵀ K_mm w,
    solved here as one dense least-squares problem (:func:`brute_force`; K_mm from the kernel's
    symmetric call, exactly symmetric). The two routes agree on the fitted and predicted energies
    and forces to rounding × the square root of the condition number (≈ 6e6: 1e-9; measured 9e-11
    relative; bound 1e-8)."""
    mols, e, f = sample
    idx = [0, 9, 18, 27]
    train = [mols[i] for i in idx]
    model = _fit(train, e[idx], [f[i] for i in idx], inducing=100, reg_energy=1e-3, reg_force=1e-2)
    assert model.n_inducing_ == 36 and model.rank_ == 36
    K_nm = design(model, train)
    is_force, _ = joint_rows(4, [9] * 4)
    y = np.concatenate([e[idx] - e[idx].mean(), flat([f[i] for i in idx])])
    w = brute_force(K_nm, model.kernel_(model.inducing_).ntk.numpy(), y, np.where(is_force, 1e-2, 1e-3))
    test = [mols[i] for i in (50, 51)]
    rows = design(model, test)
    for K in (K_nm, rows):
        assert np.abs(K @ model.inducing_weights_ - K @ w).max() <= 1e-8 * np.abs(K @ w).max()
    energies, forces = model.predict_forces(test, return_energy=True)
    expect = rows @ w
    np.testing.assert_allclose(energies, e[idx].mean() + expect[:2], rtol=0, atol=1e-8 * np.abs(expect[:2]).max())
    np.testing.assert_allclose(flat(forces), expect[2:], rtol=0, atol=1e-8 * np.abs(expect[2:]).max())


def test_loo_selection_is_refitting_without_each_configuration(sample):
    """On 6 frames with 30 inducing environments and a 3 × 3 grid: for every (λ_E, λ_F) the
    criterion from brute-force refits (:func:`brute_force` without the rows of one configuration,
    same inducing set) is computed, and fit_sparse_joint picks the same minimum with the same
    score (both exact; bound 1e-6 relative)."""
    mols, e, f = sample
    idx = [0, 5, 10, 15, 20, 25]
    train = [mols[i] for i in idx]
    model = _fit(train, e[idx], [f[i] for i in idx], inducing=30, reg_energy=1e-3, reg_force=1e-2)
    K_nm = design(model, train)
    K_mm = model.kernel_(model.inducing_).ntk.numpy()
    is_force, groups = joint_rows(6, [9] * 6)
    y = np.concatenate([e[idx] - e[idx].mean(), flat([f[i] for i in idx])])
    ratios, scales = np.array([0.1, 1.0, 10.0]), np.array([1e-6, 1e-4, 1e-2])
    fit = fit_sparse_joint(K_nm, K_mm, y, is_force, groups, ratios=ratios, scales=scales)
    root = np.linalg.eigh(K_mm)
    keep = root[0] > 1e-12 * root[0][-1]
    B = K_nm @ (root[1][:, keep] / np.sqrt(root[0][keep]))
    scale_e, scale_f = np.mean(np.sum(B[~is_force] ** 2, 1)), np.mean(np.sum(B[is_force] ** 2, 1))
    best = (np.inf, 0, 0)
    for q in ratios:
        for rho in scales:
            lam = np.where(is_force, q * rho * scale_f, rho * scale_e)
            res = np.empty_like(y)
            for g in groups:
                keep_rows = np.setdiff1d(np.arange(len(y)), g)
                res[g] = y[g] - K_nm[g] @ brute_force(K_nm[keep_rows], K_mm, y[keep_rows], lam[keep_rows])
            score = np.mean(res[~is_force] ** 2) / np.mean(y[~is_force] ** 2) + np.mean(res[is_force] ** 2) / np.mean(y[is_force] ** 2)
            if score < best[0]:
                best = (score, rho * scale_e, q * rho * scale_f)
    assert fit.cv_score == pytest.approx(best[0], rel=1e-6)
    assert (fit.reg_energy, fit.reg_force) == pytest.approx(best[1:], rel=1e-12)


def test_end_to_end_on_the_sample(sample):
    """40 frames for training (150 of their 360 environments inducing, λ's by grouped LOO), the
    other 50 frames for testing. Measured: energy MAE 0.036 eV, force-component MAE 0.16 eV/Å
    (energy std 0.136 eV, mean |F| 0.75 eV/Å), against 0.10 eV and 0.62 eV/Å for the sparse
    energy-only model on the same inducing set (SO3NTKRegressor(inducing=150)). Bounds: half the
    energy std, a third of mean |F|, and forces at least twice better than energy-only. The
    energies and forces of ``predict_forces`` are the fitted model's rows times w (to rounding)."""
    mols, e, f = sample
    tr, te = list(range(0, 80, 2)), list(range(1, 100, 2))
    train, test = [mols[i] for i in tr], [mols[i] for i in te]
    model = _fit(train, e[tr], [f[i] for i in tr], inducing=150)
    assert model.n_inducing_ == 150 and model.cv_score_ is not None and model.reg_force_ > 0
    energies, forces = model.predict_forces(test, return_energy=True)
    np.testing.assert_allclose(model.predict(test), energies, rtol=1e-10)  # two summation orders: rounding
    expect = design(model, test) @ model.inducing_weights_
    np.testing.assert_allclose(flat(forces), expect[len(te):], rtol=0, atol=1e-10 * np.abs(expect).max())
    e_mae, f_mae = np.abs(energies - e[te]).mean(), np.abs(flat(forces) - flat([f[i] for i in te])).mean()
    assert e_mae < 0.5 * e[te].std()
    assert f_mae < np.abs(flat([f[i] for i in te])).mean() / 3
    energy_only = SO3NTKRegressor(inducing=150, **PARAMS).fit(train, e[tr])
    only_f = np.abs(flat(energy_only.predict_forces(test)) - flat([f[i] for i in te])).mean()
    assert f_mae < 0.5 * only_f


def test_bad_sparse_parameters_are_input_errors(sample):
    mols, e, f = sample
    data = (mols[:2], e[:2], f[:2])
    for params, name in (({"inducing": 0}, "inducing"), ({"inducing": 5, "inducing_selection": "best"}, "inducing_selection"),
                         ({"inducing": 5, "reg_energy": 0.0, "reg_force": 1.0}, "reg_energy")):
        with pytest.raises(InputError, match=name):
            _fit(*data, **params)


def test_a_saved_sparse_force_field_loads_and_predicts_the_same(sample, tmp_path):
    """The sparse model's file stores the inducing rows, not the environments: load recomputes
    the training molecules' feature maps and takes the same rows, so the predictions are the
    same bit for bit; rows that do not index the training environments are refused."""
    mols, e, f = sample
    idx = [0, 9, 18, 27]
    model = _fit([mols[i] for i in idx], e[idx], [f[i] for i in idx], inducing=20, reg_energy=1e-3, reg_force=1e-2)
    path = model.save(tmp_path / "sparse.molntk.npz")
    loaded = SO3ForceFieldRegressor.load(path)
    assert loaded.sparse_ and loaded.n_inducing_ == 20 and loaded.rank_ == model.rank_
    test = [mols[i] for i in (5, 33)]
    assert_same_energies_and_forces(model, loaded, test)

    bad_rows = with_array(path, tmp_path / "bad_rows.npz", "inducing_rows", lambda rows: rows + 1000)
    with pytest.raises(ModelFileError, match="inducing_rows do not index the 36 training environments"):
        SO3ForceFieldRegressor.load(bad_rows)
