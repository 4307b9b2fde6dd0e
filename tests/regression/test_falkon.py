"""Falkon's preconditioned conjugate gradients for the Nyström system: ``FalkonRegressor``.

Every result is checked against an independent computation: scikit-learn's KernelRidge on the
exact molecular kernel when every environment is inducing, ``SparseKernelRegressor`` (thin SVD)
on the same inducing set, dense solves of (K_mn K_nm + λ K_j) W = K_mn Z, a dense condition
number of the preconditioned matrix, plain conjugate gradients and a brute-force hold-out
loop over the λ grid.

The synthetic "molecules" are groups of 2–5 environments (points uniform in [-2, 2]³), the
environment kernel an RBF of length 0.7 unless stated (positive definite; cond(K_mm) ≈ 1e2–1e3
for the inducing sets below), the molecular kernel K = S K_env Sᵀ (S the 0/1 membership
matrix), K_nm = S K_env[:, inducing] and K_mm = K_env[inducing, inducing].
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterator

import numpy as np
import pytest
import scipy.linalg
import torch
from sklearn.base import clone
from sklearn.kernel_ridge import KernelRidge

from molntk.errors import InputError
from molntk.regression import FalkonConvergenceWarning, FalkonRegressor, SparseKernelRegressor
from molntk.regression import falkon
from molntk.regression.falkon import holdout_split
from molntk.scale.devices import torch_threads

PRECONDITIONERS = ("sampled-rows", "subsample", "frobenius")


@pytest.fixture(scope="module", autouse=True)
def one_thread() -> Iterator[None]:
    """PCG on these small systems is many small tensor ops: one thread is fastest, and on a
    shared machine torch's waiting worker threads make each op milliseconds long."""
    with torch_threads(1):
        yield


def rbf(A: np.ndarray, B: np.ndarray, length: float = 0.7) -> np.ndarray:
    return np.exp(-0.5 * ((A[:, None, :] - B[None, :, :]) ** 2).sum(-1) / length**2)


def membership(sizes: np.ndarray) -> np.ndarray:
    """S (molecules, environments): S[M, a] = 1 when environment a belongs to molecule M."""
    owner = np.repeat(np.arange(sizes.size), sizes)
    return (owner[None, :] == np.arange(sizes.size)[:, None]).astype(float)


def molecules(
    n: int = 24, n_test: int = 6, m: int | None = None, k: int = 1, length: float = 0.7, seed: int = 0
) -> dict[str, np.ndarray]:
    """n training and n_test test molecules of 2–5 environments; the first m training
    environments inducing (None: all of them); smooth per-environment targets summed over
    each molecule, with noise."""
    rng = np.random.default_rng(seed)
    S, S_test = membership(rng.integers(2, 6, size=n)), membership(rng.integers(2, 6, size=n_test))
    env, env_test = rng.uniform(-2, 2, size=(S.shape[1], 3)), rng.uniform(-2, 2, size=(S_test.shape[1], 3))
    inducing = env if m is None else env[:m]
    per_env = np.stack([np.sin(env[:, 0]) + env[:, 1] ** 2, np.cos(env.sum(1)), env[:, 2]], axis=1)[:, :k]
    Y = S @ per_env + 0.05 * rng.normal(size=(n, k)) + [3.0, -1.0, 0.5][:k]
    return {
        "K": S @ rbf(env, env, length) @ S.T,
        "K_test": S_test @ rbf(env_test, env, length) @ S.T,
        "K_nm": S @ rbf(env, inducing, length),
        "K_mm": rbf(inducing, inducing, length),
        "K_tm": S_test @ rbf(env_test, inducing, length),
        "Y": Y[:, 0] if k == 1 else Y,
    }


def standardised(Y: np.ndarray) -> np.ndarray:
    return (Y - Y.mean(0)) / Y.std(0)


def jittered(p: dict[str, np.ndarray], model: FalkonRegressor) -> np.ndarray:
    """K_j = K_mm + j·mean(diag K_mm)·I with the relative jitter the model used."""
    K_mm = p["K_mm"]
    return K_mm + model.jitter_ * float(np.mean(np.diag(K_mm))) * np.eye(K_mm.shape[0])


def dense_weights(K_nm: np.ndarray, K_j: np.ndarray, Z: np.ndarray, reg: float) -> np.ndarray:
    """W* = (K_mn K_nm + λ K_j)⁻¹ K_mn Z by a dense Cholesky solve."""
    return scipy.linalg.cho_solve(scipy.linalg.cho_factor(K_nm.T @ K_nm + reg * K_j), K_nm.T @ Z)


# ------------------------------------------------------------------ exact limits and the sparse regressor


@pytest.mark.parametrize("preconditioner", PRECONDITIONERS)
def test_every_environment_inducing_equals_exact_kernel_ridge(preconditioner: str) -> None:
    p = molecules(k=2)
    reg = 1e-2 * float(np.mean(np.diag(p["K"])))
    model = FalkonRegressor(reg=reg, tol=1e-11, preconditioner=preconditioner).fit(p["K_nm"], p["K_mm"], p["Y"])
    Y = p["Y"]
    ridge = KernelRidge(alpha=reg, kernel="precomputed").fit(p["K"], standardised(Y))
    exact = Y.mean(0) + Y.std(0) * ridge.predict(p["K_test"])
    # W = Sᵀ(K + λI)⁻¹Z by push-through, so K_tm W is the exact prediction. PCG stops at a relative
    # residual ≤ 1e-11 and cond(M) ≲ 1e3 here (cond(K_env) ≈ 1e3; M = I up to rounding for the
    # sampled rows, all 24 of them), so W is within ~1e-8 in the energy norm; the jitter
    # (1e-10 relative) moves K̃ by ~1e-10 (measured: 4e-11 … 1.4e-10).
    np.testing.assert_allclose(model.predict(p["K_tm"]), exact, rtol=1e-8, atol=1e-8 * np.abs(exact).max())
    assert model.converged_ and model.residual_norms_[-1].max() <= 1e-11


def test_equals_sparse_regressor_with_fewer_inducing_points() -> None:
    p = molecules(n=40, m=30, k=2, seed=1)
    reg = 1e-3 * float(np.mean(np.diag(p["K"])))
    model = FalkonRegressor(reg=reg, tol=1e-11, preconditioner="subsample").fit(p["K_nm"], p["K_mm"], p["Y"])
    sparse = SparseKernelRegressor(reg=reg).fit(p["K_nm"], jittered(p, model), p["Y"])
    # The same Nyström model (module docstring): on K_mm + j·I the two agree to cond(M) · tol
    # (cond(K_mm) ≈ 230, cond(M) ≲ 1e3, tol = 1e-11: ≲ 1e-8; measured 6e-13 and 4e-12 for W).
    scale = np.abs(sparse.inducing_weights).max()
    np.testing.assert_allclose(model.predict(p["K_tm"]), sparse.predict(p["K_tm"]), rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(model.inducing_weights, sparse.inducing_weights, rtol=0, atol=1e-8 * scale)
    # Without the jitter: K̃ moves by about j · cond(K_mm) ≈ 1e-10 · 230 (measured 6e-11).
    plain = SparseKernelRegressor(reg=reg).fit(p["K_nm"], p["K_mm"], p["Y"])
    np.testing.assert_allclose(model.predict(p["K_tm"]), plain.predict(p["K_tm"]), rtol=1e-8, atol=1e-8)
    assert model.jitter_ == 1e-10 and model.n_inducing_ == 30


# ------------------------------------------------------------------ the PCG iteration


def test_residual_bound_and_error_against_a_dense_solve() -> None:
    p = molecules(n=80, m=40, seed=2)
    reg = 1e-4 * float(np.mean(np.diag(p["K"])))
    model = FalkonRegressor(reg=reg, preconditioner="subsample").fit(p["K_nm"], p["K_mm"], p["Y"])
    assert model.converged_ and model.iterations_ > 5
    assert model.residual_norms_.shape == (model.iterations_ + 1, 1)
    assert model.residual_norms_[0, 0] == pytest.approx(1.0, rel=1e-12) and model.residual_norms_[-1, 0] <= model.tol
    # The preconditioned system built independently: TᵀT = K_j, AᵀA = (n/m) T Tᵀ + λI.
    K_nm, K_j = p["K_nm"], jittered(p, model)
    T = np.linalg.cholesky(K_j).T
    A = np.linalg.cholesky(80 / 40 * T @ T.T + reg * np.eye(40)).T
    G = scipy.linalg.solve_triangular(T, K_nm.T, trans="T").T  # K_nm T⁻¹
    A_inv = scipy.linalg.solve_triangular(A, np.eye(40))
    eig = np.linalg.eigvalsh(A_inv.T @ (G.T @ G + reg * np.eye(40)) @ A_inv)
    cond = eig[-1] / eig[0]
    Z = standardised(p["Y"])[:, None]
    W = model.inducing_weights[:, None]
    W_star = dense_weights(K_nm, K_j, Z, reg)
    # β = A T W: ‖β − β*‖ / ‖β*‖ ≤ cond(M) · ‖r‖/‖b‖ (module docstring). Measured: 45 iterations,
    # cond(M) ≈ 460, residual 7e-9, bound 3e-6, error 5e-8; the dense solve (cond(H) ≈ 2e4)
    # contributes ~1e-12.
    beta, beta_star = A @ T @ W, A @ T @ W_star
    error = np.linalg.norm(beta - beta_star) / np.linalg.norm(beta_star)
    assert error <= cond * model.residual_norms_[-1, 0]
    assert 10 < cond < 1e4 and error < 1e-5


def plain_cg_iterations(H: np.ndarray, b: np.ndarray, tol: float, max_iter: int) -> int:
    """Iterations of unpreconditioned CG on H w = b until ‖b − H w‖ ≤ tol ‖b‖ (max_iter if never)."""
    w, r = np.zeros_like(b), b.copy()
    d, rr = r.copy(), float(r @ r)
    for iteration in range(1, max_iter + 1):
        Hd = H @ d
        alpha = rr / float(d @ Hd)
        w, r = w + alpha * d, r - alpha * Hd
        rr, previous = float(r @ r), rr
        if math.sqrt(rr) <= tol * np.linalg.norm(b):
            return iteration
        d = r + rr / previous * d
    return max_iter


def test_preconditioner_beats_plain_cg_on_an_ill_conditioned_system() -> None:
    p = molecules(n=300, m=100, length=1.2, seed=3)  # cond(K_mm) ≈ 4e6, cond(K_mn K_nm + λK_j) ≈ 2e11
    reg = 1e-8 * float(np.mean(np.diag(p["K"])))
    iterations = {}
    for name in PRECONDITIONERS:  # one given λ: the default samples s = 2m = 200 of the 300 rows
        model = FalkonRegressor(reg=reg, preconditioner=name, max_iter=1000).fit(p["K_nm"], p["K_mm"], p["Y"])
        assert model.converged_
        iterations[name] = model.iterations_
    Z = standardised(p["Y"])
    H = p["K_nm"].T @ p["K_nm"] + reg * jittered(p, model)
    plain = plain_cg_iterations(H, p["K_nm"].T @ Z, 1e-8, 3000)
    # Measured: plain CG does not reach 1e-8 in 30 m = 3000 iterations; the default preconditioner
    # (s = 2m = 200 of 300 rows sampled) needs 25, the T Tᵀ estimates ≈ 265 (more than m: CG loses
    # orthogonality at cond(M) ~ 1e3, the spectrum is not clustered).
    assert plain == 3000
    assert iterations["sampled-rows"] <= 40, iterations
    assert max(iterations.values()) <= 400, iterations
    assert 5 * iterations["sampled-rows"] <= min(iterations["subsample"], iterations["frobenius"]), iterations


def test_default_preconditioner_of_every_row_needs_one_iteration_at_every_lambda() -> None:
    """With λ searched, the default C₀ = GᵀG over every fit row makes M = I up to rounding: one
    PCG iteration per λ, where 200 sampled rows of 300 need 14–31 (measured), with the same
    hold-out curve and weights. Both solve to tol = 1e-10 with cond(M) ≲ 1e3, so each is within
    ~1e-7 of the exact solution (module docstring's bound); measured agreement 1e-10."""
    p = molecules(n=300, m=100, length=1.2, seed=3)
    grid = np.logspace(-10, 0, 11)
    fits = {rows: FalkonRegressor(reg="cv", relative_grid=grid, preconditioner_rows=rows, tol=1e-10, max_iter=3000)
            .fit(p["K_nm"], p["K_mm"], p["Y"]) for rows in (None, 200)}
    every, sampled = fits[None], fits[200]
    assert every.cv_iterations_.tolist() == [1] * grid.size and every.iterations_ <= 1
    assert sampled.cv_iterations_.min() >= 10
    np.testing.assert_allclose(every.cv_result_.scores, sampled.cv_result_.scores, rtol=1e-7)
    assert every.reg_ == sampled.reg_
    W = sampled.inducing_weights
    np.testing.assert_allclose(every.inducing_weights, W, rtol=0, atol=1e-7 * np.abs(W).max())


def test_lambda_search_stops_where_the_preconditioner_does_not_factor() -> None:
    """24 molecules, 91 inducing environments: GᵀG has rank ≤ 19 (the fit rows), so c C₀ + λI
    is singular in floating point at λ = 1e-28 × mean diag K̃. Those λ are not scored (with a
    warning), the others as on a grid without them; at the largest λ it is an error."""
    p = molecules(n=24, seed=4)
    assert p["K_mm"].shape[0] > 24
    with pytest.warns(FalkonConvergenceWarning, match="not positive definite at λ = 1e-28"):
        model = FalkonRegressor(reg="cv", relative_grid=[1e-30, 1e-28, 1e-3, 1e-2, 1e-1, 1.0]).fit(p["K_nm"], p["K_mm"], p["Y"])
    scored = FalkonRegressor(reg="cv", relative_grid=[1e-3, 1e-2, 1e-1, 1.0]).fit(p["K_nm"], p["K_mm"], p["Y"])
    assert np.all(np.isinf(model.cv_result_.scores[:2])) and model.cv_iterations_[:2].tolist() == [0, 0]
    np.testing.assert_allclose(model.cv_result_.scores[2:], scored.cv_result_.scores, rtol=1e-9)
    assert model.reg_ == pytest.approx(scored.reg_, rel=1e-12)
    assert model.cv_result_.at_grid_edge is scored.cv_result_.at_grid_edge  # the unscored λ's are not grid
    with pytest.raises(InputError) as err:
        FalkonRegressor(reg="cv", relative_grid=[1e-30]).fit(p["K_nm"], p["K_mm"], p["Y"])
    assert err.value.source == "reg"


def test_warns_when_not_converged() -> None:
    p = molecules(n=80, m=40, seed=5)
    reg = 1e-8 * float(np.mean(np.diag(p["K"])))
    with pytest.warns(FalkonConvergenceWarning, match="max_iter"):
        model = FalkonRegressor(reg=reg, preconditioner="frobenius", max_iter=3).fit(p["K_nm"], p["K_mm"], p["Y"])
    assert not model.converged_ and model.iterations_ == 3 and model.residual_norms_[-1, 0] > model.tol


# ------------------------------------------------------------------ λ by hold-out


@pytest.mark.parametrize(("preconditioner", "loss"),
                         [("sampled-rows", "squared"), ("subsample", "squared"), ("sampled-rows", "absolute")])
def test_holdout_choice_equals_brute_force(preconditioner: str, loss: str) -> None:
    p = molecules(n=60, m=40, k=2, seed=6)
    relative = np.logspace(-6, 0, 7)
    model = FalkonRegressor(reg="cv", cv_loss=loss, relative_grid=relative, validation_fraction=0.25, seed=3, tol=1e-10,
                            preconditioner=preconditioner)
    model.fit(p["K_nm"], p["K_mm"], p["Y"])
    K_nm, K_j, Z = p["K_nm"], jittered(p, model), standardised(p["Y"])
    perm = np.random.default_rng(3).permutation(60)  # the documented split: the first 15 held out
    held, rest = np.sort(perm[:15]), np.sort(perm[15:])
    np.testing.assert_array_equal(holdout_split(60, 0.25, 3)[1], held)
    mean_diag = float(np.mean(np.einsum("ij,ji->i", K_nm, np.linalg.solve(K_j, K_nm.T))))  # n < DIAG_SAMPLE_ROWS: exact
    grid = relative * mean_diag
    np.testing.assert_allclose(model.cv_result_.grid, grid, rtol=1e-10)
    residuals = [Z[held] - K_nm[held] @ dense_weights(K_nm[rest], K_j, Z[rest], reg) for reg in grid]
    scores = np.array([np.mean(r**2 if loss == "squared" else np.abs(r), axis=0) for r in residuals])
    best = int(np.argmin(scores.mean(1)))
    assert model.cv_result_.criterion == "holdout" and model.cv_result_.scores_per_target.shape == (7, 2)
    assert not model.cv_result_.at_grid_edge
    assert model.reg_ == pytest.approx(grid[best], rel=1e-12) and model.reg_relative_ == pytest.approx(relative[best], rel=1e-10)
    # tol = 1e-10 and cond(M) ≲ 1e3 (sampled rows: s = 2m ≥ 45 fit rows, M = I up to rounding):
    # held-out predictions within ~1e-7, scores (mean squared residuals ≈ 0.7 … 3) within ~1e-7
    # relative (measured 6e-13 sampled rows, 3e-10 subsample; the dense solves have cond ≤ 2e4).
    np.testing.assert_allclose(model.cv_result_.scores_per_target, scores, rtol=1e-7)
    assert model.cv_iterations_.shape == (7,)
    final = dense_weights(K_nm, K_j, Z, grid[best])
    np.testing.assert_allclose(model.inducing_weights, final, rtol=0, atol=1e-7 * np.abs(final).max())  # measured ≤ 6e-10


def test_holdout_split_needs_both_parts() -> None:
    fit_rows, held = holdout_split(10, 0.2, 0)
    assert held.size == 2 and np.array_equal(np.sort(np.concatenate([fit_rows, held])), np.arange(10))
    with pytest.raises(InputError) as err:
        holdout_split(2, 0.2, 0)
    assert err.value.source == "validation_fraction"


def test_mean_diagonal_is_sampled_for_many_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    p = molecules(n=50, m=20, seed=7)
    monkeypatch.setattr("molntk.regression.falkon.DIAG_SAMPLE_ROWS", 10)
    model = FalkonRegressor(reg=0.1, seed=4).fit(p["K_nm"], p["K_mm"], p["Y"])
    K_nm, K_j = p["K_nm"], jittered(p, model)
    diag = np.einsum("ij,ji->i", K_nm, np.linalg.solve(K_j, K_nm.T))
    sample = np.sort(np.random.default_rng(4).choice(50, 10, replace=False))
    assert model.reg_relative_ == pytest.approx(0.1 / np.mean(diag[sample]), rel=1e-10)


# ------------------------------------------------------------------ blocks, memory maps, tensors, dtypes


def test_row_blocks_memmap_and_tensor_inputs_agree(tmp_path) -> None:
    p = molecules(n=50, m=30, k=2, seed=8)
    reg = 1e-3 * float(np.mean(np.diag(p["K"])))
    settings = {"reg": reg, "tol": 1e-10, "preconditioner": "subsample"}
    whole = FalkonRegressor(**settings).fit(p["K_nm"], p["K_mm"], p["Y"])
    blocks = FalkonRegressor(block_size=7, **settings).fit(p["K_nm"], p["K_mm"], p["Y"])
    # Blocks only change the summation order (rounding): cond(M) · tol ≈ 1e-8 at most.
    np.testing.assert_allclose(blocks.predict(p["K_tm"]), whole.predict(p["K_tm"]), rtol=1e-7, atol=1e-7)
    path = tmp_path / "K_nm.f64"
    writer = np.memmap(path, dtype=np.float64, mode="w+", shape=p["K_nm"].shape)
    writer[:] = p["K_nm"]
    writer.flush()
    K_nm = np.memmap(path, dtype=np.float64, mode="r", shape=p["K_nm"].shape)
    mapped = FalkonRegressor(block_size=7, **settings).fit(K_nm, p["K_mm"], p["Y"])
    np.testing.assert_array_equal(mapped.predict(p["K_tm"]), blocks.predict(p["K_tm"]))
    np.testing.assert_array_equal(np.asarray(K_nm), p["K_nm"])
    tensor = FalkonRegressor(block_size=7, **settings).fit(torch.from_numpy(p["K_nm"]), p["K_mm"], p["Y"])
    np.testing.assert_array_equal(tensor.predict(p["K_tm"]), blocks.predict(p["K_tm"]))
    held = FalkonRegressor(reg="cv", relative_grid=[1e-3, 1e-1], block_size=7, seed=1).fit(K_nm, p["K_mm"], p["Y"])
    whole_cv = FalkonRegressor(reg="cv", relative_grid=[1e-3, 1e-1], seed=1).fit(p["K_nm"], p["K_mm"], p["Y"])
    np.testing.assert_allclose(held.cv_result_.scores, whole_cv.cv_result_.scores, rtol=1e-6)


@pytest.mark.parametrize("preconditioner", ["sampled-rows", "subsample"])
def test_float32_agrees_with_float64_to_its_precision(preconditioner: str) -> None:
    p = molecules(n=50, m=30, seed=9)
    reg = 1e-2 * float(np.mean(np.diag(p["K"])))
    double = FalkonRegressor(reg=reg).fit(p["K_nm"], p["K_mm"], p["Y"])
    single = FalkonRegressor(reg=reg, dtype="float32", tol=1e-5, preconditioner=preconditioner)
    single.fit(p["K_nm"], p["K_mm"], p["Y"])
    # float32 rounding (6e-8) amplified by cond(K_mm) ≈ 1e2, and tol = 1e-5: ≲ 1e-5 of the
    # targets' scale (measured 5e-7 with sampled rows, 4e-6 with subsample).
    assert single.converged_ and single.inducing_weights.dtype == np.float64
    np.testing.assert_allclose(single.predict(p["K_tm"]), double.predict(p["K_tm"]), rtol=0, atol=2e-5 * np.abs(p["Y"]).max())


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("resident", [0.5, 0.0], ids=["K_nm-on-device", "K_nm-streamed"])
def test_cuda_matches_cpu(resident, monkeypatch) -> None:
    """K_nm copied to the GPU once (it fits) or streamed in blocks from the host
    (RESIDENT_FRACTION 0): the same λ and predictions as the CPU."""
    monkeypatch.setattr(falkon, "RESIDENT_FRACTION", resident)
    p = molecules(n=50, m=30, k=2, seed=10)
    settings = {"reg": "cv", "relative_grid": [1e-4, 1e-2, 1.0], "tol": 1e-10, "block_size": 16}
    cpu = FalkonRegressor(**settings).fit(p["K_nm"], p["K_mm"], p["Y"])
    for K_nm in (p["K_nm"], torch.from_numpy(p["K_nm"]).cuda()):
        gpu = FalkonRegressor(device="cuda", **settings).fit(K_nm, p["K_mm"], p["Y"])
        assert gpu.reg_ == cpu.reg_
        # Same float64 arithmetic in another order: cond(M) · tol ≈ 1e-8 at most.
        np.testing.assert_allclose(gpu.predict(p["K_tm"]), cpu.predict(p["K_tm"]), rtol=1e-7, atol=1e-7)


# ------------------------------------------------------------------ jitter


def test_jitter_is_raised_until_the_cholesky_succeeds() -> None:
    p = molecules(n=40, m=30, seed=11)
    s, U = np.linalg.eigh(p["K_mm"])
    mean_diag = float(np.mean(np.diag(p["K_mm"])))
    s[0] = -3e-8 * mean_diag  # a quadrature-like negative eigenvalue
    K_mm = (U * s) @ U.T
    model = FalkonRegressor(reg=1e-2).fit(p["K_nm"], K_mm, p["Y"])
    # K_mm + j·mean diag·I is positive definite from j = 3e-8 on: the first power of 10 above is 1e-7.
    assert model.jitter_ == pytest.approx(1e-7, rel=1e-9)
    sparse = SparseKernelRegressor(reg=1e-2).fit(p["K_nm"], K_mm + 1e-7 * mean_diag * np.eye(30), p["Y"])
    np.testing.assert_allclose(model.predict(p["K_tm"]), sparse.predict(p["K_tm"]), rtol=1e-6, atol=1e-6)
    s[0] = -0.5 * mean_diag
    with pytest.raises(InputError, match="not positive semi-definite") as err:
        FalkonRegressor(reg=1e-2).fit(p["K_nm"], (U * s) @ U.T, p["Y"])
    assert err.value.source == "K_mm"


# ------------------------------------------------------------------ errors, model files, scikit-learn


P = molecules(n=20, m=12, seed=12)
FIT_ERRORS = [
    ({"K_mm": P["K_mm"][:, :11]}, "K_mm"),
    ({"K_mm": P["K_mm"] + np.triu(np.ones((12, 12)), 1)}, "K_mm"),
    ({"K_mm": np.zeros((12, 12))}, "K_mm"),
    ({"K_nm": P["K_nm"][:, :11]}, "K_nm"),
    ({"K_nm": P["K_nm"][:0]}, "K_nm"),
    ({"K_nm": np.where(np.arange(12) == 3, np.nan, P["K_nm"])}, "K_nm"),
    ({"K_nm": np.full((20, 12), "a")}, "K_nm"),
    ({"Y": P["Y"][:15]}, "Y"),
    ({"Y": np.full(20, np.inf)}, "Y"),
]


@pytest.mark.parametrize(("change", "name"), FIT_ERRORS)
def test_fit_rejects_bad_inputs(change: dict[str, np.ndarray], name: str) -> None:
    args = {"K_nm": P["K_nm"], "K_mm": P["K_mm"], "Y": P["Y"], **change}
    with pytest.raises(InputError) as err:
        FalkonRegressor(reg=0.1).fit(**args)
    assert err.value.source == name and name in str(err.value)


BAD_SETTINGS = [
    ({"reg": -1.0}, "reg"),
    ({"reg": "auto"}, "reg"),
    ({"relative_grid": [-1.0]}, "relative_grid"),
    ({"validation_fraction": 0.0}, "validation_fraction"),
    ({"validation_fraction": 1.0}, "validation_fraction"),
    ({"validation_fraction": 0.01}, "validation_fraction"),  # 0 of 20 rows held out
    ({"seed": -1}, "seed"),
    ({"cv_loss": "huber"}, "cv_loss"),
    ({"tol": 0.0}, "tol"),
    ({"tol": -1e-8}, "tol"),
    ({"max_iter": 0}, "max_iter"),
    ({"jitter": 0.0}, "jitter"),
    ({"preconditioner": "jacobi"}, "preconditioner"),
    ({"preconditioner_rows": 0}, "preconditioner_rows"),
    ({"block_size": 0}, "block_size"),
    ({"block_size": 2.5}, "block_size"),
    ({"device": "abacus"}, "device"),
    ({"dtype": "float16"}, "dtype"),
]
if not torch.cuda.is_available():
    BAD_SETTINGS.append(({"device": "cuda"}, "device"))


@pytest.mark.parametrize(("kwargs", "name"), BAD_SETTINGS)
def test_fit_rejects_bad_settings(kwargs: dict[str, object], name: str) -> None:
    model = FalkonRegressor(**kwargs)  # parameters are stored as given (scikit-learn) and checked by fit
    with pytest.raises(InputError) as err:
        model.fit(P["K_nm"], P["K_mm"], P["Y"])
    assert err.value.source == name


def test_predict_before_fit_and_bad_test_kernel() -> None:
    with pytest.raises(InputError, match="before fit") as err:
        FalkonRegressor(reg=0.1).predict(P["K_tm"])
    assert err.value.source == "FalkonRegressor"
    with pytest.raises(InputError, match="before fit"):
        FalkonRegressor(reg=0.1).fitted_arrays()
    model = FalkonRegressor(reg=0.1).fit(P["K_nm"], P["K_mm"], P["Y"])
    with pytest.raises(InputError, match="12 columns") as err:
        model.predict(P["K_tm"][:, :5])
    assert err.value.source == "K_tm"
    with pytest.raises(InputError, match="no predictive variance") as err:
        model.predict(P["K_tm"], return_std=True)
    assert err.value.source == "return_std"


def test_fitted_arrays_round_trip_attributes_and_clone(tmp_path) -> None:
    p = molecules(n=30, m=20, k=2, seed=13)
    model = FalkonRegressor(reg="cv", relative_grid=[1e-3, 1e-1]).fit(p["K_nm"], p["K_mm"], p["Y"])
    assert {name for name in vars(model) if name.endswith("_") and not name.startswith("_")} == {
        "solver_", "reg_", "reg_relative_", "cv_result_", "cv_iterations_", "jitter_", "preconditioner_scale_",
        "iterations_", "residual_norms_", "converged_", "n_inducing_", "target_mean_", "target_scale_",
        "n_train_", "n_targets_", "fit_seconds_",
    }  # fmt: skip
    assert (model.method, model.t, model.solver_, model.n_inducing_, model.n_train_) == ("ntk", math.inf, "falkon", 20, 30)
    np.savez(tmp_path / "model.npz", **model.fitted_arrays())
    with np.load(tmp_path / "model.npz", allow_pickle=False) as arrays:
        loaded = FalkonRegressor().load_fitted_arrays(dict(arrays))
    np.testing.assert_array_equal(loaded.predict(p["K_tm"]), model.predict(p["K_tm"]))
    assert (loaded.reg_, loaded.jitter_, loaded.n_targets_) == (model.reg_, model.jitter_, 2)
    one = FalkonRegressor(reg=0.1).fit(p["K_nm"], p["K_mm"], p["Y"][:, 0])
    restored = FalkonRegressor().load_fitted_arrays(one.fitted_arrays())
    assert restored.predict(p["K_tm"]).shape == (6,)
    sparse = SparseKernelRegressor(reg=0.1).fit(p["K_nm"], p["K_mm"], p["Y"])
    with pytest.raises(InputError) as err:
        FalkonRegressor().load_fitted_arrays(sparse.fitted_arrays())
    assert err.value.source == "solver"
    copy = clone(model)
    assert copy.get_params() == model.get_params() and not hasattr(copy, "reg_")
    np.testing.assert_array_equal(copy.fit(p["K_nm"], p["K_mm"], p["Y"]).predict(p["K_tm"]), model.predict(p["K_tm"]))


def test_zero_target_column_and_no_warning_when_converged() -> None:
    p = molecules(n=30, m=20, k=2, seed=14)
    Y = np.array(p["Y"])
    Y[:, 1] = 4.0  # constant: standardised to zeros, weights zero
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model = FalkonRegressor(reg=0.1).fit(p["K_nm"], p["K_mm"], Y)
    np.testing.assert_array_equal(model.inducing_weights[:, 1], 0.0)
    np.testing.assert_allclose(model.predict(p["K_tm"])[:, 1], 4.0, rtol=1e-15)
