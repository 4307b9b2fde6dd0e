"""NTK regression (molntk.regression.ntk): the mean at time t against kernel ridge, the matrix
exponential and gradient-descent training; the NTK-GP variance against its dense formula."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from sklearn.kernel_ridge import KernelRidge

from molntk.regression import KernelRegressor, eigensystem, nngp_variance, ntk_filter, ntk_gp_variance, ntk_mean
from tests.helpers.regression import dense_M, feature_problem, rbf_problem, rel_err


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


# ----------------------------------------------------------------------------- NTK-GP variance


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
