"""``blocked_cholesky``: the in-place blocked factor against LAPACK's (numpy), and the exact
solver's Cholesky path on it."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.linalg

from molntk.errors import InputError
from molntk.regression import blocked_cholesky
from molntk.regression.blocked_cholesky import SymmetricBackup, cholesky_solve_in_place, upper_cholesky_in_place
from molntk.regression.solvers import cholesky_factor, cholesky_solve


@pytest.mark.parametrize("block", [7, 10, 64])  # blocks that do not, do, and (one block) divide m = 30
def test_blocked_in_place_cholesky_is_lapacks_factor(block: int) -> None:
    """The blocked factor equals numpy's (LAPACK) Cholesky of the same SPD matrix (cond ≈ 1e3:
    factors agree to ≈ eps · √cond ≈ 1e-14 relative; tolerance 1e-12), the strict lower
    triangle outside the diagonal blocks is untouched, and a matrix that is not positive
    definite is reported at its first bad pivot, as LAPACK's info."""
    rng = np.random.default_rng(16)
    U, _ = np.linalg.qr(rng.normal(size=(30, 30)))
    A = (U * np.geomspace(10.0, 0.01, 30)) @ U.T
    A = 0.5 * (A + A.T)
    kept = A.copy()
    assert upper_cholesky_in_place(A, block) == 0
    expected = np.linalg.cholesky(kept).T
    np.testing.assert_allclose(np.triu(A), expected, rtol=0, atol=1e-12 * np.abs(expected).max())
    outside = np.tril(np.ones((30, 30), dtype=bool), -1)
    for start in range(0, 30, block):
        outside[start : start + block, start : start + block] = False
    np.testing.assert_array_equal(A[outside], kept[outside])
    indefinite = np.diag(np.r_[np.ones(12), -1.0, np.ones(17)])
    assert upper_cholesky_in_place(indefinite, block) == 13


def test_exact_solver_factor_spans_several_blocks(monkeypatch) -> None:
    """cholesky_factor with blocks of 4 rows on a 13 × 13 kernel whose strict upper triangle
    holds garbage (only the lower triangle is read): L Lᵀ = K + λI to rounding (cond ≈ 1e2:
    1e-12 relative), and the solve equals numpy's dense solve."""
    monkeypatch.setattr(blocked_cholesky, "CHOLESKY_BLOCK", 4)
    rng = np.random.default_rng(17)
    X = rng.normal(size=(13, 3))
    K = np.exp(-0.5 * ((X[:, None] - X[None]) ** 2).sum(-1))
    garbage = K + np.triu(rng.normal(size=(13, 13)), 1)
    L = cholesky_factor(garbage, 0.1)
    np.testing.assert_allclose(np.tril(L) @ np.tril(L).T, K + 0.1 * np.eye(13), rtol=0, atol=1e-12)
    Y = rng.normal(size=13)
    np.testing.assert_allclose(cholesky_solve(garbage, Y, 0.1).x, np.linalg.solve(K + 0.1 * np.eye(13), Y), rtol=1e-10)
    with pytest.raises(InputError, match="K_train: K \\+ λI is not positive definite"):
        cholesky_factor(-np.eye(13), 0.0)


@pytest.mark.parametrize("order", ["C", "F"])  # FCHL19's kernels come Fortran-ordered from qmllib
def test_solve_in_place_says_none_when_not_positive_definite_and_restores_the_matrix(order: str) -> None:
    """1,500 × 1,500 (two blocks of 1,024): a failed factorisation and a successful solve each
    leave the matrix exactly as it was; the solve's residual is at rounding (cond ≈ 1e4)."""
    rng = np.random.default_rng(0)
    A = rng.normal(size=(1500, 1500))
    K = np.array(A @ A.T / 1500, order=order)
    K[0, 1] = K[1, 0] = 100.0
    before = K.copy()
    assert cholesky_solve_in_place(K, np.ones(1500), 1e-8, SymmetricBackup(K)) is None
    np.testing.assert_array_equal(K, before)
    K[0, 1] = K[1, 0] = 0.0
    before = K.copy()
    y = rng.normal(size=1500)
    coef = cholesky_solve_in_place(K, y, 1e-3, SymmetricBackup(K))
    np.testing.assert_array_equal(K, before)
    np.testing.assert_allclose((K + 1e-3 * np.eye(1500)) @ coef, y, atol=1e-9)


@pytest.mark.parametrize("m", [2300, 64])
def test_row_panels_of_the_upper_triangle_factor_and_solve_like_lapack(m: int) -> None:
    """The upper triangle alone, as row panels of 1,024 rows (2,300: two whole panels and a
    partial one; 64: one) with nothing below the diagonal (the panels' diagonal blocks zero
    there, as a configuration-ordered kernel leaves them): their factor is LAPACK's of the
    whole matrix and the solve is ``scipy.linalg.cho_solve``'s. The matrix is well conditioned
    (cond ≈ 1e3), so the two orders of summation agree to ≈ 1e-13 relative; bound 1e-10.
    Progress: one report per panel, in block updates, (P − k)(P − k + 1)/2 for panel k, to
    P(P + 1)(P + 2)/6 of as many."""
    rng = np.random.default_rng(1)
    x = rng.normal(size=(m, m + 10))
    A = x @ x.T / m + np.eye(m)
    panels = blocked_cholesky.upper_panels(m)
    assert [p.shape for p in panels] == [(k.stop - k.start, m - k.start) for k in blocked_cholesky.row_slices(m, 1024)]
    for p, k in zip(panels, blocked_cholesky.row_slices(m, 1024)):
        p[:] = np.triu(A[k, k.start :])  # the upper triangle only
    shift = rng.uniform(0.1, 0.2, size=m)
    blocked_cholesky.add_to_panels_diagonal(panels, shift)
    reports = []
    assert blocked_cholesky.upper_cholesky_panels(panels, lambda done, total: reports.append((done, total))) == 0
    p_count = len(panels)
    total = p_count * (p_count + 1) * (p_count + 2) // 6
    assert reports == [(sum((p_count - j) * (p_count - j + 1) // 2 for j in range(k + 1)), total) for k in range(p_count)]
    assert reports[-1] == (total, total)
    T = np.linalg.cholesky(A + np.diag(shift)).T
    for p, k in zip(panels, blocked_cholesky.row_slices(m, 1024)):
        np.testing.assert_allclose(np.triu(p), T[k, k.start :], rtol=0, atol=1e-10 * np.abs(T).max())
    y = rng.normal(size=(m, 2))
    expected = scipy.linalg.cho_solve((T, False), y)
    np.testing.assert_allclose(blocked_cholesky.upper_panels_solve(panels, y), expected, rtol=0,
                               atol=1e-10 * np.abs(expected).max())
    np.testing.assert_allclose(blocked_cholesky.upper_panels_solve(panels, y[:, 0]), expected[:, 0], rtol=0,
                               atol=1e-10 * np.abs(expected).max())


def test_row_panels_report_the_first_pivot_that_is_not_positive() -> None:
    """A matrix whose leading 1,500 × 1,500 block is positive definite and whose row 1,500 is
    not (a negative diagonal entry with no coupling): LAPACK's info, the 1-based row 1,501."""
    m = 2000
    A = np.eye(m)
    A[1500, 1500] = -1.0
    panels = blocked_cholesky.upper_panels(m)
    for p, k in zip(panels, blocked_cholesky.row_slices(m, 1024)):
        p[:] = A[k, k.start :]
    assert blocked_cholesky.upper_cholesky_panels(panels) == 1501
