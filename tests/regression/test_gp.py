"""NNGP posterior (molntk.regression.gp): against dense solves and scikit-learn's
GaussianProcessRegressor."""

from __future__ import annotations

import numpy as np
from sklearn.gaussian_process import GaussianProcessRegressor
from sklearn.gaussian_process.kernels import DotProduct

from molntk.regression import KernelRegressor, eigensystem, nngp_posterior, nngp_variance
from tests.helpers.regression import feature_problem, rbf_problem, rel_err


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
    model = KernelRegressor("nngp", reg=reg, standardize=True, amplitude="none").fit(p["K"], p["Y"])
    mean, std = model.predict(p["K_test"], p["k_diag"], return_std=True, std_of="f")  # sklearn: the latent f
    assert rel_err(mean, ref_mean) < 1e-10
    np.testing.assert_allclose(std, ref_std, rtol=1e-7)
