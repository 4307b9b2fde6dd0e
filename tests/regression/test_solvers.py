"""Large-N solvers (molntk.regression.solvers): Cholesky, PCG with its preconditioners and
Nyström, against numpy's dense solve."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from molntk.regression.solvers import cholesky_solve, nystrom_solve, pcg_solve, solver_errors


@pytest.fixture(scope="module")
def problem() -> tuple[np.ndarray, np.ndarray, float]:
    """An RBF kernel on 300 points in 3-d, three targets, λ = 0.1 (cond(K + λI) ≈ 10³)."""
    rng = np.random.default_rng(1)
    x = rng.normal(size=(300, 3))
    K = np.exp(-((x[:, None] - x[None]) ** 2).sum(-1) / 2)
    return K, rng.normal(size=(300, 3)), 0.1


def test_cholesky_and_pcg_agree_with_numpy_solve(problem):
    K, Y, reg = problem
    exact = np.linalg.solve(K + reg * np.eye(len(K)), Y)
    scale = np.abs(exact).max()
    assert np.abs(cholesky_solve(K, Y, reg).x - exact).max() <= 1e-10 * scale
    for preconditioner in ("pivoted-cholesky", "jacobi"):
        sol = pcg_solve(K, Y, reg, preconditioner=preconditioner, rank=40, tol=1e-11)
        assert sol.residual <= 1e-11 and sol.iterations < len(K), preconditioner
        # ‖x − x*‖/‖x*‖ ≤ cond · residual ≈ 10³ · 1e-11
        assert np.abs(sol.x - exact).max() <= 1e-7 * scale, preconditioner
    one = pcg_solve(K, Y[:, 0], reg, tol=1e-11)
    assert one.x.shape == (300,) and np.abs(one.x - exact[:, 0]).max() <= 1e-7 * scale


def test_pivoted_cholesky_preconditioner_needs_fewer_iterations(problem):
    K, Y, reg = problem
    jacobi = pcg_solve(K, Y, reg, preconditioner="jacobi", tol=1e-10)
    pivoted = pcg_solve(K, Y, reg, preconditioner="pivoted-cholesky", rank=60, tol=1e-10)
    assert pivoted.iterations < jacobi.iterations


def test_nystrom_error_is_reported_and_decreases_with_inducing_points(problem):
    K, Y, reg = problem
    rows = solver_errors(K, Y, reg, preconditioners=("pivoted-cholesky",), rank=40, tol=1e-11, inducing_sizes=(10, 40, 120, 300))
    assert [r["method"] for r in rows] == ["cholesky", "pcg-pivoted-cholesky"] + ["nystrom"] * 4
    assert rows[1]["solution_error"] < 1e-7
    nystrom = rows[2:]
    for key in ("solution_error", "fit_error"):
        errors = [r[key] for r in nystrom]
        assert all(a > b for a, b in itertools.pairwise(errors)), (key, errors)
        assert errors[0] > 1e-3 and errors[-1] < 1e-8, (key, errors)  # m = n is the exact solve


def test_nystrom_predicts_from_inducing_columns_only(problem):
    K, Y, reg = problem
    idx = np.arange(0, 300, 3)
    sol = nystrom_solve(K[:, idx], K[np.ix_(idx, idx)], Y, reg, inducing=idx)
    # K̃ X = K_nS W_S, with K̃ = K_nS K_SS⁻¹ K_Sn
    K_tilde = K[:, idx] @ np.linalg.solve(K[np.ix_(idx, idx)], K[idx])
    np.testing.assert_allclose(K[:, idx] @ sol.inducing_weights, K_tilde @ sol.x, rtol=1e-6, atol=1e-8 * np.abs(K_tilde @ sol.x).max())
    np.testing.assert_allclose((K_tilde + reg * np.eye(300)) @ sol.x, Y, atol=1e-6)
