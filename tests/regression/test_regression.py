"""Kernel regression: NTK mean at time t, NNGP / NTK-GP variances, λ selection, baselines.

Every closed form is checked against an independent dense computation (numpy solves,
scipy.linalg.expm, brute-force refits) or against scikit-learn.
"""

from __future__ import annotations

import inspect
import math
import pickle
import warnings

import numpy as np
import pytest
import scipy.linalg
import torch
from sklearn.gaussian_process import GaussianProcessRegressor
from sklearn.gaussian_process.kernels import DotProduct
from sklearn.base import clone
from sklearn.kernel_ridge import KernelRidge
from sklearn.metrics import mean_absolute_error, r2_score, root_mean_squared_error
from sklearn.model_selection import GridSearchCV, KFold
from sklearn.utils import get_tags

from molntk.data.molecule import Molecule
from molntk.errors import InputError
from molntk.regression import (
    DressedAtomModel,
    IllConditionedWarning,
    KernelRegressor,
    TargetScaler,
    eigensystem,
    element_counts,
    fold_ids,
    gcv_score,
    kfold_residuals,
    loo_residuals,
    mae,
    nngp_posterior,
    nngp_variance,
    ntk_filter,
    ntk_gp_variance,
    ntk_mean,
    r2,
    regression_metrics,
    rmse,
    select_regularizer,
)
from molntk.regression.selection import DEFAULT_RELATIVE_GRID
from molntk.regression.sparse import SparseKernelRegressor

# ----------------------------------------------------------------------------- helpers


def fitted_attributes(model: object) -> set[str]:
    """The public fitted attributes (scikit-learn's trailing underscore) of ``model``."""
    return {name for name in vars(model) if name.endswith("_") and not name.startswith("_")}


def feature_problem(n: int = 40, m: int = 9, d: int = 120, k: int = 3, seed: int = 0) -> dict[str, np.ndarray]:
    """Random-feature kernel K = Φ Φᵀ / d (full rank when d > n) with test rows and targets."""
    rng = np.random.default_rng(seed)
    phi, phi_test = rng.normal(size=(n, d)), rng.normal(size=(m, d))
    return {
        "phi": phi / math.sqrt(d),
        "phi_test": phi_test / math.sqrt(d),
        "K": phi @ phi.T / d,
        "K_test": phi_test @ phi.T / d,
        "k_diag": np.sum(phi_test**2, axis=1) / d,
        "Y": rng.normal(size=(n, k)) * [1.0, 3.0, 0.5][:k] + [2.0, -1.0, 0.0][:k],
    }


def rbf_problem(n: int = 60, m: int = 11, k: int = 2, seed: int = 1) -> dict[str, np.ndarray]:
    """Gaussian RBF kernel on 3-d points, smooth targets with noise."""
    rng = np.random.default_rng(seed)
    X, X_test = rng.uniform(-2, 2, size=(n, 3)), rng.uniform(-2, 2, size=(m, 3))

    def rbf(A: np.ndarray, B: np.ndarray) -> np.ndarray:
        return np.exp(-0.5 * ((A[:, None, :] - B[None, :, :]) ** 2).sum(-1))

    Y = np.stack([np.sin(X[:, 0]) + X[:, 1] ** 2, np.cos(X.sum(1))], axis=1)[:, :k] + 0.1 * rng.normal(size=(n, k))
    return {"K": rbf(X, X), "K_test": rbf(X_test, X), "k_diag": np.ones(m), "Y": Y}


def dense_M(theta: np.ndarray, t: float, lr: float, reg: float) -> np.ndarray:
    """M_t = (Θ + λI)⁻¹ (I - expm(-η (Θ + λI) t)) by dense linear algebra."""
    A = theta + reg * np.eye(len(theta))
    if math.isinf(t):
        return np.linalg.inv(A)
    return np.linalg.solve(A, np.eye(len(theta)) - scipy.linalg.expm(-lr * t * A))


def rel_err(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.max(np.abs(np.asarray(a) - np.asarray(b))) / np.max(np.abs(b)))


# ----------------------------------------------------------------------------- NTK mean


@pytest.mark.parametrize("problem", [feature_problem, rbf_problem])
@pytest.mark.parametrize("reg", [1e-3, 0.3])
def test_ntk_infinite_time_equals_kernel_ridge(problem, reg):
    p = problem()
    reference = KernelRidge(kernel="precomputed", alpha=reg).fit(p["K"], p["Y"]).predict(p["K_test"])
    eig = eigensystem(p["K"])
    assert rel_err(ntk_mean(eig, p["K_test"], p["Y"], reg=reg), reference) < 1e-10
    model = KernelRegressor("ntk", reg=reg, standardize=False).fit(p["K"], p["Y"])
    assert rel_err(model.predict(p["K_test"]), reference) < 1e-10
    # one target, given 1-d, comes back 1-d
    single = KernelRidge(kernel="precomputed", alpha=reg).fit(p["K"], p["Y"][:, 0]).predict(p["K_test"])
    out = KernelRegressor("ntk", reg=reg, standardize=False).fit(p["K"], p["Y"][:, 0]).predict(p["K_test"])
    assert out.shape == single.shape == (len(p["K_test"]),)
    assert rel_err(out, single) < 1e-10


def test_torch_inputs_give_the_same_predictions():
    p = feature_problem()
    numpy_model = KernelRegressor("ntk", reg=0.01).fit(p["K"], p["Y"])
    torch_model = KernelRegressor("ntk", reg=0.01).fit(torch.from_numpy(p["K"]), torch.from_numpy(p["Y"]))
    np.testing.assert_array_equal(torch_model.predict(torch.from_numpy(p["K_test"])), numpy_model.predict(p["K_test"]))


@pytest.mark.parametrize("reg", [0.0, 0.05])
def test_ntk_mean_at_finite_time_equals_expm(reg):
    p = feature_problem()
    eig = eigensystem(p["K"])
    for t, lr in [(0.5, 1.0), (3.0, 0.7), (40.0, 2.0)]:
        direct = p["K_test"] @ dense_M(p["K"], t, lr, reg) @ p["Y"]
        assert rel_err(ntk_mean(eig, p["K_test"], p["Y"], t=t, lr=lr, reg=reg), direct) < 1e-10


def test_ntk_mean_time_limits():
    p = feature_problem()
    eig = eigensystem(p["K"])
    assert np.all(ntk_mean(eig, p["K_test"], p["Y"], t=0.0) == 0.0)
    for reg in [0.0, 0.1]:
        limit = ntk_mean(eig, p["K_test"], p["Y"], reg=reg)
        a_min = eig.values[0] + reg
        errors = [rel_err(ntk_mean(eig, p["K_test"], p["Y"], t=c / a_min, reg=reg), limit) for c in (1.0, 5.0, 60.0)]
        assert errors[0] > errors[1] > errors[2]
        assert errors[2] < 1e-12  # e^{-60} left of the slowest mode


def test_ntk_filter_small_and_zero_eigenvalues():
    a = np.array([0.0, 1e-300, 1e-12, 1.0])
    np.testing.assert_allclose(ntk_filter(a, t=2.0, lr=0.5), [1.0, 1.0, 1.0 - 1e-12 / 2, 1.0 - math.exp(-1.0)], rtol=1e-14)
    np.testing.assert_array_equal(ntk_filter(np.array([0.0, 4.0])), [0.0, 0.25])


def test_ntk_mean_equals_gradient_descent_training():
    """Explicit gradient descent (Euler steps of the flow) on a linear model in feature space.

    Loss ½‖Φw - Y‖² + ½λ‖w‖², w₀ = 0, step h·η: w_N = H⁻¹ (I - (I - hηH)^N) Φᵀ Y with
    H = ΦᵀΦ + λI, while the flow gives e^{-ηHT}, T = N h, and φ(x)ᵀ w_T = μ_T(x) (push-through
    identity). For x = hηa ∈ [0, 1]: 0 ≤ e^{-Nx} - (1-x)^N ≤ N x²/2 · e^{-(N-1)x} ≤ x/2, so
    each eigencomponent of H⁻¹(...) is off by at most hη/2, and
    |φ(x)ᵀ(w_N - w_T)| ≤ (hη/2) ‖φ(x)‖ ‖ΦᵀY‖ per target: the tolerance used.
    """
    p = feature_problem(n=20, m=6, d=50, k=2, seed=3)
    phi, phi_test, Y = p["phi"], p["phi_test"], p["Y"]
    reg, lr, T, steps = 0.02, 1.0, 3.0, 3000
    h = T / steps
    a_max = np.linalg.eigvalsh(phi.T @ phi)[-1] + reg
    assert h * lr * a_max <= 1.0

    def loss(w: torch.Tensor) -> torch.Tensor:
        return 0.5 * ((torch.from_numpy(phi) @ w - torch.from_numpy(Y)) ** 2).sum() + 0.5 * reg * (w**2).sum()

    def gradient(w: np.ndarray) -> np.ndarray:
        return phi.T @ (phi @ w - Y) + reg * w

    # the hand-written gradient is autograd's gradient of the loss (checked at a random w)
    probe = torch.from_numpy(np.random.default_rng(0).normal(size=(phi.shape[1], 2))).requires_grad_()
    loss(probe).backward()
    np.testing.assert_allclose(gradient(probe.detach().numpy()), probe.grad.numpy(), rtol=1e-12)
    w = np.zeros((phi.shape[1], 2))
    for _ in range(steps):
        w -= h * lr * gradient(w)
    trained = phi_test @ w
    flow = ntk_mean(eigensystem(phi @ phi.T), phi_test @ phi.T, Y, t=T, lr=lr, reg=reg)
    bound = 0.5 * h * lr * np.outer(np.linalg.norm(phi_test, axis=1), np.linalg.norm(phi.T @ Y, axis=0))
    assert np.all(np.abs(trained - flow) <= bound)
    # the bound is tight enough to tell time T from convergence
    converged = ntk_mean(eigensystem(phi @ phi.T), phi_test @ phi.T, Y, reg=reg)
    assert np.max(np.abs(converged - flow)) > 20 * np.max(bound)


# ----------------------------------------------------------------------------- variances


def test_nngp_posterior_equals_dense_solve():
    p = rbf_problem()
    reg = 0.05
    A = p["K"] + reg * np.eye(len(p["K"]))
    mean_dense = p["K_test"] @ np.linalg.solve(A, p["Y"])
    var_dense = p["k_diag"] - np.einsum("ij,ji->i", p["K_test"], np.linalg.solve(A, p["K_test"].T))
    mean, var = nngp_posterior(eigensystem(p["K"]), p["K_test"], p["Y"], reg=reg, test_diag=p["k_diag"])
    assert rel_err(mean, mean_dense) < 1e-10
    np.testing.assert_allclose(var, var_dense, rtol=1e-8, atol=1e-12)
    assert np.all(var >= 0)
    # at the training points with a tiny noise the posterior variance vanishes, clipped at ≥ 0
    train_var = nngp_variance(eigensystem(p["K"]), p["K"], np.diag(p["K"]), reg=1e-12)
    assert np.all(train_var >= 0) and np.max(train_var) < 1e-6


def test_nngp_regressor_equals_sklearn_gaussian_process():
    """GPR with a fixed DotProduct(σ₀ = 0) kernel on features Φ is GP regression on K = ΦΦᵀ;
    its ``normalize_y`` is our per-target standardisation (mean, std with ddof 0)."""
    p = feature_problem(k=2)
    reg = 0.03
    gpr = GaussianProcessRegressor(
        DotProduct(sigma_0=0.0, sigma_0_bounds="fixed"), alpha=reg, optimizer=None, normalize_y=True
    ).fit(p["phi"], p["Y"])
    ref_mean, ref_std = gpr.predict(p["phi_test"], return_std=True)
    model = KernelRegressor("nngp", reg=reg, standardize=True).fit(p["K"], p["Y"])
    mean, std = model.predict(p["K_test"], p["k_diag"], return_std=True)
    assert rel_err(mean, ref_mean) < 1e-10
    np.testing.assert_allclose(std, ref_std, rtol=1e-7)


@pytest.mark.parametrize("reg", [0.0, 0.02])
@pytest.mark.parametrize("t", [0.0, 0.4, 5.0, math.inf])
def test_ntk_gp_variance_equals_dense_formula(reg, t):
    """Σ_t = K** + Θ* M_t K M_t Θ*ᵀ - 2 Θ* M_t K*ᵀ with M_t from expm; Θ, K different kernels."""
    # same inputs for both kernels: the NNGP features are a fixed nonlinear map of the NTK ones
    theta_p = feature_problem(seed=5)
    phi, phi_test = theta_p["phi"], theta_p["phi_test"]
    W = np.random.default_rng(7).normal(size=(phi.shape[1], 90))
    psi, psi_test = np.tanh(phi @ W), np.tanh(phi_test @ W)
    theta, theta_test = phi @ phi.T, phi_test @ phi.T
    K, K_test, k_diag = psi @ psi.T, psi_test @ psi.T, np.sum(psi_test**2, 1)
    lr = 0.8
    M = dense_M(theta, t, lr, reg) if t > 0 else np.zeros_like(theta)
    dense = k_diag + np.einsum("ij,ij->i", theta_test @ M @ K @ M.T, theta_test) - 2 * np.einsum("ij,ij->i", theta_test @ M, K_test)
    eig = eigensystem(theta)
    var = ntk_gp_variance(eig, eig.rotate(K), theta_test, K_test, k_diag, t=t, lr=lr, reg=reg)
    np.testing.assert_allclose(var, dense, rtol=1e-8, atol=1e-10 * np.max(k_diag))
    assert np.all(var >= 0)
    if t == 0:
        np.testing.assert_allclose(var, k_diag, rtol=1e-15)


def test_ntk_gp_variance_with_theta_equal_k_is_the_gp_posterior():
    """Θ = K, λ = 0, t = ∞: K** + K*K⁻¹KK⁻¹K*ᵀ - 2K*K⁻¹K*ᵀ = K** - K*K⁻¹K*ᵀ."""
    p = feature_problem()
    eig = eigensystem(p["K"])
    var = ntk_gp_variance(eig, eig.rotate(p["K"]), p["K_test"], p["K_test"], p["k_diag"])
    np.testing.assert_allclose(var, nngp_variance(eig, p["K_test"], p["k_diag"]), rtol=1e-8, atol=1e-12)


def test_ntk_regressor_std_is_scaled_ntk_gp_variance():
    p = feature_problem(k=2)
    rng = np.random.default_rng(11)
    psi = np.tanh(p["phi"] @ rng.normal(size=(p["phi"].shape[1], 70)))
    psi_test = np.tanh(p["phi_test"] @ rng.normal(size=(p["phi"].shape[1], 70)))
    K, K_test, k_diag = psi @ psi.T, psi_test @ psi.T, np.sum(psi_test**2, 1)
    model = KernelRegressor("ntk", t=2.0, lr=0.5, reg=0.01).fit(p["K"], p["Y"], K_nngp_train=K)
    mean, std = model.predict(p["K_test"], k_diag, return_std=True, K_nngp_test_train=K_test)
    eig = eigensystem(p["K"])
    var = ntk_gp_variance(eig, eig.rotate(K), p["K_test"], K_test, k_diag, t=2.0, lr=0.5, reg=0.01)
    sigma = p["Y"].std(axis=0)
    np.testing.assert_allclose(std, np.sqrt(var[:, None]) * sigma, rtol=1e-12)
    Z = (p["Y"] - p["Y"].mean(0)) / sigma
    np.testing.assert_allclose(mean, p["Y"].mean(0) + sigma * ntk_mean(eig, p["K_test"], Z, t=2.0, lr=0.5, reg=0.01), rtol=1e-12)


# ----------------------------------------------------------------------------- scikit-learn estimators


def test_estimators_are_cloned_with_their_parameters_only():
    """``clone`` (used by every scikit-learn search) copies the parameters as given and no
    fitted state; the clone refits to the same predictions."""
    p = feature_problem()
    counts = np.random.default_rng(0).integers(0, 5, size=(40, 3))
    cases = [
        (KernelRegressor("nngp", reg=0.1, relative_grid=[1e-3, 1e-1], solver="cholesky"), (p["K"], p["Y"]), p["K_test"]),
        (
            SparseKernelRegressor(reg="cv", cv="gcv", relative_grid=[1e-2, 1.0], rank_rtol=1e-10),
            (p["K"][:, :10], p["K"][:10, :10], p["Y"]),
            p["K_test"][:, :10],
        ),
        (DressedAtomModel(intercept=True, ridge=1e-8), (counts, p["Y"][:, 0]), counts[:5]),
    ]
    for estimator, fit_args, test_input in cases:
        twin = clone(estimator)
        assert twin is not estimator and twin.get_params() == estimator.get_params()
        estimator.fit(*fit_args)
        assert fitted_attributes(estimator) and not fitted_attributes(clone(estimator))
        np.testing.assert_array_equal(clone(estimator).fit(*fit_args).predict(test_input), estimator.predict(test_input))


def test_grid_search_over_reg_on_a_precomputed_kernel_equals_a_manual_loop():
    """GridSearchCV slices the precomputed kernel by rows and columns (the ``pairwise`` tag):
    its scores, best λ and refitted predictions equal k-fold R² of dense ridge solves."""
    p = rbf_problem(n=60, k=2, seed=4)
    K, Y = p["K"], p["Y"]
    grid = [1e-3, 1e-2, 1e-1, 1.0, 10.0]
    folds = KFold(n_splits=4, shuffle=True, random_state=0)
    assert get_tags(KernelRegressor()).input_tags.pairwise
    search = GridSearchCV(KernelRegressor("ntk", standardize=False), {"reg": grid}, cv=folds).fit(K, Y)
    scores = []
    for reg in grid:
        r2_folds = []
        for train, test in folds.split(K):
            pred = ridge_fit_predict(K, Y, train, test, reg)
            residual = ((Y[test] - pred) ** 2).sum(axis=0)
            total = ((Y[test] - Y[test].mean(axis=0)) ** 2).sum(axis=0)
            r2_folds.append(np.mean(1.0 - residual / total))  # R² averaged over the two targets
        scores.append(np.mean(r2_folds))
    # cond(K_fold + λI) ≤ ~1e5 at λ = 1e-3: eigh and LU solves agree to ~1e-11 relative.
    np.testing.assert_allclose(search.cv_results_["mean_test_score"], scores, rtol=1e-9)
    best = grid[int(np.argmax(scores))]
    assert 0 < grid.index(best) < len(grid) - 1  # an interior optimum: the comparison is not trivial
    assert search.best_params_ == {"reg": best} and search.best_estimator_.reg_ == best
    expected = p["K_test"] @ np.linalg.solve(K + best * np.eye(len(K)), Y)
    np.testing.assert_allclose(search.predict(p["K_test"]), expected, rtol=1e-9, atol=1e-12)


# ----------------------------------------------------------------------------- λ selection


def ridge_fit_predict(K: np.ndarray, Y: np.ndarray, train: np.ndarray, test: np.ndarray, reg: float) -> np.ndarray:
    A = K[np.ix_(train, train)] + reg * np.eye(len(train))
    return K[np.ix_(test, train)] @ np.linalg.solve(A, Y[train])


@pytest.mark.parametrize("reg", [1e-3, 0.1])
def test_loo_closed_form_equals_brute_force(reg):
    p = rbf_problem(n=30)
    K, Y = p["K"], p["Y"]
    brute = np.array([Y[i] - ridge_fit_predict(K, Y, np.delete(np.arange(30), i), np.array([i]), reg)[0] for i in range(30)])
    np.testing.assert_allclose(loo_residuals(eigensystem(K), Y, reg), brute, rtol=1e-8, atol=1e-10)


@pytest.mark.parametrize("reg", [1e-3, 0.1])
def test_kfold_block_inverse_equals_brute_force(reg):
    p = rbf_problem(n=32)
    K, Y = p["K"], p["Y"]
    folds = fold_ids(32, 5, seed=4)
    brute = np.empty_like(Y)
    for f in range(5):
        test, train = np.flatnonzero(folds == f), np.flatnonzero(folds != f)
        brute[test] = Y[test] - ridge_fit_predict(K, Y, train, test, reg)
    np.testing.assert_allclose(kfold_residuals(eigensystem(K), Y, reg, folds), brute, rtol=1e-8, atol=1e-10)


def test_fold_ids_are_deterministic_and_balanced():
    a, b, c = fold_ids(23, 5, seed=1), fold_ids(23, 5, seed=1), fold_ids(23, 5, seed=2)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)
    assert sorted(np.bincount(a).tolist()) == [4, 4, 5, 5, 5]


@pytest.mark.parametrize("t", [0.7, math.inf])
def test_gcv_matches_its_formula(t):
    p = feature_problem()
    K, Y, reg, lr, n = p["K"], p["Y"], 0.02, 1.5, len(p["K"])
    H = K @ dense_M(K, t, lr, reg)
    expected = np.mean(((np.eye(n) - H) @ Y) ** 2, axis=0) / (1 - np.trace(H) / n) ** 2
    np.testing.assert_allclose(gcv_score(eigensystem(K), Y, reg, t=t, lr=lr), expected, rtol=1e-9)


def test_kfold_at_finite_time_equals_per_fold_refits():
    p = feature_problem(n=30)
    K, Y, t, lr = p["K"], p["Y"], 1.3, 0.9
    folds = fold_ids(30, 4, seed=0)
    relative = np.array([1e-3, 1e-1])
    result = select_regularizer(eigensystem(K), Y, criterion="kfold", relative_grid=relative, n_folds=4, t=t, lr=lr, K_train=K)
    for row, reg in zip(result.scores_per_target, result.grid):
        residuals = np.empty_like(Y)
        for f in range(4):
            test, train = np.flatnonzero(folds == f), np.flatnonzero(folds != f)
            M = dense_M(K[np.ix_(train, train)], t, lr, reg)
            residuals[test] = Y[test] - K[np.ix_(test, train)] @ M @ Y[train]
        np.testing.assert_allclose(row, np.mean(residuals**2, axis=0), rtol=1e-9)


@pytest.mark.parametrize("criterion", ["loo", "kfold", "gcv"])
def test_chosen_reg_is_the_minimum_of_the_curve(criterion):
    p = rbf_problem()
    model = KernelRegressor("ntk", reg="cv", cv=criterion, n_folds=4, seed=3).fit(p["K"], p["Y"])
    curve = model.cv_result_
    assert curve.criterion == criterion
    assert len(curve.grid) == len(DEFAULT_RELATIVE_GRID)
    best = int(np.argmin(curve.scores))
    assert model.reg_ == curve.grid[best] == curve.best_reg
    np.testing.assert_allclose(curve.relative_grid, DEFAULT_RELATIVE_GRID)
    np.testing.assert_allclose(np.array(curve.grid) / np.mean(np.diag(p["K"])), DEFAULT_RELATIVE_GRID)
    np.testing.assert_allclose(curve.scores, np.mean(curve.scores_per_target, axis=1))
    # the curve is the one select_regularizer gives for the standardised targets
    Z = (p["Y"] - p["Y"].mean(0)) / p["Y"].std(0)
    direct = select_regularizer(eigensystem(p["K"]), Z, criterion=criterion, n_folds=4, seed=3)
    np.testing.assert_allclose(curve.scores, direct.scores, rtol=1e-12)
    assert fitted_attributes(model) >= {"reg_", "cv_result_", "condition_number_", "fit_seconds_", "eigenvalues_clipped_"}


def test_more_noise_selects_a_larger_regulariser():
    p = rbf_problem(n=80, k=1, seed=2)
    rng = np.random.default_rng(0)
    clean = p["Y"][:, 0]
    chosen = []
    for noise in (0.01, 3.0):
        y = clean + noise * rng.normal(size=80)
        chosen.append(KernelRegressor("nngp", cv="loo").fit(p["K"], y).reg_)
    assert chosen[1] > 100 * chosen[0]


def test_selection_sees_training_data_only():
    """Neither fit nor the selection take test data, and predicting changes nothing fitted."""
    assert list(inspect.signature(KernelRegressor.fit).parameters) == ["self", "K_train", "Y", "K_nngp_train"]
    selection_args = set(inspect.signature(select_regularizer).parameters)
    assert not {name for name in selection_args if "test" in name}
    p = rbf_problem()
    model = KernelRegressor("ntk", cv="kfold").fit(p["K"], p["Y"])
    fitted = pickle.dumps(vars(model))
    first = model.predict(p["K_test"])
    model.predict(np.random.default_rng(0).normal(size=(5, len(p["K"]))))
    assert pickle.dumps(vars(model)) == fitted
    np.testing.assert_array_equal(model.predict(p["K_test"]), first)


def test_loo_is_refused_at_finite_time():
    p = feature_problem()
    with pytest.raises(InputError) as err:
        KernelRegressor("ntk", t=1.0, cv="loo").fit(p["K"], p["Y"])
    assert err.value.source == "cv"
    with pytest.raises(InputError, match="LOO"):
        select_regularizer(eigensystem(p["K"]), p["Y"], criterion="loo", t=1.0)
    # finite t with k-fold or GCV works
    KernelRegressor("ntk", t=1.0, cv="gcv").fit(p["K"], p["Y"])
    KernelRegressor("ntk", t=1.0, cv="kfold", relative_grid=[1e-4, 1e-2]).fit(p["K"], p["Y"])


# ----------------------------------------------------------------------------- conditioning


def test_condition_number_clipping_and_warnings():
    p = feature_problem()
    eig = eigensystem(p["K"])
    for reg in (0.0, 0.1):
        np.testing.assert_allclose(eig.condition_number(reg), np.linalg.cond(p["K"] + reg * np.eye(len(p["K"]))), rtol=1e-6)
    # rank 10 < n = 40: rounding leaves tiny negative eigenvalues, which are clipped to 0
    phi = np.random.default_rng(0).normal(size=(40, 10))
    low_rank = phi @ phi.T
    eig = eigensystem(low_rank)
    assert eig.n_clipped > 0 and eig.min_raw < 0 and np.all(eig.values >= 0)
    assert eig.condition_number(0.0) == math.inf
    with pytest.warns(IllConditionedWarning, match="nearly singular"):
        KernelRegressor("ntk", reg=0.0).fit(low_rank, np.ones(40))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model = KernelRegressor("ntk", reg=1.0).fit(low_rank, np.arange(40.0))
    assert model.eigenvalues_clipped_ == eig.n_clipped
    assert model.condition_number_ == pytest.approx(np.linalg.cond(low_rank + np.eye(40)), rel=1e-8)
    # a clearly indefinite matrix is not a kernel
    with pytest.raises(InputError, match="positive semi-definite") as err:
        eigensystem(low_rank - 0.5 * np.eye(40))
    assert err.value.source == "K_train"


# ----------------------------------------------------------------------------- standardisation, baselines, metrics


def test_target_standardisation_round_trip():
    rng = np.random.default_rng(0)
    Y = rng.normal(size=(50, 3)) * [1e-3, 1.0, 1e4] + [5.0, -2.0, 1e5]
    Y[:, 1] = 7.0  # a constant target keeps scale 1
    scaler = TargetScaler.fit(Y)
    Z = scaler.transform(Y)
    np.testing.assert_allclose(Z.mean(0), 0.0, atol=1e-12)
    np.testing.assert_allclose(Z[:, [0, 2]].std(0), 1.0, rtol=1e-12)
    assert scaler.scale[1] == 1.0
    np.testing.assert_allclose(scaler.inverse_transform(Z), Y, rtol=1e-14)
    np.testing.assert_allclose(scaler.inverse_transform_variance(np.ones(4)), np.tile(scaler.scale**2, (4, 1)))
    identity = TargetScaler.fit(Y, enabled=False)
    np.testing.assert_array_equal(identity.transform(Y), Y)


def test_standardised_regressor_is_affine_equivariant():
    """Standardised fits of Y and of a Y + b give a ŷ + b (the same model in other units)."""
    p = rbf_problem()
    a, b = np.array([1e3, -2.0]), np.array([-5.0, 1e4])
    base = KernelRegressor("ntk", reg=0.01).fit(p["K"], p["Y"]).predict(p["K_test"])
    moved = KernelRegressor("ntk", reg=0.01).fit(p["K"], a * p["Y"] + b).predict(p["K_test"])
    np.testing.assert_allclose(moved, a * base + b, rtol=1e-10)


def test_dressed_atom_model_recovers_per_element_weights():
    rng = np.random.default_rng(0)
    counts = rng.integers(0, 10, size=(60, 5))
    weights = np.array([[-0.5, 2.0], [-37.8, 1.0], [-54.6, 0.5], [-75.1, -3.0], [-99.7, 7.0]])
    y = counts @ weights
    model = DressedAtomModel().fit(counts, y)
    np.testing.assert_allclose(model.coef_, weights, rtol=1e-9)
    np.testing.assert_allclose(model.residual(counts, y), 0.0, atol=1e-10 * np.max(np.abs(y)))  # ridge bias ~ 1e-12 · κ²
    with_intercept = DressedAtomModel(intercept=True).fit(counts, y[:, 0] + 12.5)
    np.testing.assert_allclose(with_intercept.coef_, weights[:, 0], rtol=1e-9)
    assert float(with_intercept.intercept_) == pytest.approx(12.5, rel=1e-9)
    assert with_intercept.predict(counts[:3]).shape == (3,)
    # an element absent from the training data gets weight 0 instead of a singular solve
    counts[:, 4] = 0
    np.testing.assert_allclose(DressedAtomModel().fit(counts, counts @ weights[:, 0]).coef_[4], 0.0, atol=1e-12)


def test_element_counts_from_molecules():
    water = Molecule(numbers=[8, 1, 1], positions=[[0, 0, 0], [0.96, 0, 0], [-0.24, 0.93, 0]], id="water")
    methane = Molecule(
        numbers=[6, 1, 1, 1, 1], positions=[[0, 0, 0], [0.63, 0.63, 0.63], [-0.63, -0.63, 0.63], [-0.63, 0.63, -0.63], [0.63, -0.63, -0.63]], id="methane"
    )
    counts = element_counts([water, methane], ["H", "C", 8])
    np.testing.assert_array_equal(counts, [[2, 0, 1], [4, 1, 0]])
    with pytest.raises(InputError, match="not in elements") as err:
        element_counts([water], [1, 6])
    assert "water" in err.value.source
    with pytest.raises(InputError) as err:
        element_counts([water], [1, 1, 8])
    assert err.value.source == "elements"


def test_metrics_match_sklearn():
    rng = np.random.default_rng(0)
    y, pred = rng.normal(size=(30, 3)), rng.normal(size=(30, 3))
    np.testing.assert_allclose(mae(y, pred), mean_absolute_error(y, pred, multioutput="raw_values"), rtol=1e-14)
    np.testing.assert_allclose(rmse(y, pred), root_mean_squared_error(y, pred, multioutput="raw_values"), rtol=1e-14)
    np.testing.assert_allclose(r2(y, pred), r2_score(y, pred, multioutput="raw_values"), rtol=1e-13)
    assert r2(y[:, 0], pred[:, 0]) == pytest.approx(r2_score(y[:, 0], pred[:, 0]), rel=1e-13)
    summary = regression_metrics(y[:, 1], pred[:, 1])
    assert summary["mae"] == pytest.approx(mean_absolute_error(y[:, 1], pred[:, 1]), rel=1e-14)
    assert math.isnan(r2(np.ones(5), np.arange(5.0)))


# ----------------------------------------------------------------------------- bad input


def _with_nan(array: np.ndarray, index: tuple[int, ...]) -> np.ndarray:
    array = array.copy()
    array[index] = np.nan
    return array


BASE = feature_problem(n=12, m=4, d=30, k=2)


@pytest.mark.parametrize(
    ("overrides", "source", "message"),
    [
        ({"K_train": BASE["K"][:, :11]}, "K_train", "square"),
        ({"K_train": _with_nan(BASE["K"], (3, 3))}, "K_train", "non-finite"),
        ({"K_train": BASE["K"] + np.triu(np.ones((12, 12)), 1)}, "K_train", "symmetric"),
        ({"Y": BASE["Y"][:11]}, "Y", "12 rows"),
        ({"Y": _with_nan(BASE["Y"], (0, 1))}, "Y", "non-finite"),
        ({"Y": np.zeros((12, 2, 2))}, "Y", "shape"),
    ],
)
def test_bad_fit_inputs_name_the_argument(overrides, source, message):
    args = {"K_train": BASE["K"], "Y": BASE["Y"], **overrides}
    with pytest.raises(InputError, match=message) as err:
        KernelRegressor("ntk", reg=0.1).fit(args["K_train"], args["Y"])
    assert err.value.source == source


def test_bad_predict_inputs_name_the_argument():
    model = KernelRegressor("ntk", reg=0.1).fit(BASE["K"], BASE["Y"], K_nngp_train=BASE["K"])
    cases = [
        ({"K_test_train": BASE["K_test"][:, :5]}, "K_test_train"),
        ({"K_test_train": _with_nan(BASE["K_test"], (1, 2))}, "K_test_train"),
        ({"k_test_diag": BASE["k_diag"][:3], "return_std": True, "K_nngp_test_train": BASE["K_test"]}, "k_test_diag"),
        ({"k_test_diag": BASE["k_diag"], "return_std": True}, "K_nngp_test_train"),
        ({"return_std": True}, "k_test_diag"),
        ({"k_test_diag": BASE["k_diag"], "return_std": True, "K_nngp_test_train": BASE["K_test"][:2]}, "K_nngp_test_train"),
    ]
    for overrides, source in cases:
        args = {"K_test_train": BASE["K_test"], **overrides}
        with pytest.raises(InputError) as err:
            model.predict(**args)
        assert err.value.source == source, overrides
    no_nngp = KernelRegressor("ntk", reg=0.1).fit(BASE["K"], BASE["Y"])
    with pytest.raises(InputError) as err:
        no_nngp.predict(BASE["K_test"], BASE["k_diag"], return_std=True, K_nngp_test_train=BASE["K_test"])
    assert err.value.source == "K_nngp_train"
    with pytest.raises(InputError, match="before fit"):
        KernelRegressor().predict(BASE["K_test"])


@pytest.mark.parametrize(
    ("kwargs", "source"),
    [
        ({"method": "svm"}, "method"),
        ({"cv": "bootstrap"}, "cv"),
        ({"reg": -1.0}, "reg"),
        ({"reg": "auto"}, "reg"),
        ({"t": -1.0}, "t"),
        ({"lr": 0.0}, "lr"),
        ({"method": "nngp", "t": 1.0}, "t"),
        ({"n_folds": 1}, "n_folds"),
    ],
)
def test_bad_settings_name_the_argument(kwargs, source):
    model = KernelRegressor(**kwargs)  # parameters are stored as given (scikit-learn) and checked by fit
    with pytest.raises(InputError) as err:
        model.fit(BASE["K"], BASE["Y"])
    assert err.value.source == source


def test_dressed_atom_bad_input():
    with pytest.raises(InputError) as err:
        DressedAtomModel().fit(-np.ones((3, 2)), np.zeros(3))
    assert err.value.source == "counts"
    with pytest.raises(InputError) as err:
        DressedAtomModel().fit(np.ones((3, 2)), np.zeros(4))
    assert err.value.source == "y"
    model = DressedAtomModel().fit(np.eye(3), np.arange(3.0))
    with pytest.raises(InputError) as err:
        model.predict(np.ones((2, 4)))
    assert err.value.source == "counts"
