"""``SO3NTKSumRegressor``: the NTK of two SO(3) networks side by side as an estimator, against
kernel ridge computed here on the two networks' kernels (from their own recipes), finite
differences of its energy, its model files and its input errors.

Model: the estimator's default network on its 3 Å maps plus the same network on 6 Gaussians
to 4.5 Å, fitted on QM9 molecules 1–30 (U0), tested on 31–40; the Lebedev grid of band limit 2
keeps each fit under a second.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from sklearn.base import clone

from molntk.data.readers import molecule_to_atoms
from molntk.errors import InputError, ModelFileError
from molntk.models.calculator import MolntkCalculator
from molntk.models import SO3NTKRegressor, SO3NTKSumRegressor
from molntk.models.loading import load_model
from molntk.regression import DressedAtomModel, KernelRegressor
from molntk.regression.dressed_atom import element_counts
from tests.helpers.forces import central_difference_forces

pytestmark = pytest.mark.usefixtures("one_thread")

LONG = {"kind": "gaussian", "n": 6, "r_min": 0.5, "r_cut": 4.5}
FAST = {"grid_band_limit": 2, "psd_rtol": 1e-4}


@pytest.fixture(scope="module")
def data(qm9):
    return qm9.molecules(range(1, 41)), np.asarray(qm9.target("u0_atom")[1:41])


@pytest.fixture(scope="module")
def fitted(data) -> SO3NTKSumRegressor:
    mols, y = data
    return SO3NTKSumRegressor(terms=[{"radial": LONG}], weights=[0.0, 0.1, 1.0, 10.0], **FAST).fit(mols[:30], y[:30])


def term_kernels(model: SO3NTKSumRegressor, a: list, b: list | None = None) -> list[np.ndarray]:
    """Θ_i(a, b) of each network, from an SO3NTKRegressor of that network's parameters."""
    params = {k: v for k, v in model.get_params().items() if k not in ("terms", "weights")}
    out = []
    for term in [{}, *model.terms]:
        recipe = SO3NTKRegressor(**(params | term)).recipe()
        kern = recipe.molecular_kernel()
        out.append(kern(recipe.environments(a), None if b is None else recipe.environments(b)).ntk.double().numpy())
    return out


def test_predictions_are_kernel_ridge_on_the_weighted_sum_of_the_two_networks_kernels(fitted, data):
    """mean = dressed atoms + K_c(test, train) (K_c + λ' I)⁻¹ (y − dressed) with K_c = Σ c_i Θ_i/τ_i
    built here from each network's own recipe, the fitted c and λ, solved by numpy (the
    estimator diagonalises; with standardised targets λ' = λ, the mean added back, so the two
    agree to rounding: rtol 1e-8 of the residual scale)."""
    mols, y = data
    train, test = mols[:30], mols[30:]
    K = term_kernels(fitted, train)
    K_t = term_kernels(fitted, test, train)
    c, tau = fitted.regressor_.weights_, fitted.regressor_.scales_
    assert np.allclose(tau, [np.mean(np.diag(k)) for k in K], rtol=1e-12)
    assert c[0] == 1.0 and c[1] in (0.0, 0.1, 1.0, 10.0)
    K_c = sum(ci / ti * k for ci, ti, k in zip(c, tau, K))
    K_tc = sum(ci / ti * k for ci, ti, k in zip(c, tau, K_t))
    counts, counts_t = element_counts(train, fitted.elements), element_counts(test, fitted.elements)
    dressed = DressedAtomModel().fit(counts, y[:30])
    r = y[:30] - dressed.predict(counts)
    mean = r.mean()
    reg = fitted.regressor_.regressor_.reg_
    alpha = np.linalg.solve(K_c + reg * np.eye(30), r - mean)
    expected = dressed.predict(counts_t) + mean + K_tc @ alpha
    assert np.allclose(fitted.predict(test), expected, rtol=0, atol=1e-8 * np.abs(r).max())


def test_the_chosen_weight_is_the_lowest_cv_error_of_plain_regressors_on_each_sum(fitted, data):
    """For each grid weight c, a plain KernelRegressor (λ by LOO, as the estimator's) on
    Θ_1/τ_1 + c Θ_2/τ_2 of the dressed-atom residual: the estimator keeps the c of lowest CV
    error, and its errors are theirs (rtol 1e-10: the same computation)."""
    mols, y = data
    train = mols[:30]
    K = term_kernels(fitted, train)
    tau = [np.mean(np.diag(k)) for k in K]
    counts = element_counts(train, fitted.elements)
    r = y[:30] - DressedAtomModel().fit(counts, y[:30]).predict(counts)
    recipe = fitted.recipe()
    errors = {}
    for c in (0.0, 0.1, 1.0, 10.0):
        plain = KernelRegressor("ntk", psd_rtol=fitted.psd_rtol, relative_grid=recipe.relative_grid).fit(K[0] / tau[0] + c * K[1] / tau[1], r)
        errors[c] = plain.cv_result_.best_error
    assert fitted.regressor_.weights_[1] == min(errors, key=errors.get)
    searched = {point[1]: error for point, error in fitted.regressor_.search_}
    assert searched == pytest.approx(errors, rel=1e-10)


def test_weight_zero_is_the_first_network_alone(data):
    """weights=[0]: Θ = Θ_1/τ_1, a rescaled Θ_1 (λ relative, so the fit is unchanged): the
    predictions and std of SO3NTKRegressor with the same parameters (rtol 1e-9)."""
    mols, y = data
    alone = SO3NTKRegressor(**FAST).fit(mols[:30], y[:30])
    summed = SO3NTKSumRegressor(terms=[{"radial": LONG}], weights=[0.0], **FAST).fit(mols[:30], y[:30])
    mean_a, std_a = alone.predict(mols[30:], return_std=True)
    mean_s, std_s = summed.predict(mols[30:], return_std=True)
    assert np.allclose(mean_s, mean_a, rtol=1e-9)
    assert np.allclose(std_s, std_a, rtol=1e-9)


def test_forces_are_central_differences_of_the_summed_energy(fitted, data):
    """F = −∂E/∂r of both networks' expansions against central differences of ``predict``
    (h = 1e-4 Å; the error budget of tests/models/test_forces.py: ≈ 1e-8 of max |F| measured
    for one network, 1e-6 asserted)."""
    mols, _ = data
    assert fitted.regressor_.weights_[1] > 0  # both networks contribute
    mol = mols[38]
    energies, (forces,) = fitted.predict_forces([mol], return_energy=True)
    assert np.allclose(energies, fitted.predict([mol]), rtol=1e-10)
    numeric = central_difference_forces(fitted.predict, mol, h=1e-4)
    scale = np.abs(forces).max()
    assert scale > 10
    assert np.abs(forces - numeric).max() / scale < 1e-6


def test_the_ase_calculator_serves_the_sum(fitted, data):
    """MolntkCalculator on the sum: energy, forces and std are the model's, in eV (U0 in meV)."""
    mols, _ = data
    mol = mols[33]
    atoms = molecule_to_atoms(mol)
    atoms.calc = MolntkCalculator(fitted, unit="meV")
    mean, std = fitted.predict([mol], return_std=True)
    (forces,) = fitted.predict_forces([mol])
    assert atoms.get_potential_energy() == pytest.approx(1e-3 * mean[0], rel=1e-12)
    np.testing.assert_allclose(atoms.get_forces(), 1e-3 * forces, rtol=1e-12)
    assert atoms.calc.results["energy_std"] == pytest.approx(1e-3 * std[0], rel=1e-12)


def test_save_and_load_give_the_same_predictions_and_std(fitted, data, tmp_path):
    mols, _ = data
    path = fitted.save(tmp_path / "u0.molntk.npz")
    for loaded in (SO3NTKSumRegressor.load(path), load_model(path)):
        assert type(loaded) is SO3NTKSumRegressor
        assert loaded.regressor_.weights_ == fitted.regressor_.weights_
        mean, std = loaded.predict(mols[30:], return_std=True)
        mean_f, std_f = fitted.predict(mols[30:], return_std=True)
        assert np.array_equal(mean, mean_f) and np.allclose(std, std_f, rtol=1e-12)
    with np.load(path, allow_pickle=False) as archive:
        meta = json.loads(archive["metadata"].tobytes().decode("utf-8"))
    assert meta["format"] == "molntk-so3-ntk-sum-regressor"
    assert meta["params"]["terms"] == [{"radial": LONG}]
    with pytest.raises(ModelFileError, match="molntk-so3-ntk-sum-regressor"):
        SO3NTKRegressor.load(path)


def test_a_file_without_the_sums_weights_is_a_damaged_file(fitted, tmp_path):
    path = fitted.save(tmp_path / "u0.molntk.npz")
    with np.load(path, allow_pickle=False) as archive:
        arrays = {k: archive[k] for k in archive.files if k != "regressor_sum_weights"}
    np.savez(tmp_path / "cut.npz", **arrays)
    with pytest.raises(ModelFileError, match="sum_weights"):
        SO3NTKSumRegressor.load(tmp_path / "cut.npz")


def test_clone_keeps_the_terms_and_weights(fitted):
    copy = clone(fitted)
    assert copy.terms == fitted.terms and copy.weights == fitted.weights and not hasattr(copy, "regressor_")


@pytest.mark.parametrize("params, name, message", [
    ({"terms": []}, "terms", "non-empty list"),
    ({"terms": {"radial": LONG}}, "terms", "non-empty list"),
    ({"terms": ["lift:3 erf pool dense"]}, r"terms\[0\]", "must be a dict"),
    ({"terms": [{"elements": (1, 6)}]}, r"terms\[0\]", "unknown or shared"),
    ({"terms": [{"radial": LONG}], "inducing": 20}, "inducing", "exact model"),
    ({"terms": [{"radial": LONG}], "weights": [-1.0]}, "weights", "≥ 0"),
])
def test_bad_terms_weights_or_a_sparse_sum_are_refused_naming_the_parameter(data, params, name, message):
    mols, y = data
    with pytest.raises(InputError, match=name) as err:
        SO3NTKSumRegressor(**params, **FAST).fit(mols[:5], y[:5])
    assert message in str(err.value)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_sum_matches_cpu(data):
    """The same sum fitted with its kernels on a CUDA device: the same weight, and means,
    stds and forces equal to the CPU's to 1e-8 of their scale (float64 on both; the kernels
    differ by summation order, ≈ 1e-15 relative, which the solve amplifies by at most its
    condition number, ≤ 1e4 relative to λ here, psd_rtol 1e-4)."""
    mols, y = data
    params = {"terms": [{"radial": LONG}], "weights": [0.0, 0.1, 1.0, 10.0], **FAST}
    cpu = SO3NTKSumRegressor(**params).fit(mols[:30], y[:30])
    gpu = SO3NTKSumRegressor(**params, device="cuda").fit(mols[:30], y[:30])
    assert gpu.device_ == "cuda"
    np.testing.assert_array_equal(gpu.regressor_.weights_, cpu.regressor_.weights_)
    (m_cpu, s_cpu), (m_gpu, s_gpu) = (model.predict(mols[30:], return_std=True) for model in (cpu, gpu))
    scale = np.abs(y[:30] - y[:30].mean()).max()
    np.testing.assert_allclose(m_gpu, m_cpu, rtol=0, atol=1e-8 * scale)
    np.testing.assert_allclose(s_gpu, s_cpu, rtol=0, atol=1e-8 * s_cpu.max())
    for f_cpu, f_gpu in zip(cpu.predict_forces(mols[30:33]), gpu.predict_forces(mols[30:33])):
        np.testing.assert_allclose(f_gpu, f_cpu, rtol=0, atol=1e-8 * np.abs(f_cpu).max())
