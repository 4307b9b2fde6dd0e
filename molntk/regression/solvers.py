"""Solvers of (K + λI) X = Y for large N: Cholesky, preconditioned CG and Nyström.

K (n, n) symmetric PSD, λ ≥ 0 (> 0 for PCG preconditioners and Nyström), Y (n,) or (n, k)
(several targets at once); X has Y's shape. All in float64.

- :func:`cholesky_solve`: K + λI = L Lᵀ (:func:`cholesky_factor`: blocked, on torch's BLAS,
  lower triangle of K only), X = L⁻ᵀ L⁻¹ Y. O(n³/3) time, n² memory: the exact solve "when it fits"
  (:func:`cholesky_fits`: 8 n² bytes within the memory budget).
- :func:`pcg_solve`: conjugate gradients on all k columns at once (one product (K + λI) P
  per iteration, per-column step sizes α_j = r_jᵀz_j / p_jᵀ(K+λI)p_j and β_j; a column stops
  when ‖r_j‖ ≤ tol ‖y_j‖). Preconditioners M ≈ K + λI, applied as z = M⁻¹ r:
  ``"jacobi"``: M = diag(K) + λI; ``"pivoted-cholesky"``: M = L_r L_rᵀ + λI with L_r the
  rank-r pivoted Cholesky factor of K (:func:`pivoted_cholesky`), inverted by Woodbury:
  M⁻¹ r = (r − L_r (λI_r + L_rᵀL_r)⁻¹ L_rᵀ r) / λ. O(n² · iterations) time; K may be an
  ``np.memmap``.
- :func:`nystrom_solve`: inducing molecules S (m of them) give K ≈ K̃ = K_nS K_SS⁺ K_Sn; X and
  the inducing weights W_S with K̃(x, X) X = K_xS W_S come from the factors of
  :mod:`molntk.regression.nystrom` (the sparse regressor's too): only the kernel against the
  inducing molecules is needed, O(n m²) time, n·m memory. For large N
  compute K_nS and K_SS with the block engine: ``kernel_matrices(bk, train[S], train)``
  gives K_SS as ``*_train`` and K_nS as ``*_test``.

:func:`solver_errors` runs the exact solve and the others on the same problem and reports
their relative errors ‖X − X*‖_F / ‖X*‖_F and of the fitted training values
‖F − F*‖_F / ‖F*‖_F (F* = K X*; F = K X for PCG, F = K_nS W_S for Nyström).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.linalg

from molntk.errors import InputError
from molntk.regression.blocked_cholesky import lower_cholesky_in_place
from molntk.regression.nystrom import RANK_RTOL, factor_inducing, nystrom_factors
from molntk.regression.validation import matrix, nonnegative, positive, restore, targets
from molntk.utils.checks import integer

PRECONDITIONERS = ("pivoted-cholesky", "jacobi")


@dataclass(frozen=True, eq=False)
class Solution:
    """X with Y's shape; ``method``; wall ``seconds``; PCG ``iterations`` and final largest
    relative residual max_j ‖r_j‖/‖y_j‖; Nyström ``inducing_weights`` W_S (m, k) and
    ``inducing`` indices."""

    x: np.ndarray
    method: str
    seconds: float
    iterations: int | None = None
    residual: float | None = None
    inducing: np.ndarray | None = None
    inducing_weights: np.ndarray | None = field(default=None, repr=False)


def square_kernel(K: Any, name: str = "K_train") -> np.ndarray:
    """K as a square float64 matrix; a float64 ndarray (np.memmap included) is used as is,
    without a copy (the block engine has checked its entries)."""
    K_arr = K if isinstance(K, np.ndarray) and K.dtype == np.float64 and K.ndim == 2 else matrix(K, name)
    if K_arr.shape[0] != K_arr.shape[1]:
        raise InputError(name, f"must be square, got shape {K_arr.shape}")
    return K_arr


#: Rows of K per product chunk in :func:`kernel_product` (a chunk of a 110,000-column K is 0.9 GB).
PRODUCT_ROWS = 1024


def kernel_product(K: np.ndarray, P: np.ndarray) -> np.ndarray:
    """K P. In one GEMM for an in-memory K; for a memory map (or a view of one, such as the
    top-left n × n of a larger stored matrix, whose rows are not contiguous), by chunks of
    :data:`PRODUCT_ROWS` rows, so the working memory is one chunk, never a copy of K."""
    if not isinstance(K, np.memmap):
        return K @ P
    out = np.empty((K.shape[0], P.shape[1]))
    for start in range(0, K.shape[0], PRODUCT_ROWS):
        stop = min(start + PRODUCT_ROWS, K.shape[0])
        out[start:stop] = np.asarray(K[start:stop]) @ P
    return out


def cholesky_fits(n: int, budget_bytes: int) -> bool:
    """Whether the Cholesky factor (8 n² bytes, besides K) fits ``budget_bytes``."""
    return 8 * n * n <= budget_bytes


def cholesky_factor(K: Any, reg: float) -> np.ndarray:
    """Lower Cholesky factor L of K + λI = L Lᵀ (n, n), Fortran-ordered, in a copy of K
    (:func:`~molntk.regression.blocked_cholesky.lower_cholesky_in_place`, any n; the strict
    upper triangle is not part of the factor: LAPACK and :func:`scipy.linalg.cho_solve` with
    ``lower=True`` ignore it).

    Raises InputError naming ``K_train`` when K + λI is not positive definite.
    """
    K_arr = square_kernel(K)
    reg = nonnegative(reg, "reg")
    A = np.array(K_arr, dtype=np.float64, order="F")
    A[np.diag_indices_from(A)] += reg
    if lower_cholesky_in_place(A) != 0:
        raise InputError("K_train", f"K + λI is not positive definite (λ = {reg:g}); use a larger regulariser")
    return A


def cholesky_solve(K: Any, Y: Any, reg: float) -> Solution:
    """Exact float64 solve by Cholesky of K + λI (:func:`cholesky_factor`; lower triangle of K is read).

    Raises InputError naming ``K_train`` when K + λI is not positive definite.
    """
    start = time.perf_counter()
    K_arr = square_kernel(K)
    Y_arr, vector = targets(Y, "Y", rows=K_arr.shape[0])
    factor = cholesky_factor(K_arr, reg)
    x = scipy.linalg.cho_solve((factor, True), Y_arr, check_finite=False)
    return Solution(restore(x, vector), "cholesky", time.perf_counter() - start)


def pivoted_cholesky(K: np.ndarray, rank: int, rtol: float = 1e-12) -> tuple[np.ndarray, np.ndarray]:
    """Greedy rank-r pivoted Cholesky K ≈ L Lᵀ: (L (n, r'), pivots (r',)), r' ≤ rank.

    Step i takes the pivot p = argmax of the residual diagonal d, sets
    L[:, i] = (K[:, p] − L[:, :i] L[p, :i]ᵀ) / √d_p and d ← d − L[:, i]²; it stops early when
    max d ≤ rtol · max diag K. Reads only diag K and r columns, as rows K[p, :] (K is
    symmetric; a row of a C-ordered memmap is one contiguous read): O(n r²).
    """
    n = K.shape[0]
    rank = min(int(rank), n)
    if rank < 1:
        raise ValueError(f"rank must be >= 1, got {rank}")
    d = np.array(np.diag(K), dtype=np.float64)
    stop = rtol * max(float(d.max()), 0.0)
    L = np.zeros((n, rank))
    pivots = []
    for i in range(rank):
        p = int(np.argmax(d))
        if d[p] <= stop:
            break
        col = np.asarray(K[p, :], dtype=np.float64) - L[:, :i] @ L[p, :i]
        L[:, i] = col / np.sqrt(d[p])
        d -= L[:, i] ** 2
        d[p] = 0.0
        pivots.append(p)
    r = len(pivots)
    return L[:, :r], np.array(pivots, dtype=np.int64)


def jacobi_preconditioner(K: np.ndarray, reg: float) -> Callable[[np.ndarray], np.ndarray]:
    """z = r / (diag K + λ)."""
    inv = 1.0 / (np.diag(K) + reg)
    return lambda r: r * inv[:, None]


def pivoted_cholesky_preconditioner(K: np.ndarray, reg: float, rank: int) -> Callable[[np.ndarray], np.ndarray]:
    """z = (L Lᵀ + λI)⁻¹ r by Woodbury (module docstring); needs λ > 0."""
    L, _ = pivoted_cholesky(K, rank)
    inner = scipy.linalg.cho_factor(reg * np.eye(L.shape[1]) + L.T @ L, lower=True)
    return lambda r: (r - L @ scipy.linalg.cho_solve(inner, L.T @ r)) / reg


def pcg_solve(
    K: Any,
    Y: Any,
    reg: float,
    *,
    preconditioner: str = "pivoted-cholesky",
    rank: int = 100,
    tol: float = 1e-10,
    max_iter: int | None = None,
) -> Solution:
    """Preconditioned conjugate gradients for all columns of Y at once (module docstring).

    Stops when every column has ‖r_j‖ ≤ tol ‖y_j‖ or after ``max_iter`` (default n)
    iterations; ``Solution.residual`` is the largest final relative residual.
    """
    start = time.perf_counter()
    K_arr = square_kernel(K)
    Y_arr, vector = targets(Y, "Y", rows=K_arr.shape[0])
    reg = positive(reg, "reg")
    if preconditioner == "jacobi":
        apply_m = jacobi_preconditioner(K_arr, reg)
    elif preconditioner == "pivoted-cholesky":
        apply_m = pivoted_cholesky_preconditioner(K_arr, reg, rank)
    else:
        raise ValueError(f"unknown preconditioner {preconditioner!r}; choose one of {PRECONDITIONERS}")
    max_iter = K_arr.shape[0] if max_iter is None else integer(max_iter, "max_iter", minimum=1)
    y_norm = np.linalg.norm(Y_arr, axis=0)
    y_norm[y_norm == 0] = 1.0
    X = np.zeros_like(Y_arr)
    R = Y_arr.copy()
    Z = apply_m(R)
    P = Z.copy()
    rz = np.einsum("ij,ij->j", R, Z)
    residual = np.linalg.norm(R, axis=0) / y_norm
    iterations = 0
    while iterations < max_iter and (active := residual > tol).any():
        AP = kernel_product(K_arr, P) + reg * P
        alpha = np.where(active, rz / np.where(active, np.einsum("ij,ij->j", P, AP), 1.0), 0.0)
        X += alpha * P
        R -= alpha * AP
        Z = apply_m(R)
        rz_new = np.einsum("ij,ij->j", R, Z)
        beta = np.where(active, rz_new / np.where(active, rz, 1.0), 0.0)
        P = Z + beta * P
        rz = rz_new
        residual = np.linalg.norm(R, axis=0) / y_norm
        iterations += 1
    return Solution(restore(X, vector), f"pcg-{preconditioner}", time.perf_counter() - start, iterations, float(residual.max()))


def nystrom_solve(
    K_nm: Any, K_mm: Any, Y: Any, reg: float, *, inducing: np.ndarray | None = None, rank_rtol: float = RANK_RTOL
) -> Solution:
    """(K̃ + λI)⁻¹ Y for the Nyström approximation through ``K_nm`` (n, m) and ``K_mm`` (m, m),
    and the inducing weights W_S: :meth:`~molntk.regression.nystrom.NystromFactors.dual_weights`
    and :meth:`~molntk.regression.nystrom.NystromFactors.weights` of
    :func:`~molntk.regression.nystrom.nystrom_factors` (K_mm eigenvalues ≤ ``rank_rtol`` · s_max
    dropped); ``inducing``: the inducing points' indices, recorded in the result."""
    start = time.perf_counter()
    nys = nystrom_factors(K_nm, factor_inducing(K_mm, rank_rtol))
    Y_arr, vector = targets(Y, "Y", rows=nys.Q.shape[0])
    reg = positive(reg, "reg")
    coeffs = nys.Q.T @ Y_arr
    return Solution(
        restore(nys.dual_weights(Y_arr, coeffs, reg), vector),
        "nystrom",
        time.perf_counter() - start,
        inducing=inducing,
        inducing_weights=restore(nys.weights(coeffs, reg), vector),
    )


INDUCING_METHODS = ("pivoted", "random")


def inducing_points(K: np.ndarray | None, n: int, m: int, *, method: str = "random", seed: int = 0) -> np.ndarray:
    """m inducing indices out of n: ``"random"`` (seeded uniform sample without replacement,
    needs no kernel; sorted) or ``"pivoted"`` (the pivots of a rank-m pivoted Cholesky of
    K, greedy by largest residual variance; needs K)."""
    m = integer(m, "m", minimum=1)
    if m > n:
        raise InputError("m", f"asks for {m} inducing points out of {n} training points")
    if method == "random":
        return np.sort(np.random.default_rng(seed).choice(n, size=m, replace=False))
    if method == "pivoted":
        if K is None:
            raise InputError("K", "pivoted inducing points need the train kernel")
        return pivoted_cholesky(square_kernel(K), m)[1]
    raise InputError("method", f"must be one of {INDUCING_METHODS}, got {method!r}")


def _relative(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), np.finfo(float).tiny))


def solver_errors(
    K: Any,
    Y: Any,
    reg: float,
    *,
    preconditioners: Sequence[str] = PRECONDITIONERS,
    rank: int = 100,
    tol: float = 1e-10,
    inducing_sizes: Sequence[int] = (),
    inducing_method: str = "pivoted",
    seed: int = 0,
) -> list[dict[str, Any]]:
    """Exact (Cholesky) solve and the approximate ones on the same problem, with their
    relative errors against it: one dict per solver with ``method``, ``seconds``,
    ``solution_error`` ‖X − X*‖/‖X*‖, ``fit_error`` ‖F − F*‖/‖F*‖ (module docstring), and
    ``iterations``/``residual`` (PCG) or ``m`` (Nyström)."""
    K_arr = square_kernel(K)
    exact = cholesky_solve(K_arr, Y, reg)
    fit_exact = K_arr @ exact.x
    rows = [{"method": exact.method, "seconds": exact.seconds, "solution_error": 0.0, "fit_error": 0.0}]
    for name in preconditioners:
        sol = pcg_solve(K_arr, Y, reg, preconditioner=name, rank=rank, tol=tol)
        rows.append({
            "method": sol.method, "seconds": sol.seconds, "iterations": sol.iterations, "residual": sol.residual,
            "solution_error": _relative(sol.x, exact.x), "fit_error": _relative(K_arr @ sol.x, fit_exact),
        })
    for m in inducing_sizes:
        idx = inducing_points(K_arr, K_arr.shape[0], m, method=inducing_method, seed=seed)
        sol = nystrom_solve(K_arr[:, idx], K_arr[np.ix_(idx, idx)], Y, reg, inducing=idx)
        rows.append({
            "method": sol.method, "m": int(m), "seconds": sol.seconds,
            "solution_error": _relative(sol.x, exact.x), "fit_error": _relative(K_arr[:, idx] @ sol.inducing_weights, fit_exact),
        })
    return rows
