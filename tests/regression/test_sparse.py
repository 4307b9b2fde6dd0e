"""Sparse (Nyström, subset-of-regressors) kernel ridge: ``SparseKernelRegressor``.

Every result is checked against an independent computation: the exact eigh regressor when the
inducing set is the whole training set, exact ridge on an atom-decomposed kernel, brute-force
leave-one-out refits, explicit GCV, scikit-learn's Ridge on the Nyström features, and
:func:`~molntk.regression.solvers.nystrom_solve`.

The RBF kernels below (length 0.7 on points uniform in [-2, 2]³) have condition numbers of
about 40 (40 points) and 1.5e3 (60 points), so float64 solves keep ≳ 12 significant digits
and the tolerances of 1e-9 leave a margin of ~1000 over the rounding error.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from sklearn.linear_model import Ridge

from molntk.errors import InputError
from molntk.regression import IllConditionedWarning, KernelRegressor
from molntk.regression import blocked_cholesky
from molntk.regression.nystrom import factor_inducing
from molntk.regression.selection import DEFAULT_RELATIVE_GRID
from molntk.regression.solvers import nystrom_solve
from molntk.regression.sparse import SparseKernelRegressor, sparse_loo_residuals


def rbf(A: np.ndarray, B: np.ndarray, length: float = 0.7) -> np.ndarray:
    return np.exp(-0.5 * ((A[:, None, :] - B[None, :, :]) ** 2).sum(-1) / length**2)


def problem(n: int = 25, m: int = 8, t: int = 7, k: int = 1, seed: int = 0) -> dict[str, np.ndarray]:
    """n training points, the first m of them inducing, t test points, smooth noisy targets."""
    rng = np.random.default_rng(seed)
    X, X_test = rng.uniform(-2, 2, size=(n, 3)), rng.uniform(-2, 2, size=(t, 3))
    S = X[:m]
    Y = np.stack([np.sin(X[:, 0]) + X[:, 1] ** 2, np.cos(X.sum(1)), X[:, 2]], axis=1)[:, :k]
    Y = Y + 0.1 * rng.normal(size=Y.shape) + [3.0, -1.0, 0.5][:k]
    return {
        "X": X,
        "X_test": X_test,
        "S": S,
        "K_nm": rbf(X, S),
        "K_mm": rbf(S, S),
        "K_tm": rbf(X_test, S),
        "Y": Y[:, 0] if k == 1 else Y,
    }


def nystrom_kernel(p: dict[str, np.ndarray]) -> np.ndarray:
    """K̃ = K_nm K_mm⁻¹ K_mn by a dense solve (K_mm is well conditioned here)."""
    return p["K_nm"] @ np.linalg.solve(p["K_mm"], p["K_nm"].T)


# ------------------------------------------------------------------ exact limits


def test_all_training_points_as_inducing_matches_kernel_regressor() -> None:
    rng = np.random.default_rng(1)
    X, X_test = rng.uniform(-2, 2, size=(40, 3)), rng.uniform(-2, 2, size=(9, 3))
    K, K_test = rbf(X, X), rbf(X_test, X)
    Y = np.sin(X[:, 0]) + X[:, 1] ** 2 + 0.1 * rng.normal(size=40)
    reg = 1e-3
    sparse = SparseKernelRegressor(reg=reg).fit(K, K, Y)
    exact = KernelRegressor("ntk", reg=reg).fit(K, Y)
    # K̃ = K K⁻¹ K = K (cond(K) ≈ 40, no eigenvalue dropped): the same ridge problem, rounding only.
    np.testing.assert_allclose(sparse.predict(K_test), exact.predict(K_test), rtol=1e-9, atol=1e-9 * np.abs(Y).max())
    assert sparse.rank_ == 40 and sparse.eigenvalues_clipped_ == 0
    # λ = 0 is allowed where K̃ is nonsingular (n = r): it interpolates the training targets.
    interp = SparseKernelRegressor(reg=0.0).fit(K, K, Y)
    np.testing.assert_allclose(interp.predict(K), Y, rtol=0, atol=1e-9 * np.abs(Y).max())


def test_molecular_kernel_with_all_environments_matches_exact_ridge() -> None:
    rng = np.random.default_rng(2)
    env, env_test = rng.uniform(-2, 2, size=(60, 3)), rng.uniform(-2, 2, size=(20, 3))

    def assignment(n_env: int, n_mol: int) -> np.ndarray:
        """L (n_mol, n_env) of 0/1: each environment in one molecule, each molecule ≥ 1 environment."""
        owner = np.concatenate([np.arange(n_mol), rng.integers(0, n_mol, size=n_env - n_mol)])
        return (owner[None, :] == np.arange(n_mol)[:, None]).astype(float)

    L, L_test = assignment(60, 15), assignment(20, 5)
    K_ee = rbf(env, env)
    K, K_test = L @ K_ee @ L.T, L_test @ rbf(env_test, env) @ L.T
    Y = L @ np.sin(env[:, 0]) + 0.05 * rng.normal(size=15)
    reg = 1e-2 * float(np.mean(np.diag(K)))
    sparse = SparseKernelRegressor(reg=reg).fit(L @ K_ee, K_ee, Y)
    exact = KernelRegressor("ntk", reg=reg).fit(K, Y)
    # K̃ = L K_ee K_ee⁻¹ K_ee Lᵀ = K exactly (cond(K_ee) ≈ 1.5e3, nothing dropped), and the
    # prediction L_t K_te K_ee⁻¹ K_ee Lᵀ (K + λI)⁻¹ Y is the exact one: agreement to rounding.
    predicted = sparse.predict(L_test @ rbf(env_test, env))
    np.testing.assert_allclose(predicted, exact.predict(K_test), rtol=1e-9, atol=1e-9 * np.abs(Y).max())


@pytest.mark.parametrize("n", [12, 20, 28])
def test_both_decompositions_match_the_dense_nystrom_formulas(n: int) -> None:
    """Fewer training points than inducing points (n ≤ r: the eigendecomposition of the n × n
    K̃) and more (n > r: the thin SVD of B), against the dense formulas: K̃ = K_nm K_mm⁻¹ K_mn,
    H = K̃ (K̃ + λI)⁻¹, LOO residuals ((I − H) y)_i / (1 − H_ii), predictions
    K_tm K_mm⁻¹ K_mn (K̃ + λI)⁻¹ y."""
    rng = np.random.default_rng(11)
    X, S, X_test = (rng.uniform(-2, 2, size=(k, 3)) for k in (n, 20, 6))
    p = {"K_nm": rbf(X, S), "K_mm": rbf(S, S)}
    y = np.sin(X[:, 0]) + X[:, 1] ** 2 + 0.1 * rng.normal(size=n)
    K = nystrom_kernel(p)
    reg = 1e-2 * float(np.mean(np.diag(K)))
    A = K + reg * np.eye(n)
    H = K @ np.linalg.inv(A)
    loo = (y - H @ y) / (1.0 - np.diag(H))
    predicted = rbf(X_test, S) @ np.linalg.solve(p["K_mm"], p["K_nm"].T @ np.linalg.solve(A, y))
    model = SparseKernelRegressor(reg=reg, standardize=False).fit(p["K_nm"], p["K_mm"], y)
    # cond(K_mm) ≲ 1e3 and cond(K̃ + λI) ≤ ~1e2 · n: the dense solves keep ≳ 1e-11 relative.
    np.testing.assert_allclose(sparse_loo_residuals(p["K_nm"], p["K_mm"], y, reg), loo, rtol=1e-9, atol=1e-11)
    np.testing.assert_allclose(model.predict(rbf(X_test, S)), predicted, rtol=1e-9, atol=1e-11)
    assert model.condition_number_ == pytest.approx(np.linalg.cond(A), rel=1e-6)


# ------------------------------------------------------------------ λ selection


def brute_loo(p: dict[str, np.ndarray], Y: np.ndarray, reg: float) -> np.ndarray:
    """Leave-one-out residuals by n refits without standardisation (same K_mm every time)."""
    residuals = np.empty_like(Y)
    for i in range(Y.shape[0]):
        model = SparseKernelRegressor(reg=reg, standardize=False).fit(
            np.delete(p["K_nm"], i, 0), p["K_mm"], np.delete(Y, i, 0)
        )
        residuals[i] = Y[i] - model.predict(p["K_nm"][i : i + 1])[0]
    return residuals


def test_loo_residuals_match_refits() -> None:
    p = problem()
    relative = np.array([1e-2, 1e-1, 1.0])
    mean_diag = float(np.mean(np.diag(nystrom_kernel(p))))
    model = SparseKernelRegressor(reg="cv", standardize=False, relative_grid=relative).fit(p["K_nm"], p["K_mm"], p["Y"])
    np.testing.assert_allclose(model.cv_result_.grid, relative * mean_diag, rtol=1e-12)
    for j, reg in enumerate(relative * mean_diag):
        brute = brute_loo(p, p["Y"], reg)
        # 1 − h_i ≥ ~1e-2 here, so rounding (~1e-14) grows to at most ~1e-12 relative.
        np.testing.assert_allclose(
            sparse_loo_residuals(p["K_nm"], p["K_mm"], p["Y"], reg), brute, rtol=1e-10, atol=1e-12
        )
        np.testing.assert_allclose(model.cv_result_.scores[j], np.mean(brute**2), rtol=1e-10)


@pytest.mark.parametrize("loss", ["squared", "absolute"])
def test_cv_picks_the_brute_force_argmin(loss: str) -> None:
    p = problem(k=2, seed=3)
    rng = np.random.default_rng(3)
    Y = p["K_nm"] @ rng.normal(size=(8, 2)) + 0.05 * rng.normal(size=(25, 2))  # in the model, so λ is interior
    default = SparseKernelRegressor(reg="cv").fit(p["K_nm"], p["K_mm"], Y)
    np.testing.assert_allclose(default.cv_result_.relative_grid, DEFAULT_RELATIVE_GRID, rtol=1e-15)
    relative = np.logspace(-4, 0, 9)
    model = SparseKernelRegressor(reg="cv", cv_loss=loss, relative_grid=relative).fit(p["K_nm"], p["K_mm"], Y)
    assert not model.cv_result_.at_grid_edge and model.cv_result_.loss == loss
    Z = (Y - Y.mean(0)) / Y.std(0)
    grid = relative * float(np.mean(np.diag(nystrom_kernel(p))))
    brute = np.array([np.mean(brute_loo(p, Z, reg) ** 2 if loss == "squared" else np.abs(brute_loo(p, Z, reg)))
                      for reg in grid])  # mean over points and targets
    assert model.reg_ == pytest.approx(grid[np.argmin(brute)], rel=1e-12)
    assert model.reg_relative_ == pytest.approx(relative[np.argmin(brute)], rel=1e-12)
    # The smallest λ has 1 − h ~ 1e-4, amplifying ~1e-14 rounding to ≲ 1e-10 relative.
    np.testing.assert_allclose(model.cv_result_.scores, brute, rtol=1e-8)


def test_gcv_matches_direct_computation() -> None:
    p = problem(k=2, seed=4)
    relative = np.logspace(-4, 0, 5)
    model = SparseKernelRegressor(reg="cv", cv="gcv", standardize=False, relative_grid=relative)
    model.fit(p["K_nm"], p["K_mm"], p["Y"])
    K = nystrom_kernel(p)
    n = K.shape[0]
    for j, reg in enumerate(relative * np.mean(np.diag(K))):
        H = K @ np.linalg.inv(K + reg * np.eye(n))
        direct = np.mean(((np.eye(n) - H) @ p["Y"]) ** 2, axis=0) / (1 - np.trace(H) / n) ** 2
        # K + λI has cond ≤ ~1e4 · ‖K‖ / mean diag: the dense inverse keeps ≳ 1e-10 relative.
        np.testing.assert_allclose(model.cv_result_.scores_per_target[j], direct, rtol=1e-8)
    assert model.cv_result_.criterion == "gcv"


# ------------------------------------------------------------------ other implementations


def test_matches_sklearn_ridge_on_nystrom_features() -> None:
    p = problem(seed=5)
    s, U = np.linalg.eigh(p["K_mm"])
    root = U / np.sqrt(s)  # K_mm is well conditioned here: all eigenvalues kept
    reg = 0.05
    model = SparseKernelRegressor(reg=reg, standardize=False).fit(p["K_nm"], p["K_mm"], p["Y"])
    ridge = Ridge(alpha=reg, fit_intercept=False, solver="cholesky").fit(p["K_nm"] @ root, p["Y"])
    # (BᵀB + λI)⁻¹Bᵀ y is solved well conditioned (cond ≤ ~1e3): agreement to rounding.
    np.testing.assert_allclose(model.predict(p["K_tm"]), ridge.predict(p["K_tm"] @ root), rtol=1e-9, atol=1e-11)


def test_matches_nystrom_solve() -> None:
    p = problem(k=2, seed=6)
    reg = 0.02
    model = SparseKernelRegressor(reg=reg, standardize=False).fit(p["K_nm"], p["K_mm"], p["Y"])
    solution = nystrom_solve(p["K_nm"], p["K_mm"], p["Y"], reg)
    # Same factorisation, different last step (root W diag(σ/(σ²+λ)) QᵀY vs root Bᵀ X): rounding only.
    scale = np.abs(solution.inducing_weights).max()
    np.testing.assert_allclose(model.inducing_weights, solution.inducing_weights, rtol=1e-9, atol=1e-11 * scale)
    np.testing.assert_allclose(model.predict(p["K_tm"]), p["K_tm"] @ solution.inducing_weights, rtol=1e-9, atol=1e-11)


def test_multi_target_columns_match_single_target_fits() -> None:
    p = problem(k=3, seed=7)
    multi = SparseKernelRegressor(reg=0.1).fit(p["K_nm"], p["K_mm"], p["Y"])
    predicted = multi.predict(p["K_tm"])
    assert predicted.shape == (7, 3) and multi.n_targets_ == 3
    for j in range(3):
        single = SparseKernelRegressor(reg=0.1).fit(p["K_nm"], p["K_mm"], p["Y"][:, j])
        out = single.predict(p["K_tm"])
        assert out.shape == (7,)
        # Per-column standardisation and a linear solve: the columns are the same computation.
        np.testing.assert_allclose(predicted[:, j], out, rtol=1e-12, atol=1e-12)


def test_duplicate_inducing_points_are_dropped_by_rank_truncation() -> None:
    p = problem(seed=8)
    S = np.concatenate([p["S"], p["S"][:3]])
    dup = SparseKernelRegressor(reg=0.05).fit(rbf(p["X"], S), rbf(S, S), p["Y"])
    plain = SparseKernelRegressor(reg=0.05).fit(p["K_nm"], p["K_mm"], p["Y"])
    assert dup.eigenvalues_clipped_ == 3 and dup.rank_ == 8 and dup.n_inducing_ == 11
    assert abs(dup.min_eigenvalue_) < 1e-12
    # The kept eigenvalues span the same functions as the 8 distinct points (K_mm cond ~ 10):
    # same K̃, same predictions up to rounding.
    np.testing.assert_allclose(dup.predict(rbf(p["X_test"], S)), plain.predict(p["K_tm"]), rtol=1e-9, atol=1e-10)


# ------------------------------------------------------------------ Cholesky factorisation of K_mm


def jittered_nystrom_kernel(K_am: np.ndarray, K_bm: np.ndarray, K_mm: np.ndarray, jitter: float) -> np.ndarray:
    """K_am (K_mm + j·mean(diag K_mm)·I)⁻¹ K_mb by a dense solve: the kernel of the Cholesky route."""
    shifted = K_mm + jitter * np.mean(np.diag(K_mm)) * np.eye(len(K_mm))
    return K_am @ np.linalg.solve(shifted, K_bm.T)


def test_cholesky_factorisation_matches_the_eigendecomposition() -> None:
    p = problem(k=2, seed=10)
    eigh = SparseKernelRegressor(reg="cv").fit(p["K_nm"], p["K_mm"], p["Y"])
    chol = SparseKernelRegressor(reg="cv", factorisation="cholesky").fit(p["K_nm"], p["K_mm"], p["Y"])
    assert chol.jitter_ == 1e-12 and eigh.jitter_ == 0.0 and chol.rank_ == 8 and chol.eigenvalues_clipped_ == 0
    assert math.isnan(chol.min_eigenvalue_)
    # K_mm (cond ≈ 10) is factored without rank cut either way; the jitter 1e-12 · mean diag
    # moves K_mm⁻¹ by ≈ 1e-12 · cond relative: the same λ and predictions to rounding.
    assert chol.reg_relative_ == eigh.reg_relative_ and chol.reg_ == pytest.approx(eigh.reg_, rel=1e-9)
    np.testing.assert_allclose(chol.predict(p["K_tm"]), eigh.predict(p["K_tm"]), rtol=1e-9, atol=1e-10)


def test_cholesky_factorisation_of_singular_k_mm_is_ridge_on_the_jittered_kernel() -> None:
    p = problem(seed=11)
    S = np.concatenate([p["S"], p["S"][:3]])  # K_mm singular: three duplicated inducing points
    K_nm, K_mm, K_tm = rbf(p["X"], S), rbf(S, S), rbf(p["X_test"], S)
    reg = 0.05
    model = SparseKernelRegressor(reg=reg, standardize=False, factorisation="cholesky", rank_rtol=1e-10)
    model.fit(K_nm, K_mm, p["Y"])
    assert model.jitter_ == 1e-10 and model.rank_ == 11 and model.eigenvalues_clipped_ == 0
    # Brute force: kernel ridge with K̃_j = K_nm (K_mm + jI)⁻¹ K_mn by dense solves. K_mm + jI
    # has cond ≈ 1e11, but its three tiny directions (differences of duplicated columns) are
    # orthogonal to every row of K_nm and K_tm (identical columns), so they enter neither
    # kernel; in the others the solves keep ≳ 12 digits (measured difference 3e-15).
    K_tilde = jittered_nystrom_kernel(K_nm, K_nm, K_mm, model.jitter_)
    dual = np.linalg.solve(K_tilde + reg * np.eye(len(K_tilde)), p["Y"])
    expected = jittered_nystrom_kernel(K_tm, K_nm, K_mm, model.jitter_) @ dual
    np.testing.assert_allclose(model.predict(K_tm), expected, rtol=1e-10, atol=1e-10)
    # and the duplicates add no function: the model of the 8 distinct points, up to the jitter,
    # which moves K_mm⁻¹ on them by ≈ 1e-10 · cond ≈ 1e-9 relative (measured 1e-11).
    plain = SparseKernelRegressor(reg=reg, standardize=False).fit(p["K_nm"], p["K_mm"], p["Y"])
    np.testing.assert_allclose(model.predict(K_tm), plain.predict(p["K_tm"]), rtol=1e-8, atol=1e-8)


def test_cholesky_root_applies_the_inverse_factor_by_triangular_solves() -> None:
    p = problem(seed=12)
    root = factor_inducing(p["K_mm"], 1e-12, "cholesky")
    # Independent: R = T⁻¹ from numpy's Cholesky of the same jittered K_mm and a dense inverse
    # (K_mm cond ≈ 10: both sides keep ≳ 14 digits; tolerance 1e-12 relative to the entries).
    shifted = p["K_mm"] + root.jitter * np.mean(np.diag(p["K_mm"])) * np.eye(len(p["K_mm"]))
    inverse = np.linalg.inv(np.linalg.cholesky(shifted).T)
    V = np.random.default_rng(0).normal(size=(8, 3))
    assert (root.m, root.rank, root.method, root.n_dropped) == (8, 8, "cholesky", 0)
    np.testing.assert_allclose(root.features(p["K_nm"]), p["K_nm"] @ inverse, rtol=0, atol=1e-12 * np.abs(p["K_nm"] @ inverse).max())
    np.testing.assert_allclose(root.apply(V), inverse @ V, rtol=0, atol=1e-12 * np.abs(inverse @ V).max())
    np.testing.assert_allclose(root.apply_transpose(V), inverse.T @ V, rtol=0, atol=1e-12 * np.abs(inverse.T @ V).max())
    eigh = factor_inducing(p["K_mm"], 1e-12, "eigh")
    np.testing.assert_array_equal(eigh.apply_transpose(V), eigh.factor.T @ V)
    read_only = p["K_nm"].copy()
    read_only.flags.writeable = False  # as a memmap of a stored kernel: read, never written
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        np.testing.assert_array_equal(root.features(read_only), root.features(p["K_nm"]))


@pytest.mark.parametrize("block", [7, 1024])
def test_in_place_cholesky_retries_from_the_undamaged_triangle(monkeypatch, block: int) -> None:
    """K_mm with a negative eigenvalue of −2.3e-10 · mean diag: the factorisations at 1e-12 …
    1e-10 fail part way, each leaving part of the upper triangle overwritten; the one at
    1e-9 succeeds, and gives the factor below, only if every failed attempt was undone
    exactly (without the undo this test fails). Checked against numpy's Cholesky of the
    original matrix + 1e-9 · mean diag (cond ≈ 6e9: two Cholesky factors of it agree to
    ≈ eps · √cond ≈ 1e-11 relative; measured 6e-12, tolerance 1e-9), with one block and with
    blocks of 7 rows."""
    monkeypatch.setattr(blocked_cholesky, "CHOLESKY_BLOCK", block)
    rng = np.random.default_rng(15)
    U, _ = np.linalg.qr(rng.normal(size=(30, 30)))
    s = np.concatenate([np.geomspace(10.0, 0.1, 29), [-5e-10]])
    K = (U * s) @ U.T
    K = 0.5 * (K + K.T)
    mean = float(np.mean(np.diag(K)))
    kept = K.copy()
    root = factor_inducing(K, 1e-12, "cholesky", overwrite=True)
    assert root.jitter == pytest.approx(1e-9) and np.shares_memory(root.factor, K)
    expected = np.linalg.cholesky(kept + root.jitter * mean * np.eye(30)).T
    np.testing.assert_allclose(root.factor, expected, rtol=0, atol=1e-9 * np.abs(expected).max())
    assert np.array_equal(np.tril(root.factor, -1), np.zeros((30, 30)))
    # without overwrite the caller's matrix stays as it was
    again = kept.copy()
    factor_inducing(again, 1e-12, "cholesky")
    np.testing.assert_array_equal(again, kept)


def test_a_matrix_no_jitter_makes_positive_definite_is_refused() -> None:
    K = -np.eye(4)
    K[0, 0] = 10.0  # mean diagonal > 0, three eigenvalues −1 = −0.14 · mean diag
    with pytest.raises(InputError, match=r"K_mm: is not positive semi-definite: the Cholesky factorisation .* fails in float64 "
                                         r"for every j from 1e-12 to 0.01"):
        factor_inducing(K, 1e-12, "cholesky")


@pytest.mark.parametrize("factorisation", ["eigh", "cholesky"])
def test_a_factor_made_once_serves_every_training_size(factorisation: str) -> None:
    p = problem(n=40, seed=13)
    root = factor_inducing(p["K_mm"], 1e-12, factorisation)
    for n in (12, 25, 40):
        settings = {"reg": "cv", "factorisation": factorisation, "rank_rtol": 1e-12}
        reused = SparseKernelRegressor(**settings).fit(p["K_nm"][:n], root, p["Y"][:n])
        fresh = SparseKernelRegressor(**settings).fit(p["K_nm"][:n], p["K_mm"], p["Y"][:n])
        # the same factor as the fit from K_mm makes: the same arithmetic, the same numbers
        assert reused.reg_ == fresh.reg_ and reused.jitter_ == fresh.jitter_ and reused.rank_ == fresh.rank_
        np.testing.assert_array_equal(reused.predict(p["K_tm"]), fresh.predict(p["K_tm"]))


def test_a_factor_made_with_other_settings_is_refused() -> None:
    p = problem(seed=14)
    with pytest.raises(InputError, match=r"K_mm: was factored with method 'eigh' and rank_rtol 1e-12; this regressor has "
                                         r"factorisation 'cholesky'"):
        SparseKernelRegressor(factorisation="cholesky").fit(p["K_nm"], factor_inducing(p["K_mm"]), p["Y"])
    with pytest.raises(InputError, match="rank_rtol 1e-10"):
        SparseKernelRegressor(rank_rtol=1e-12).fit(p["K_nm"], factor_inducing(p["K_mm"], 1e-10), p["Y"])
    with pytest.raises(InputError, match=r"K_nm: must be \(n, 8\)"):
        SparseKernelRegressor().fit(p["K_nm"][:, :5], factor_inducing(p["K_mm"]), p["Y"])


# ------------------------------------------------------------------ fitted attributes, memmap, warnings, errors


def test_fitted_attributes_and_read_only_memmap(tmp_path) -> None:
    p = problem(seed=9)
    path = tmp_path / "K_nm.f64"
    writer = np.memmap(path, dtype=np.float64, mode="w+", shape=p["K_nm"].shape)
    writer[:] = p["K_nm"]
    writer.flush()
    K_nm = np.memmap(path, dtype=np.float64, mode="r", shape=p["K_nm"].shape)
    reg = 0.01
    model = SparseKernelRegressor(reg=reg).fit(K_nm, p["K_mm"], p["Y"])
    in_memory = SparseKernelRegressor(reg=reg).fit(p["K_nm"], p["K_mm"], p["Y"])
    np.testing.assert_array_equal(model.predict(p["K_tm"]), in_memory.predict(p["K_tm"]))
    np.testing.assert_array_equal(np.asarray(K_nm), p["K_nm"])
    assert {name for name in vars(model) if name.endswith("_") and not name.startswith("_")} == {
        "solver_",
        "reg_",
        "reg_relative_",
        "cv_result_",
        "condition_number_",
        "eigenvalues_clipped_",
        "min_eigenvalue_",
        "jitter_",
        "rank_",
        "n_inducing_",
        "target_mean_",
        "target_scale_",
        "n_train_",
        "n_targets_",
        "fit_seconds_",
    }
    assert (model.method, model.solver_, model.t, model.cv_result_) == ("ntk", "sparse", math.inf, None)
    assert (model.rank_, model.n_inducing_, model.n_train_, model.n_targets_) == (8, 8, 25, 1)
    K = nystrom_kernel(p)
    # n > r: K̃ has rank 8, so cond = (s_max + λ) / λ; eigenvalue routines agree to ~1e-12 relative.
    assert model.condition_number_ == pytest.approx((np.linalg.eigvalsh(K)[-1] + reg) / reg, rel=1e-10)
    assert model.reg_relative_ == pytest.approx(reg / np.mean(np.diag(K)), rel=1e-12)
    assert model.min_eigenvalue_ == pytest.approx(np.linalg.eigvalsh(p["K_mm"])[0], rel=1e-8)
    assert model.target_mean_ == pytest.approx([p["Y"].mean()]) and model.target_scale_ == pytest.approx(
        [p["Y"].std()]
    )


def test_ill_conditioned_warning() -> None:
    p = problem(seed=10)
    with pytest.warns(IllConditionedWarning, match="nearly singular"):
        SparseKernelRegressor(reg=1e-14).fit(p["K_nm"], p["K_mm"], p["Y"])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        SparseKernelRegressor(reg=1e-2).fit(p["K_nm"], p["K_mm"], p["Y"])


P = problem()
FIT_ERRORS = [
    ({"K_mm": P["K_mm"][:, :7]}, "K_mm"),
    ({"K_mm": np.zeros((8, 8))}, "K_mm"),
    ({"K_mm": np.where(np.eye(8) > 0, np.inf, P["K_mm"])}, "K_mm"),
    ({"K_nm": P["K_nm"][:, :7]}, "K_nm"),
    ({"K_nm": np.where(np.arange(8) == 3, np.nan, P["K_nm"])}, "K_nm"),
    ({"Y": P["Y"][:20]}, "Y"),
    ({"Y": np.full(25, np.nan)}, "Y"),
]


@pytest.mark.parametrize(("change", "name"), FIT_ERRORS)
def test_fit_rejects_bad_inputs(change: dict[str, np.ndarray], name: str) -> None:
    args = {"K_nm": P["K_nm"], "K_mm": P["K_mm"], "Y": P["Y"], **change}
    with pytest.raises(InputError) as err:
        SparseKernelRegressor(reg=0.1).fit(**args)
    assert err.value.source == name and name in str(err.value)


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"cv": "kfold"}, "cv"),
        ({"cv_loss": "huber"}, "cv_loss"),
        ({"cv": "gcv", "cv_loss": "absolute"}, "cv_loss"),
        ({"reg": -1.0}, "reg"),
        ({"reg": "auto"}, "reg"),
        ({"relative_grid": [-1.0]}, "relative_grid"),
        ({"rank_rtol": 0.0}, "rank_rtol"),
        ({"factorisation": "qr"}, "factorisation"),
    ],
)
def test_fit_rejects_bad_settings(kwargs: dict[str, object], name: str) -> None:
    model = SparseKernelRegressor(**kwargs)  # parameters are stored as given (scikit-learn) and checked by fit
    with pytest.raises(InputError) as err:
        model.fit(P["K_nm"], P["K_mm"], P["Y"])
    assert err.value.source == name


def test_predict_errors_and_zero_reg_with_low_rank() -> None:
    with pytest.raises(InputError, match="before fit") as err:
        SparseKernelRegressor(reg=0.1).predict(P["K_tm"])
    assert err.value.source == "SparseKernelRegressor"
    model = SparseKernelRegressor(reg=0.1).fit(P["K_nm"], P["K_mm"], P["Y"])
    with pytest.raises(InputError, match="8 columns") as err:
        model.predict(P["K_tm"][:, :5])
    assert err.value.source == "K_tm"
    with pytest.raises(InputError, match="no predictive variance") as err:
        model.predict(P["K_tm"], return_std=True)
    assert err.value.source == "return_std"
    with pytest.raises(InputError, match="rank") as err:  # n = 25 > r = 8: K̃ + 0·I is singular
        SparseKernelRegressor(reg=0.0).fit(P["K_nm"], P["K_mm"], P["Y"])
    assert err.value.source == "reg"
