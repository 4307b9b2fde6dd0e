"""``SO3ForceFieldRegressor`` (molntk.models.force_field): kernel ridge on energies and forces
of ethanol frames of the committed GFN2-xTB MD sample (eV, eV/Å).

Model: ``lift:3 erf pool dense`` on feature maps of H, C, O with 4 radial Gaussians on
[0.5, 3] Å, fast mode on a Lebedev grid of band limit 2 (psd_rtol 1e-4: the quadrature of so
coarse a grid is accurate to a few per cent only).
"""

from __future__ import annotations

import importlib.util
import json

import numpy as np
import pytest
import torch
from scipy.spatial.transform import Rotation
from threadpoolctl import threadpool_limits

from molntk.data.molecule import Molecule
from molntk.data.readers import molecule_to_atoms
from molntk.errors import InputError, ModelFileError
from molntk.models.calculator import MolntkCalculator
from molntk.models.delta import baseline_results
from molntk.models import force_field
from molntk.models.force_field import (SO3ForceFieldRegressor, grouped_loo_residuals, joint_rows, select_noise,
                                       select_noise_local)
from molntk.regression.noise_search import RATIO_GRID, SCALE_GRID, loo_criterion, usable_scales
from molntk.models.loading import load_model
from molntk.scale.devices import torch_threads
from molntk.models.model_files import read_model_archive, write_model_archive
from molntk.models.so3_ntk import SO3NTKRegressor
from molntk.molecular.derivative_kernels import derivative_rows
from tests.helpers.forces import assert_same_energies_and_forces, central_difference_forces, with_array

pytestmark = pytest.mark.usefixtures("one_thread", "one_blas_thread")

PARAMS = dict(elements=(1, 6, 8), grid_band_limit=2, psd_rtol=1e-4,
              radial={"kind": "gaussian", "n": 4, "r_min": 0.5, "r_cut": 3.0})


@pytest.fixture(scope="module")
def tiny(sample):
    """A model on 4 frames with fixed λ's (no CV), and the frames."""
    mols, e, f = sample
    train = [0, 9, 18, 27]
    model = SO3ForceFieldRegressor(reg_energy=1e-3, reg_force=1e-2, **PARAMS)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the function-scoped one_thread fixture does not cover module fixtures
    try:
        with threadpool_limits(1):
            model.fit([mols[i] for i in train], e[train], [f[i] for i in train])
    finally:
        torch.set_num_threads(threads)
    return model, [mols[i] for i in train], e[train], [f[i] for i in train]


def test_the_solve_is_the_brute_force_linear_system(tiny, sample):
    """The joint system assembled pair by pair from unsymmetric :func:`derivative_rows` calls
    (not the symmetric fill of ``fit``), solved by ``numpy.linalg.solve``: the same α (the grid's
    Θ(M, M') is symmetric to rounding on band limit 2; the system's condition with λ ≈ 1e-3 of
    diag ≈ 1e2 is ≲ 1e6, so 1e-8 relative leaves room), and the same test predictions of
    energy and forces from the brute-force covariances [Θ, −∂Θ/∂r'; −∂Θ/∂r, ∂²Θ/∂r∂r'] α
    (``predict_forces`` differentiates the fitted energy instead: the same to rounding)."""
    model, mols, e, f = tiny
    k, n = model.kernel_, len(mols)
    rows = [derivative_rows(k, m, mols) for m in mols]
    top = np.hstack([np.array([r.theta for r in rows]), -np.array([r.d_ref for r in rows])])
    bottom = np.vstack([np.hstack([-r.d_query, r.mixed]) for r in rows])
    K = np.vstack([top, bottom])
    y = np.concatenate([e - e.mean(), np.concatenate([x.reshape(-1) for x in f])])  # one composition: dressed atoms = mean
    lam = np.where(np.arange(K.shape[0]) < n, 1e-3, 1e-2)
    alpha = np.linalg.solve(K + np.diag(lam), y)
    fitted = np.concatenate([model.energy_coef_, model.force_coef_])
    assert np.abs(fitted - alpha).max() < 1e-8 * np.abs(alpha).max()
    test = sample[0][50]
    row = derivative_rows(k, test, mols)
    energy = e.mean() + np.concatenate([row.theta, -row.d_ref]) @ alpha
    forces = np.hstack([-row.d_query, row.mixed]) @ alpha
    assert model.predict([test])[0] == pytest.approx(energy, abs=1e-8)
    (predicted,) = model.predict_forces([test])
    np.testing.assert_allclose(predicted.reshape(-1), forces, rtol=0, atol=1e-8 * np.abs(forces).max())


def test_closed_form_loo_is_refitting_without_the_configuration():
    """The grouped LOO residual (C_gg)⁻¹ α_g equals y_g minus the prediction of the model refitted
    without group g, on a random PSD system (pure linear algebra: agreement to rounding × the
    condition number, bound 1e-8)."""
    rng = np.random.default_rng(0)
    is_force, groups = joint_rows(4, [2, 3, 2, 1])
    n = is_force.size
    x = rng.normal(size=(n, n + 3))
    K, y = x @ x.T, rng.normal(size=n)
    lam = np.where(is_force, 0.3, 0.05)
    inverse = np.linalg.inv(K + np.diag(lam))
    residuals = grouped_loo_residuals(inverse, inverse @ y, groups)
    for g in groups:
        keep = np.setdiff1d(np.arange(n), g)
        a = np.linalg.solve(K[np.ix_(keep, keep)] + np.diag(lam[keep]), y[keep])
        np.testing.assert_allclose(residuals[g], y[g] - K[np.ix_(g, keep)] @ a, rtol=0, atol=1e-8)
    lam_e, lam_f, score, _, factorisations = select_noise(K, y, is_force, groups, floor=1e-6)
    assert lam_e > 0 and lam_f > 0 and np.isfinite(score)
    assert factorisations == sum(bool(usable_scales(q, 1e-6)) for q in RATIO_GRID)  # one eigh per ratio


def brute_force_criterion(K: np.ndarray, y: np.ndarray, is_force: np.ndarray, groups, lam_e: float, lam_f: float) -> float:
    """The grouped-LOO criterion from an explicit inverse (inf where K + Λ is not positive definite)."""
    shifted = K + np.diag(np.where(is_force, lam_f, lam_e))
    if np.linalg.eigvalsh(shifted).min() <= 0:
        return np.inf
    inverse = np.linalg.inv(shifted)
    return loo_criterion(grouped_loo_residuals(inverse, inverse @ y, groups), y, is_force)


def test_the_local_noise_search_stops_at_a_local_minimum_of_the_brute_force_criterion():
    """A synthetic joint problem of 9 configurations (sizes 1–3 atoms), the search started from
    the grid's choice on the first 3: the chosen (ρ, q) has the explicit-inverse criterion the
    search reports (1e-9 relative: both from O(1)-conditioned solves) and none of its four
    lattice neighbours is lower; every visited point is in the trace, and the factorisations
    reported are the start's and the trace's; with at most
    ``start_configs`` configurations it is the grid search."""
    rng = np.random.default_rng(3)
    sizes = [2, 3, 1, 2, 3, 2, 1, 3, 2]
    is_force, groups = joint_rows(len(sizes), sizes)
    n = is_force.size
    x = rng.normal(size=(n, n // 2))
    K = x @ x.T + 0.05 * np.eye(n)
    y = x @ rng.normal(size=n // 2) + 0.3 * rng.normal(size=n)
    trace: list[dict] = []
    lam_e, lam_f, score, _, factorisations = select_noise_local(K, y, is_force, groups, floor=1e-6, start_configs=3,
                                                                trace=trace)
    # the grid search on the first 3 configurations (one eigh per ratio), then one Cholesky per traced point
    assert factorisations == sum(bool(usable_scales(q, 1e-6)) for q in RATIO_GRID) + len(trace)
    s_e, s_f = np.mean(np.diag(K)[~is_force]), np.mean(np.diag(K)[is_force])
    i = int(np.argmin(np.abs(np.log10(SCALE_GRID * s_e / lam_e))))
    j = int(np.argmin(np.abs(np.log10(RATIO_GRID * SCALE_GRID[i] * s_f / lam_f))))
    assert lam_e == pytest.approx(SCALE_GRID[i] * s_e) and lam_f == pytest.approx(RATIO_GRID[j] * SCALE_GRID[i] * s_f)
    assert score == pytest.approx(brute_force_criterion(K, y, is_force, groups, lam_e, lam_f), rel=1e-9)
    for di, dj in [(-1, 0), (1, 0), (0, -1), (0, 1)]:
        if 0 <= i + di < len(SCALE_GRID) and 0 <= j + dj < len(RATIO_GRID):
            rho, q = SCALE_GRID[i + di], RATIO_GRID[j + dj]
            assert brute_force_criterion(K, y, is_force, groups, rho * s_e, q * rho * s_f) >= score * (1 - 1e-9)
    assert any(p["rho"] == pytest.approx(SCALE_GRID[i]) and p["q"] == pytest.approx(RATIO_GRID[j]) for p in trace)
    assert select_noise_local(K, y, is_force, groups, floor=1e-6, start_configs=9) == select_noise(K, y, is_force, groups, floor=1e-6)


def test_the_local_noise_search_flags_a_choice_beside_a_not_positive_definite_point(monkeypatch):
    """The problem above, with K + Λ made not positive definite (the Cholesky route returns
    None) for every ρ below the search's own choice: the climb stops at the same point, inside
    the grid's usable ρ, and now flags it as on the grid's edge, which it did not before."""
    rng = np.random.default_rng(3)
    sizes = [2, 3, 1, 2, 3, 2, 1, 3, 2]
    is_force, groups = joint_rows(len(sizes), sizes)
    x = rng.normal(size=(is_force.size, is_force.size // 2))
    K, y = x @ x.T + 0.05 * np.eye(is_force.size), x @ rng.normal(size=is_force.size // 2) + 0.3 * rng.normal(size=is_force.size)
    free = select_noise_local(K, y, is_force, groups, floor=1e-6, start_configs=3)
    assert not free.at_grid_edge and free.reg_energy > 1e-6 * np.mean(np.diag(K)[~is_force]) * 10
    real = force_field.cholesky_grouped_residuals
    limit = free.reg_energy * (1 - 1e-9)
    monkeypatch.setattr(force_field, "cholesky_grouped_residuals",
                        lambda k, yy, lam, g: None if float(lam[~torch.as_tensor(is_force)][0]) < limit else real(k, yy, lam, g))
    bounded = select_noise_local(K, y, is_force, groups, floor=1e-6, start_configs=3)
    assert (bounded.reg_energy, bounded.reg_force, bounded.score) == (free.reg_energy, free.reg_force, free.score)
    assert bounded.at_grid_edge


def test_predictions_report_their_batches(tiny, sample, monkeypatch):
    """``predict_forces(progress=…)``: the batches of QUERY_BATCH query molecules done (here 2:
    5 molecules, 3 batches), and the same predictions as without it."""
    model, mols = tiny[0], sample[0][40:45]
    plain = model.predict_forces(mols)
    monkeypatch.setattr(force_field, "QUERY_BATCH", 2)
    calls: list[tuple[int, int]] = []
    reported = model.predict_forces(mols, progress=lambda done, total: calls.append((done, total)))
    assert calls == [(1, 3), (2, 3), (3, 3)]
    for a, b in zip(reported, plain):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-12 * np.abs(b).max())


def test_the_device_solve_is_the_hosts(tiny):
    """The fit's solve on a GPU (``solve_joint_on_device``, torch's Cholesky) run here on a CPU
    tensor: the same α as the host's blocked Cholesky (condition ≲ 1e6: 1e-9 relative), and LU
    where K + Λ is not positive definite (a negative λ on one row), equal to numpy's solve."""
    model, mols = tiny[0], tiny[1]
    K = force_field.joint_kernel(model.kernel_, mols)
    is_force, _ = joint_rows(len(mols), [m.n_atoms for m in mols])
    y = np.random.default_rng(1).normal(size=len(is_force))
    lam = np.where(is_force, 1e-2, 1e-3)
    host = force_field.solve_joint(K, y, is_force, 1e-3, 1e-2)
    device = force_field.solve_joint_on_device(torch.tensor(K), y, lam)
    np.testing.assert_allclose(device, host, rtol=0, atol=1e-9 * np.abs(host).max())
    lam[0] = -2 * K[0, 0]  # indefinite: the Cholesky fails, LU solves
    device = force_field.solve_joint_on_device(torch.tensor(K), y, lam)
    np.testing.assert_allclose(device, np.linalg.solve(K + np.diag(lam), y), rtol=1e-8)


def test_the_local_search_starts_from_the_configurations_whose_rows_fit_the_start_budget():
    _, groups = joint_rows(300, [9] * 300)  # 28 rows per ethanol frame
    assert force_field.local_start(groups) == force_field.LOCAL_START_ROWS // 28
    _, groups = joint_rows(300, [21] * 300)  # 64 rows per aspirin frame
    assert force_field.local_start(groups) == force_field.LOCAL_START_ROWS // 64
    _, groups = joint_rows(2, [3000, 3000])  # one configuration already over the budget
    assert force_field.local_start(groups) == 1


def test_a_local_noise_search_fit_scores_its_choice_on_the_whole_problem(sample, monkeypatch):
    """``noise_search="local"`` in the estimator, the search started from the first 2 of 5
    frames: its ``cv_score_`` is the explicit-inverse criterion at its λ's on the joint kernel
    of all 5 (the same kernel ``fit`` builds). Both λ's are at least psd_rtol = 1e-4 of the
    mean diagonal, so the system's condition number is ≲ 1e5 and the Cholesky and
    explicit-inverse routes agree to ≲ 1e-10 relative; bound 1e-6."""
    mols, e, f = sample
    rows = [0, 12, 24, 36, 48]
    monkeypatch.setattr(force_field, "LOCAL_START_ROWS", 2 * (1 + 3 * 9))  # the first 2 ethanol frames
    model = SO3ForceFieldRegressor(noise_search="local", **PARAMS).fit([mols[i] for i in rows], e[rows], [f[i] for i in rows])
    K = force_field.joint_kernel(model.kernel_, [mols[i] for i in rows])
    is_force, groups = joint_rows(len(rows), [mols[i].n_atoms for i in rows])
    y = np.concatenate([e[rows] - e[rows].mean(), np.concatenate([f[i].reshape(-1) for i in rows])])
    expected = brute_force_criterion(K, y, is_force, groups, model.reg_energy_, model.reg_force_)
    assert model.cv_score_ == pytest.approx(expected, rel=1e-6)


def test_forces_are_minus_the_gradient_of_the_predicted_energy(tiny, sample):
    """F = −∂E/∂r against central differences of ``predict``, h = 1e-4 Å, all 27 coordinates of
    a test frame: truncation h²/6 |∂³E| ~ 1e-8 relative, rounding ε |E| / h ≈ 1e-16 · 300 eV /
    1e-4 ≈ 3e-10 eV/Å against |F| ~ 1 eV/Å; bound 1e-6 relative to max |F|."""
    model, *_ = tiny
    test = sample[0][61]
    numeric = central_difference_forces(model.predict, test, h=1e-4)
    energies, (forces,) = model.predict_forces([test], return_energy=True)
    scale = np.abs(forces).max()
    assert scale > 0.1  # eV/Å
    assert np.abs(forces - numeric).max() < 1e-6 * scale
    assert energies[0] == pytest.approx(model.predict([test])[0], abs=1e-9)
    assert np.abs(forces.sum(axis=0)).max() < 1e-12 * scale  # translation invariance


@pytest.mark.slow
def test_forces_in_training_beat_an_energy_only_model(sample):
    """Trained on 20 frames (every 5th) and tested on 20 others (between them): the force MAE of
    the joint model must be below that of SO3NTKRegressor trained on the same 20 energies.
    Measured: 185 vs 701 meV/Å (the energy-only model's forces are barely better than zero
    forces, 701 meV/Å mean |F|); energy MAE 51 vs 117 meV. Asserted: force MAE below half the
    energy-only one, and the energy MAE lower too. About 10 s (the 210 pairs of the 560-row
    joint kernel, grouped LOO over 15 ratios × 21 scales, predictions)."""
    mols, e, f = sample
    train, test = list(range(0, 100, 5)), list(range(2, 100, 5))
    joint = SO3ForceFieldRegressor(**PARAMS).fit([mols[i] for i in train], e[train], [f[i] for i in train])
    energy_only = SO3NTKRegressor(device="cpu", **PARAMS).fit([mols[i] for i in train], e[train])
    test_mols, truth = [mols[i] for i in test], np.concatenate([f[i] for i in test])
    pe, pf = joint.predict_forces(test_mols, return_energy=True)
    force_mae = np.abs(np.concatenate(pf) - truth).mean()
    base_mae = np.abs(np.concatenate(energy_only.predict_forces(test_mols)) - truth).mean()
    assert force_mae < 0.5 * base_mae
    assert np.abs(pe - e[test]).mean() < np.abs(energy_only.predict(test_mols) - e[test]).mean()
    assert joint.reg_energy_ > 0 and joint.reg_force_ > 0 and np.isfinite(joint.cv_score_)


@pytest.mark.parametrize("inducing", [None, 40], ids=["exact", "sparse"])
def test_forces_rotate_with_the_molecule_to_the_quadrature_accuracy(sample, inducing):
    """F(R·r) = R·F(r) and E(R·r) = E(r) hold to the accuracy of the SO(3) quadrature (fast
    mode), amplified by the fitted coefficients. 10 training frames, λ_E = 1e-3, λ_F = 1e-2 eV
    (the solve's amplification of kernel errors is large), three test frames, three random
    rotations: max |F(R·r) − R F(r)| / max |F| measured 5.3e-3 (exact) and 1.4e-2 (sparse) on
    the Lebedev grid of band limit 5, 3.0e-5 and 7.3e-5 on band 7, 1.3e-7 and 5.4e-7 on band 9:
    the error is the quadrature's and falls about 100× per two band limits; |E(R·r) − E(r)|
    measured 1.0e-3 and 5.3e-3 eV (band 5), 3.7e-6 and 2.5e-5 eV (band 7). Asserted: forces on
    band 7 below 1e-3 (≈ 10× the measured) and band 5 at least 10× band 7; energies below
    ≈ 10× the measured (5e-2 and 3e-4 eV)."""
    mols, e, f = sample
    train = list(range(0, 40, 4))
    rotations = Rotation.random(3, random_state=0).as_matrix()
    errors = {}
    for band in (5, 7):
        model = SO3ForceFieldRegressor(**{**PARAMS, "grid_band_limit": band}, reg_energy=1e-3, reg_force=1e-2,
                                       inducing=inducing).fit([mols[i] for i in train], e[train], [f[i] for i in train])
        worst = 0.0
        for mol in (mols[61], mols[73], mols[85]):
            energy, (forces,) = model.predict_forces([mol], return_energy=True)
            for rot in rotations:
                turned = Molecule(mol.numbers, mol.positions @ rot.T, id=mol.id)
                turned_energy, (turned_forces,) = model.predict_forces([turned], return_energy=True)
                worst = max(worst, np.abs(turned_forces - forces @ rot.T).max() / np.abs(forces).max())
                assert abs(turned_energy[0] - energy[0]) < (5e-2 if band == 5 else 3e-4)  # eV
        errors[band] = worst
    assert errors[7] < 1e-3
    assert errors[5] > 10 * errors[7]


def test_bad_inputs_name_the_argument(tiny, sample):
    model, mols, e, f = tiny
    with pytest.raises(InputError, match="energies"):
        SO3ForceFieldRegressor(**PARAMS).fit(mols, e[:2], f)
    with pytest.raises(InputError, match=r"forces\[1\]"):
        SO3ForceFieldRegressor(**PARAMS).fit(mols, e, [f[0], f[1][:3], f[2], f[3]])
    with pytest.raises(InputError, match="forces"):
        SO3ForceFieldRegressor(**PARAMS).fit(mols, e, None)
    with pytest.raises(InputError, match="reg_force"):
        SO3ForceFieldRegressor(reg_energy=1e-3, **PARAMS).fit(mols, e, f)
    with pytest.raises(InputError, match="reg_energy"):
        SO3ForceFieldRegressor(reg_energy="loo", reg_force="cv", **PARAMS).fit(mols, e, f)
    with pytest.raises(InputError, match="noise_search"):
        SO3ForceFieldRegressor(noise_search="eigh", **PARAMS).fit(mols, e, f)
    with pytest.raises(InputError, match="kernel_cache"):
        SO3ForceFieldRegressor(inducing=10, **PARAMS).fit(mols, e, f, kernel_cache="unused")
    with pytest.raises(InputError, match="SO3ForceFieldRegressor"):
        SO3ForceFieldRegressor(**PARAMS).predict(mols)
    with pytest.raises(InputError):
        model.predict([Molecule(np.array([7, 1]), np.array([[0.0, 0, 0], [1.0, 0, 0]]))])  # N: not in training


@pytest.mark.skipif(importlib.util.find_spec("tblite") is None, reason="the GFN2-xTB baseline needs tblite (molntk[md])")
def test_a_delta_force_field_is_the_baseline_plus_a_force_field_of_the_residuals(sample):
    """baseline="gfn2-xtb": fitted on E − E_xTB and F − F_xTB, it predicts E_xTB + the plain
    model of those residuals (energies and forces, to rounding: the same fit on the same
    numbers), and the ASE calculator serves both parts."""
    mols, e, f = sample
    train, test = [mols[i] for i in (0, 9, 18, 27)], [mols[40], mols[41]]
    physical = baseline_results("gfn2-xtb", train, "eV")
    residual_f = [np.asarray(x) - g for x, g in zip((f[i] for i in (0, 9, 18, 27)), physical.forces)]
    with threadpool_limits(1):
        delta = SO3ForceFieldRegressor(reg_energy=1e-3, reg_force=1e-2, baseline="gfn2-xtb", unit="eV", **PARAMS)
        delta.fit(train, e[[0, 9, 18, 27]], [f[i] for i in (0, 9, 18, 27)], baseline_results=physical)
        plain = SO3ForceFieldRegressor(reg_energy=1e-3, reg_force=1e-2, **PARAMS)
        plain.fit(train, e[[0, 9, 18, 27]] - physical.energies, residual_f)
        energies, forces = delta.predict_forces(test, return_energy=True)
        base = baseline_results("gfn2-xtb", test, "eV")
        plain_e, plain_f = plain.predict_forces(test, return_energy=True)
        np.testing.assert_allclose(energies, base.energies + plain_e, rtol=1e-12, atol=1e-9)
        np.testing.assert_allclose(delta.predict(test), energies, rtol=1e-12, atol=1e-9)
        for got, g, p in zip(forces, base.forces, plain_f):
            np.testing.assert_allclose(got, g + p, atol=1e-9)
        atoms = molecule_to_atoms(test[0])
        atoms.calc = MolntkCalculator(delta)
        assert atoms.get_potential_energy() == pytest.approx(energies[0], abs=1e-9)  # eV: unit_ is eV
        np.testing.assert_allclose(atoms.get_forces(), forces[0], atol=1e-9)
    with pytest.raises(InputError, match="unit"):
        SO3ForceFieldRegressor(baseline="gfn2-xtb", **PARAMS).fit(train, e[:4], [f[i] for i in range(4)])
    with pytest.raises(InputError, match="baseline_results"):
        SO3ForceFieldRegressor(**PARAMS).fit(train, e[:4], [f[i] for i in range(4)], baseline_results=physical)


def test_a_saved_force_field_loads_and_predicts_the_same(tiny, sample, tmp_path):
    """save → load gives the same energies and forces on unseen frames, bit for bit (the same
    arrays and parameters, the same code); the file is refused with the reason when it is not
    a force field, or is damaged."""
    model, _, _, _ = tiny
    mols = sample[0]
    test = [mols[i] for i in (3, 40)]
    path = model.save(tmp_path / "ethanol.molntk.npz")
    loaded = SO3ForceFieldRegressor.load(path)
    assert loaded.get_params() == model.get_params() and not loaded.sparse_
    assert (loaded.reg_energy_, loaded.reg_force_) == (model.reg_energy_, model.reg_force_)
    assert (loaded.unit_, loaded.target_) == (model.unit_, model.target_) and model.target_ == "energy"
    assert loaded.provenance_ == model.provenance_ and model.provenance_["n_train"] == len(model.train_molecules_)
    assert_same_energies_and_forces(model, loaded, test)
    assert np.array_equal(loaded.predict(test), model.predict(test))

    energy_model = tmp_path / "energy.molntk.npz"
    SO3NTKRegressor(reg=1e-3, **PARAMS).fit(test, sample[1][[3, 40]]).save(energy_model)
    with pytest.raises(ModelFileError, match="not a molntk SO\\(3\\) NTK force field"):
        SO3ForceFieldRegressor.load(energy_model)
    cut = with_array(path, tmp_path / "cut.npz", "force_coef", lambda coef: coef[:-3])
    with pytest.raises(ModelFileError, match="cut.npz.*damaged.*coefficients of shapes"):
        SO3ForceFieldRegressor.load(cut)
    with pytest.raises(InputError, match="save called before fit"):
        SO3ForceFieldRegressor().save(tmp_path / "x.npz")
    # load_model reads either kind by the format its file names, and refuses others
    assert isinstance(load_model(path), SO3ForceFieldRegressor) and isinstance(load_model(energy_model), SO3NTKRegressor)
    arrays, meta = read_model_archive(path)
    write_model_archive(tmp_path / "other.npz", {**meta, "format": "someone-elses"}, arrays)
    with pytest.raises(ModelFileError, match="other.npz.*format 'someone-elses'"):
        load_model(tmp_path / "other.npz")
    write_model_archive(tmp_path / "older.npz", {k: v for k, v in meta.items() if k != "provenance"}, arrays)
    assert SO3ForceFieldRegressor.load(tmp_path / "older.npz").provenance_ == {}  # files from before it was kept


def test_the_exact_model_that_cannot_fit_memory_is_refused_before_any_kernel(sample, monkeypatch):
    """Ethanol at N = 1,000 (28,000 joint rows) needs 3 · 28,000² · 8 B = 17.5 GiB with the grid
    search, 11.7 GiB with the local one; aspirin's 64,000 rows need 61 GiB. The estimator
    checks this before computing any kernel."""
    assert force_field.exact_host_bytes(28_000, grid_search=True) == 3 * 28_000**2 * 8
    assert force_field.exact_host_bytes(28_000, grid_search=False) == 2 * 28_000**2 * 8
    force_field.check_exact_memory(28_000, grid_search=False, available=24 * 2**30)
    with pytest.raises(InputError, match="inducing.*64,000 joint rows.*61.0 GiB"):
        force_field.check_exact_memory(64_000, grid_search=False, available=24 * 2**30)
    mols, e, f = sample
    monkeypatch.setattr(force_field, "available_ram_bytes", lambda: 10**5)
    monkeypatch.setattr(force_field, "joint_kernel", lambda *a, **k: pytest.fail("kernel computed"))
    with pytest.raises(InputError, match="inducing.*140 joint rows"):  # 5 frames × (1 + 27)
        SO3ForceFieldRegressor(**PARAMS).fit(mols[:5], e[:5], f[:5])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("inducing", [None, 60], ids=["exact", "sparse"])
def test_cuda_force_field_matches_cpu(sample, inducing):
    """The force field fitted and evaluated on CUDA (energy kernel, derivative kernels, force
    rows, solve) against the CPU: the same float64 arithmetic in another summation order, so
    energies and forces agree to rounding amplified by the solve. With λ_E = 1e-3, λ_F = 1e-2
    the exact joint system's condition number is 1.0e6 (computed on the CPU), so ε · 1e6 ≈
    1e-10; bound 1e-7 relative to the largest energy (the energies are ~ 1e3 eV) and force,
    while a wrong term on the device is an O(1) error. Passed on an H200 (2026-11-26) with the
    exact model in closed form (molntk.molecular.pooled_derivatives), before its chunks were
    sized by the device's memory (value_budget); the larger chunks then gave the joint kernel
    of 4 ethanol frames equal to the CPU's to 1.4e-16 (benchmarks/md_exact_gpu.py)."""
    mols, e, f = sample
    train, test = list(range(0, 100, 10)), [mols[i] for i in (3, 41, 77)]
    settings = dict(reg_energy=1e-3, reg_force=1e-2, inducing=inducing, **PARAMS)
    cpu = SO3ForceFieldRegressor(**settings).fit([mols[i] for i in train], e[train], [f[i] for i in train])
    gpu = SO3ForceFieldRegressor(device="cuda", **settings).fit([mols[i] for i in train], e[train], [f[i] for i in train])
    e_cpu, f_cpu = cpu.predict_forces(test, return_energy=True)
    e_gpu, f_gpu = gpu.predict_forces(test, return_energy=True)
    np.testing.assert_allclose(e_gpu, e_cpu, rtol=0, atol=1e-7 * np.abs(e_cpu).max())
    scale = max(np.abs(x).max() for x in f_cpu)
    for a, b in zip(f_gpu, f_cpu):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-7 * scale)


def test_predictions_side_by_side_on_two_threads_equal_one_threads(sample):
    """The exact model predicts its query molecules on two Python threads when torch has two
    (:func:`~molntk.scale.devices.map_over_threads`): energies and forces equal those on one
    thread, where only the summation order inside torch's operations differs (bound 1e-12 of
    the largest value)."""
    mols, e, f = sample
    rows = [4, 15, 26, 37, 48]
    model = SO3ForceFieldRegressor(reg_energy=1e-3, reg_force=1e-2, **PARAMS).fit([mols[i] for i in rows], e[rows],
                                                                                [f[i] for i in rows])
    queries = [mols[i] for i in (60, 71, 82)]
    with torch_threads(1):
        e_one, f_one = model.predict_forces(queries, return_energy=True)
    with torch_threads(2):
        e_two, f_two = model.predict_forces(queries, return_energy=True)
    np.testing.assert_allclose(e_two, e_one, rtol=0, atol=1e-12 * np.abs(e_one).max())
    scale = max(np.abs(x).max() for x in f_one)
    for a, b in zip(f_two, f_one):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-12 * scale)


def test_the_upper_triangle_storage_fits_the_full_models_coefficients(sample, tmp_path, monkeypatch):
    """``kernel_storage="upper"`` with fixed λ's: K's upper triangle in configuration order, in
    row panels of 50 rows (28 rows per frame: frames straddle panels) from blocks of 3 frames,
    factored in place (its progress reported), gives the coefficients of the full model's
    Cholesky solve of the same K + Λ (both factor one matrix in different orders of summation;
    cond ≲ 1e5 with λ ≥ 1e-4 of the diagonal: ≈ 1e-11 relative; bound 1e-8), with and without
    a kernel cache; with the cache, a second fit reads every block (no row computed)."""
    from molntk.molecular import derivative_kernels

    mols, e, f = sample
    rows = [0, 11, 22, 33, 44, 55, 66]
    train = ([mols[i] for i in rows], e[rows], [f[i] for i in rows])
    monkeypatch.setattr(force_field, "CHOLESKY_BLOCK", 50)
    monkeypatch.setattr(derivative_kernels, "CACHED_MOLECULES", 3)
    full = SO3ForceFieldRegressor(reg_energy=1e-3, reg_force=1e-2, **PARAMS).fit(*train)
    scale = np.abs(np.r_[full.energy_coef_, full.force_coef_]).max()
    for cache in (None, tmp_path):
        upper = SO3ForceFieldRegressor(reg_energy=1e-3, reg_force=1e-2, kernel_storage="upper", **PARAMS)
        reports = []
        upper.fit(*train, kernel_cache=cache, factor_progress=lambda done, total: reports.append((done, total)))
        assert len(reports) == 4 and reports[-1] == (20, 20)  # 196 rows: 4 panels, 4 · 5 · 6 / 6 block updates
        np.testing.assert_allclose(upper.energy_coef_, full.energy_coef_, rtol=0, atol=1e-8 * scale)
        np.testing.assert_allclose(upper.force_coef_, full.force_coef_, rtol=0, atol=1e-8 * scale)
    monkeypatch.setattr(derivative_kernels, "closed_form_rows", lambda *a, **k: pytest.fail("row computed"))
    again = SO3ForceFieldRegressor(reg_energy=1e-3, reg_force=1e-2, kernel_storage="upper", **PARAMS)
    np.testing.assert_array_equal(again.fit(*train, kernel_cache=tmp_path).force_coef_, upper.force_coef_)


def test_the_upper_triangle_storage_chooses_the_noise_on_the_first_configurations(sample, monkeypatch):
    """With "cv" λ's the upper storage takes :func:`select_noise` on the joint kernel of the
    first configurations (here the first 3 of 6 frames: the start budget of 3 · 28 rows):
    exactly its λ's, its criterion to 1e-8 (the fit's targets subtract the dressed-atom least
    squares, here the mean by another summation: measured 1.4e-10 relative), then the full
    model's coefficients at those λ's (bound 1e-8 relative, as above)."""
    mols, e, f = sample
    rows = [1, 12, 23, 34, 45, 56]
    train = ([mols[i] for i in rows], e[rows], [f[i] for i in rows])
    monkeypatch.setattr(force_field, "LOCAL_START_ROWS", 3 * 28)
    upper = SO3ForceFieldRegressor(kernel_storage="upper", **PARAMS).fit(*train)
    first = train[0][:3]
    is_force, groups = joint_rows(3, [9, 9, 9])
    y = np.concatenate([e[rows][:3] - e[rows].mean(), np.concatenate([f[i].reshape(-1) for i in rows[:3]])])
    expected = select_noise(force_field.joint_kernel(upper.kernel_, first), y, is_force, groups, floor=1e-4)
    assert (upper.reg_energy_, upper.reg_force_) == (expected.reg_energy, expected.reg_force)
    assert upper.cv_score_ == pytest.approx(expected.score, rel=1e-8)
    full = SO3ForceFieldRegressor(reg_energy=upper.reg_energy_, reg_force=upper.reg_force_, **PARAMS).fit(*train)
    scale = np.abs(full.force_coef_).max()
    np.testing.assert_allclose(upper.force_coef_, full.force_coef_, rtol=0, atol=1e-8 * scale)


def test_the_upper_triangle_storage_keeps_its_noise_choice_with_the_kernel_cache(sample, tmp_path, monkeypatch):
    """With a kernel cache the λ search of the upper storage is kept (``noise/<key>.json``): a
    second fit of the same data reads it (the search is not called) and gets the same λ's,
    criterion and coefficients, bit for bit; other targets are another key (searched); a
    damaged file is searched again and rewritten."""
    mols, e, f = sample
    rows = [2, 13, 24, 35, 46, 57]
    train = ([mols[i] for i in rows], e[rows], [f[i] for i in rows])
    monkeypatch.setattr(force_field, "LOCAL_START_ROWS", 3 * 28)
    searches = []
    real = force_field.select_noise
    monkeypatch.setattr(force_field, "select_noise", lambda *a, **k: searches.append(1) or real(*a, **k))
    first = SO3ForceFieldRegressor(kernel_storage="upper", **PARAMS).fit(*train, kernel_cache=tmp_path)
    [stored] = (tmp_path / force_field.NOISE_FOLDER).glob("*.json")
    again = SO3ForceFieldRegressor(kernel_storage="upper", **PARAMS).fit(*train, kernel_cache=tmp_path)
    assert len(searches) == 1
    for key in ("reg_energy_", "reg_force_", "cv_score_", "reg_at_grid_edge_", "noise_factorisations_"):
        assert getattr(again, key) == getattr(first, key)
    np.testing.assert_array_equal(again.force_coef_, first.force_coef_)
    SO3ForceFieldRegressor(kernel_storage="upper", **PARAMS).fit(train[0], 2 * train[1], train[2], kernel_cache=tmp_path)
    assert len(searches) == 2 and len(list((tmp_path / force_field.NOISE_FOLDER).glob("*.json"))) == 2
    stored.write_text("{")
    damaged = SO3ForceFieldRegressor(kernel_storage="upper", **PARAMS).fit(*train, kernel_cache=tmp_path)
    assert len(searches) == 3 and damaged.reg_energy_ == first.reg_energy_
    assert json.loads(stored.read_text())["reg_force"] == first.reg_force_


def test_the_upper_triangle_storage_is_checked(sample):
    """A bad ``kernel_storage``, or "upper" with a sparse model, is an InputError naming it;
    its memory check counts the upper triangle with the diagonal blocks: aspirin's 64,000 rows
    fit 24 GiB (16.5 GB), 90,000 rows do not."""
    mols, e, f = sample
    with pytest.raises(InputError, match="kernel_storage.*'full' or 'upper'"):
        SO3ForceFieldRegressor(kernel_storage="half", **PARAMS).fit(mols[:2], e[:2], f[:2])
    for sparse in ({"inducing": 10}, {"inducing_frames": 1}):
        with pytest.raises(InputError, match="kernel_storage.*sparse"):
            SO3ForceFieldRegressor(kernel_storage="upper", **sparse, **PARAMS).fit(mols[:2], e[:2], f[:2])
    assert force_field.upper_host_bytes(64_000) == 8 * 64_000 * (64_000 + 1024) // 2
    force_field.check_upper_memory(64_000, available=24 * 2**30)
    with pytest.raises(InputError, match="kernel_storage.*90,000 joint rows"):
        force_field.check_upper_memory(90_000, available=24 * 2**30)
