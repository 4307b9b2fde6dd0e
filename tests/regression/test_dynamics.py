"""The time-t NTK predictor (molntk.regression.dynamics, and steps= of molntk.regression.ntk):
μ_t against the matrix exponential, discrete gradient descent against the matrix power and
against gradient descent on the linear model, t → ∞ against kernel ridge, and the entry point
on a library kernel."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.linalg
import torch
from sklearn.kernel_ridge import KernelRidge

from molntk.kernels.cn import gcnn
from molntk.kernels.result import Kernels
from molntk.regression import NTKDynamics, eigensystem, kernel_matrices, ntk_filter, ntk_gp_variance, ntk_mean
from tests.helpers.regression import feature_problem, rel_err


def test_mean_at_time_t_is_the_closed_form_with_expm():
    p = feature_problem()
    dyn = NTKDynamics.fit(p["K"], p["Y"], lr=0.7)
    times = [0.3, 2.0, 25.0]
    means = dyn.means(p["K_test"], times=times)
    for t, mean in zip(times, means):
        closed = p["K_test"] @ np.linalg.solve(p["K"], np.eye(len(p["K"])) - scipy.linalg.expm(-0.7 * t * p["K"])) @ p["Y"]
        # a solve against an (n = 40) kernel of condition ~1e2: agreement to ~1e-12 is rounding
        assert rel_err(mean, closed) < 1e-10


def test_mean_tends_to_kernel_ridge_as_t_grows():
    p = feature_problem()
    reg = 0.05
    ridge = KernelRidge(kernel="precomputed", alpha=reg).fit(p["K"], p["Y"]).predict(p["K_test"])
    dyn = NTKDynamics.fit(p["K"], p["Y"], reg=reg)
    slowest = eigensystem(p["K"]).values[0] + reg
    errors = [rel_err(dyn.mean(p["K_test"], t=c / slowest), ridge) for c in (1.0, 10.0, 40.0)]
    assert errors[0] > errors[1] > errors[2]
    assert errors[2] < 1e-12  # e^{-40} ≈ 4e-18 of the slowest mode is left
    assert rel_err(dyn.mean(p["K_test"]), ridge) < 1e-10  # t = ∞ is kernel ridge itself


def test_gradient_descent_steps_are_the_matrix_power():
    p = feature_problem()
    K, lr = p["K"], 1.5 / np.linalg.eigvalsh(p["K"])[-1]  # η λ_max = 1.5: oscillating modes (1 - η a < 0) too
    n = len(K)
    for steps in (1, 7, 60):
        M = np.linalg.solve(K, np.eye(n) - np.linalg.matrix_power(np.eye(n) - lr * K, steps))
        out = ntk_mean(eigensystem(K), p["K_test"], p["Y"], lr=lr, steps=steps)
        assert rel_err(out, p["K_test"] @ M @ p["Y"]) < 1e-10


def test_gradient_descent_steps_follow_the_linear_model_trained_by_gradient_descent():
    """μ_s is exactly the prediction of f(x) = φ(x)·w trained from w = 0 by s steps
    w ← w - η ∇ ½‖Φw - Y‖² (its NTK is Φ Φᵀ)."""
    p = feature_problem()
    phi, phi_test, Y = p["phi"], p["phi_test"], p["Y"]
    lr, steps = 0.8 / np.linalg.eigvalsh(p["K"])[-1], 50
    w = np.zeros((phi.shape[1], Y.shape[1]))
    for _ in range(steps):
        w -= lr * phi.T @ (phi @ w - Y)
    out = ntk_mean(eigensystem(phi @ phi.T), phi_test @ phi.T, Y, lr=lr, steps=steps)
    assert rel_err(out, phi_test @ w) < 1e-10


def test_gradient_descent_tends_to_gradient_flow_for_small_steps():
    p = feature_problem()
    eig, t = eigensystem(p["K"]), 3.0
    flow = ntk_mean(eig, p["K_test"], p["Y"], t=t)
    errors = [rel_err(ntk_mean(eig, p["K_test"], p["Y"], lr=t / s, steps=s), flow) for s in (10, 100, 1000)]
    # first order in η: the error falls 10× per 10× more steps (within a factor 1.5 either way)
    assert 6 < errors[0] / errors[1] < 15 and 6 < errors[1] / errors[2] < 15


def test_filter_rejects_time_and_steps_together():
    with pytest.raises(ValueError, match="not both"):
        ntk_filter(np.ones(3), t=1.0, steps=3)
    with pytest.raises(ValueError, match="steps"):
        ntk_mean(eigensystem(np.eye(2)), np.eye(2), np.ones(2), steps=-1)
    np.testing.assert_array_equal(ntk_filter(np.array([0.0]), lr=0.5, steps=6), [3.0])  # g_s(0) = η s


def test_variance_after_steps_matches_the_dense_formula():
    p = feature_problem()
    rng = np.random.default_rng(3)
    psi = rng.normal(size=(p["phi"].shape[1], 30)) / np.sqrt(30)
    K_nngp = (p["phi"] @ psi) @ (p["phi"] @ psi).T  # an NNGP kernel other than Θ
    K_cross = (p["phi_test"] @ psi) @ (p["phi"] @ psi).T
    K_diag = np.sum((p["phi_test"] @ psi) ** 2, axis=1)
    lr, steps = 0.5 / np.linalg.eigvalsh(p["K"])[-1], 30
    n = len(p["K"])
    M = np.linalg.solve(p["K"], np.eye(n) - np.linalg.matrix_power(np.eye(n) - lr * p["K"], steps))
    P = p["K_test"] @ M
    dense = K_diag + np.einsum("ij,jk,ik->i", P, K_nngp, P) - 2 * np.einsum("ij,ij->i", P, K_cross)
    dyn = NTKDynamics.fit(p["K"], p["Y"], nngp_train=K_nngp, lr=lr)
    assert rel_err(dyn.variance(p["K_test"], K_cross, K_diag, steps=steps), dense) < 1e-9
    eig = eigensystem(p["K"])
    same = ntk_gp_variance(eig, eig.rotate(K_nngp), p["K_test"], K_cross, K_diag, lr=lr, steps=steps)
    np.testing.assert_allclose(same, dyn.variance(p["K_test"], K_cross, K_diag, steps=steps), rtol=1e-12)


def test_entry_point_on_a_library_kernel():
    """NTKDynamics.from_kernel on the C4 GCNN's kernel equals the fit on its matrices, and
    kernel_matrices reads Kernels, mappings and bare matrices alike."""
    torch.manual_seed(0)
    x_train, x_test = torch.randn(6, 1, 5, 5, dtype=torch.float64), torch.randn(3, 1, 5, 5, dtype=torch.float64)
    y = np.arange(6.0)
    net = gcnn(4, 1, head=0)
    dyn = NTKDynamics.from_kernel(net.kernel, x_train, y, lr=0.3)
    cross = net.kernel(x_test, x_train)
    train = net.kernel(x_train)
    reference = NTKDynamics.fit(train.ntk, y, nngp_train=train.nngp, lr=0.3)
    np.testing.assert_array_equal(dyn.mean(cross.ntk, t=2.0), reference.mean(cross.ntk.numpy(), t=2.0))
    assert dyn.nngp_rotated is not None
    nngp, ntk = kernel_matrices({"nngp": cross.nngp, "ntk": cross.ntk})
    np.testing.assert_array_equal(ntk, kernel_matrices(cross)[1])
    assert kernel_matrices(cross.ntk)[0] is None
    with pytest.raises(ValueError, match="no NTK"):
        kernel_matrices(Kernels(nngp=cross.nngp, ntk=None))
    with pytest.raises(ValueError, match="nngp_train"):
        NTKDynamics.fit(train.ntk, y).variance(cross.ntk, nngp, np.ones(3))
