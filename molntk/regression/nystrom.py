"""The Nyström factorisation of m inducing points, written once for the sparse regressor and
:func:`~molntk.regression.solvers.nystrom_solve`.

K_mm (m, m), the kernel among the inducing points, symmetrised as (K_mm + K_mmᵀ)/2, is
U diag(s) Uᵀ. Eigenvalues s ≤ ``rank_rtol`` · s_max (rank deficiency, rounding, negative
quadrature error) are dropped, r are kept: root = U_r diag(s_r^{-1/2}) (m, r),
B = K_nm root (n, r), and the Nyström kernel is K̃ = K_nm K_mm⁺ K_mn = B Bᵀ. With the thin
SVD B = Q diag(σ) Wᵀ and C = QᵀY, for λ > 0:

- fitted values of kernel ridge on K̃: F = Q diag(σ²/(σ² + λ)) C, hat diagonal
  h_i = Σ_k Q_ik² σ_k²/(σ_k² + λ), with 1 − h_i computed as
  (1 − ‖Q_i‖²) + Σ_k Q_ik² λ/(σ_k² + λ), without cancellation at small λ;
- dual weights X = (K̃ + λI)⁻¹ Y = Q diag(1/(σ² + λ)) C + (Y − Q C) / λ;
- inducing weights W_S = root Bᵀ X = root W diag(σ/(σ² + λ)) C (m, k), so that
  K̃(x, X) X = K_xS W_S needs only the kernel against the inducing points.

With ``method="cholesky"`` the root is instead T⁻¹ (m, m), T upper triangular with
TᵀT = K_mm + j·mean(diag K_mm)·I for the smallest j of ``rank_rtol``, 10·``rank_rtol``, …
at which the factorisation succeeds (:func:`jittered_cholesky`): root rootᵀ = (K_mm + jI)⁻¹,
so directions of K_mm with eigenvalues s ≫ j enter as in K_mm⁺ and those below j are damped
by s/(s + j) instead of dropped; r = m. It costs m³/3 flops for T and m³/3 for T⁻¹, in
level-3 BLAS, against ≈ 9 m³ for the eigendecomposition (whose tridiagonalisation is
level-2): the factorisation for m in the tens of thousands on a CPU.

Cost: O(m³) for K_mm, O(n m r) for B, O(n r²) for the SVD; K_nm is only read.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from scipy.linalg import lapack

from molntk.errors import InputError
from molntk.regression import validation

#: Eigenvalues of K_mm at or below RANK_RTOL · s_max are dropped from its pseudo-inverse.
RANK_RTOL = 1e-12
#: Largest relative jitter tried before K_mm is declared not positive semi-definite.
MAX_JITTER = 1e-2
#: Factorisations of K_mm (module docstring): its eigendecomposition cut at rank_rtol · s_max,
#: or the Cholesky factor of K_mm + j·mean(diag K_mm)·I.
ROOT_METHODS = ("eigh", "cholesky")


@dataclass(frozen=True, eq=False)
class NystromFactors:
    """root (m, r) of :class:`InducingRoot`, the thin SVD B = Q diag(σ) Wᵀ of B = K_nm root (``Wt``
    is Wᵀ), the number of K_mm eigenvalues dropped, its smallest raw eigenvalue and the
    relative jitter of a Cholesky root."""

    root: np.ndarray
    Q: np.ndarray
    sigma: np.ndarray
    Wt: np.ndarray
    n_dropped: int
    min_raw: float
    jitter: float = 0.0

    @property
    def rank(self) -> int:
        """r, the number of K_mm eigenvalues kept."""
        return int(self.root.shape[1])

    @property
    def mean_diag(self) -> float:
        """mean(diag K̃) = Σ_k σ_k² / n."""
        return float(np.sum(self.sigma**2) / self.Q.shape[0])

    def condition_number(self, reg: float) -> float:
        """cond₂(K̃ + λI) = (σ_max² + λ) / (σ_min² + λ), σ_min = 0 when n > r; ``inf`` when singular."""
        low = (0.0 if self.Q.shape[0] > self.rank else float(self.sigma[-1]) ** 2) + reg
        return (float(self.sigma[0]) ** 2 + reg) / low if low > 0 else math.inf

    def residuals(self, Y: np.ndarray, coeffs: np.ndarray, reg: float) -> tuple[np.ndarray, np.ndarray]:
        """Y − F (n, k) and 1 − h (n,) from C = QᵀY (``coeffs``) for λ > 0."""
        shrink, squares = reg / (self.sigma**2 + reg), self.Q**2
        outside = np.maximum(1.0 - squares.sum(axis=1), 0.0)  # 1 − ‖Q_i‖², ≥ 0 up to rounding
        return Y - self.Q @ ((1.0 - shrink)[:, None] * coeffs), outside + squares @ shrink

    def dual_weights(self, Y: np.ndarray, coeffs: np.ndarray, reg: float) -> np.ndarray:
        """X = (K̃ + λI)⁻¹ Y = Q diag(1/(σ² + λ)) C + (Y − Q C) / λ (n, k), C = QᵀY, λ > 0."""
        return self.Q @ (coeffs / (self.sigma[:, None] ** 2 + reg)) + (Y - self.Q @ coeffs) / reg

    def weights(self, coeffs: np.ndarray, reg: float) -> np.ndarray:
        """W_S = root W diag(σ/(σ² + λ)) C (m, k), C = QᵀY (:func:`inducing_weights`)."""
        return inducing_weights(self.root, self.sigma, self.Wt, coeffs, reg)


def inducing_weights(root: np.ndarray, sigma: np.ndarray, Wt: np.ndarray, coeffs: np.ndarray, reg: float) -> np.ndarray:
    """W_S = root W diag(σ/(σ² + λ)) C (m, k) from the SVD B = Q diag(σ) Wᵀ of the features and C = QᵀY."""
    return root @ (Wt.T @ ((sigma / (sigma**2 + reg))[:, None] * coeffs))


@dataclass(frozen=True, eq=False)
class InducingRoot:
    """root (m, r) with root rootᵀ = K_mm⁺ (eigenvalues cut) or (K_mm + jI)⁻¹ (Cholesky), the
    number of eigenvalues dropped, the smallest raw eigenvalue (NaN: not computed) and the
    relative jitter j / mean(diag K_mm) (0 for the eigendecomposition)."""

    root: np.ndarray
    n_dropped: int
    min_raw: float
    jitter: float = 0.0


def inducing_root(K_mm: object, rank_rtol: float = RANK_RTOL) -> InducingRoot:
    """Validate and factor K_mm (module docstring). InputError names ``K_mm`` / ``rank_rtol``."""
    rank_rtol = validation.positive(rank_rtol, "rank_rtol")
    K_mm = validation.symmetric_kernel(K_mm, "K_mm")
    s, U = np.linalg.eigh(K_mm)
    if s[-1] <= 0:
        raise InputError(
            "K_mm", f"has no positive eigenvalue (largest {s[-1]:.3g}): the inducing points carry no kernel"
        )
    keep = s > rank_rtol * float(s[-1])
    return InducingRoot(U[:, keep] / np.sqrt(s[keep]), int(K_mm.shape[0] - keep.sum()), float(s[0]))


def jittered_cholesky(
    K_mm: np.ndarray, jitter: float, device: torch.device, dtype: torch.dtype
) -> tuple[torch.Tensor, float]:
    """Upper T with TᵀT = K_mm + j·mean(diag K_mm)·I for the first j of jitter, 10·jitter, …
    ≤ :data:`MAX_JITTER` at which the Cholesky factorisation succeeds, factored in place on
    the device; (T, j). InputError naming ``K_mm`` when none does."""
    mean_diag = float(np.mean(np.diag(K_mm)))
    if mean_diag <= 0:
        raise InputError("K_mm", f"has mean diagonal {mean_diag:.3g}: the inducing points carry no kernel")
    info = torch.empty((), dtype=torch.int32, device=device)
    relative = jitter
    while relative <= MAX_JITTER * (1 + 1e-9):
        T = torch.tensor(K_mm, device=device, dtype=dtype)
        T.diagonal().add_(relative * mean_diag)
        torch.linalg.cholesky_ex(T, upper=True, out=(T, info))
        if int(info) == 0:
            return T, relative
        relative *= 10.0
    raise InputError(
        "K_mm",
        f"is not positive semi-definite: the Cholesky factorisation of K_mm + j·mean(diag K_mm)·I fails in {dtype} "
        f"for every j from {jitter:g} to {MAX_JITTER:g}",
    )


def cholesky_root(K_mm: object, rank_rtol: float = RANK_RTOL) -> InducingRoot:
    """root = T⁻¹ with TᵀT = K_mm + j·mean(diag K_mm)·I, j the first of ``rank_rtol``,
    10·``rank_rtol``, … at which the factorisation succeeds (module docstring). InputError
    names ``K_mm`` / ``rank_rtol``."""
    rank_rtol = validation.positive(rank_rtol, "rank_rtol")
    K_mm = validation.symmetric_kernel(K_mm, "K_mm")
    T, jitter = jittered_cholesky(K_mm, rank_rtol, torch.device("cpu"), torch.float64)
    del K_mm
    # T⁻¹ in T's memory: T (row-major, upper) is Tᵀ in column-major order, lower triangular,
    # which LAPACK's dtrtri inverts in place to (Tᵀ)⁻¹ = (T⁻¹)ᵀ, i.e. T⁻¹ row-major.
    transposed_inverse, info = lapack.dtrtri(T.triu_().numpy().T, lower=1, overwrite_c=1)
    if info != 0:
        raise InputError("K_mm", f"its jittered Cholesky factor is singular (dtrtri info {info})")
    return InducingRoot(transposed_inverse.T, 0, math.nan, jitter)


def nystrom_factors(K_nm: object, K_mm: object, rank_rtol: float = RANK_RTOL, method: str = "eigh") -> NystromFactors:
    """Validate K_nm (n, m), K_mm (m, m) and factor them (module docstring; ``method`` one of
    :data:`ROOT_METHODS`); K_nm is only read. InputError names ``K_mm`` / ``K_nm`` /
    ``rank_rtol`` / ``method``."""
    factor = {"eigh": inducing_root, "cholesky": cholesky_root}[validation.choice(method, "method", ROOT_METHODS)]
    root = factor(K_mm, rank_rtol)
    m = root.root.shape[0]
    K_nm = validation.matrix(K_nm, "K_nm")
    if K_nm.shape[1] != m or K_nm.shape[0] == 0:
        raise InputError("K_nm", f"must be (n, {m}) with n ≥ 1 (one column per inducing point), got shape {K_nm.shape}")
    Q, sigma, Wt = np.linalg.svd(K_nm @ root.root, full_matrices=False)
    return NystromFactors(root.root, Q, sigma, Wt, n_dropped=root.n_dropped, min_raw=root.min_raw, jitter=root.jitter)
