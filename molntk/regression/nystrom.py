"""The Nyström factorisation of m inducing points, written once for the sparse regressor and
:func:`~molntk.regression.solvers.nystrom_solve`.

K_mm (m, m), the kernel among the inducing points, symmetrised as (K_mm + K_mmᵀ)/2, is
U diag(s) Uᵀ. Eigenvalues s ≤ ``rank_rtol`` · s_max (rank deficiency, rounding, negative
quadrature error) are dropped, r are kept: the root is R = U_r diag(s_r^{-1/2}) (m, r),
B = K_nm R (n, r), and the Nyström kernel is K̃ = K_nm K_mm⁺ K_mn = B Bᵀ. With an orthonormal
Q (n, k) and σ (k,) such that K̃ = Q diag(σ²) Qᵀ, C = QᵀY and P = BᵀQ (r, k), for λ > 0:

- fitted values of kernel ridge on K̃: F = Q diag(σ²/(σ² + λ)) C, hat diagonal
  h_i = Σ_k Q_ik² σ_k²/(σ_k² + λ), with 1 − h_i computed as
  (1 − ‖Q_i‖²) + Σ_k Q_ik² λ/(σ_k² + λ), without cancellation at small λ;
- dual weights X = (K̃ + λI)⁻¹ Y = Q diag(1/(σ² + λ)) C + (Y − Q C) / λ;
- inducing weights W_S = R Bᵀ X = R P diag(1/(σ² + λ)) C (m, k), so that
  K̃(x, X) X = K_xS W_S needs only the kernel against the inducing points.

Q and σ come from the thin SVD B = Q diag(σ) Wᵀ (k = r, P = W diag(σ)) when n > r, and
from the eigendecomposition K̃ = B Bᵀ = Q diag(σ²) Qᵀ (k = n, eigenvalues below 0 from
rounding set to 0; P = Rᵀ K_mn Q, so that B need not be kept) when n ≤ r: the n × n kernel
the exact solver decomposes, in 4 n² numbers (K̃, its eigenvectors, the divide-and-conquer
workspace), where the SVD of a square B needs ≈ 7 n² besides B (22 GB at n = r = 20,000).
Its eigenvalues carry an absolute error of order ε‖K̃‖ (the exact solver's), the SVD's σ² a
relative one; the λ grid's floor, 1e-10 · mean(diag K̃) ≥ 1e-10 ‖K̃‖ / n, stays above it
for n up to ≈ 10⁵. This route's products and eigensolver run on torch (its BLAS and LAPACK):
scipy's OpenBLAS faults in its multithreaded ``dsyrk`` on a 20,000 × 20,000 product, as in
its ``dpotrf`` (:mod:`molntk.regression.blocked_cholesky`).

With ``method="cholesky"`` the root is instead R = T⁻¹ (m, m), T upper triangular with
TᵀT = K_mm + j·mean(diag K_mm)·I for the smallest j of ``rank_rtol``, 10·``rank_rtol``, …
at which the factorisation succeeds (:func:`cholesky_root`): R Rᵀ = (K_mm + jI)⁻¹,
so directions of K_mm with eigenvalues s ≫ j enter as in K_mm⁺ and those below j are damped
by s/(s + j) instead of dropped; r = m. T costs m³/3 flops in level-3 BLAS, against ≈ 9 m³
for the eigendecomposition (whose tridiagonalisation is level-2): the factorisation for m in
the tens of thousands on a CPU. T⁻¹ is never formed: B and the inducing weights come from
triangular solves with T.

K_mm is factored once (:func:`factor_inducing`, an :class:`InducingRoot`) for any number
of training sets against the same inducing points (a learning curve, several targets); with
``overwrite`` the caller's K_mm is symmetrised and Cholesky factored in its own memory, so
that the m × m factor is the only m × m array (m = 30,000: 7.2 GB instead of 21.6).

Cost: O(m³) for the factor, O(n m r) for B, O(n r²) for the SVD (n > r) or O(n² r + n³)
for K̃ and its eigendecomposition (n ≤ r); K_nm is only read.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import torch

from molntk.errors import InputError
from molntk.regression import validation
from molntk.regression.blocked_cholesky import SymmetricBackup, shifted_cholesky_in_place

#: Eigenvalues of K_mm at or below RANK_RTOL · s_max are dropped from its pseudo-inverse.
RANK_RTOL = 1e-12
#: Largest relative jitter tried before K_mm is declared not positive semi-definite.
MAX_JITTER = 1e-2
#: Factorisations of K_mm (module docstring): its eigendecomposition cut at rank_rtol · s_max,
#: or the Cholesky factor of K_mm + j·mean(diag K_mm)·I.
ROOT_METHODS = ("eigh", "cholesky")


@dataclass(frozen=True, eq=False)
class InducingRoot:
    """A factor R of the inducing points' kernel, R Rᵀ = K_mm⁺ (eigenvalues cut) or
    (K_mm + jI)⁻¹ (Cholesky), made by :func:`factor_inducing` once and applied to any number
    of training sets (:func:`nystrom_factors`).

    ``factor`` holds R = U_r diag(s_r^{-1/2}) (m, r) for ``method`` "eigh", and for
    "cholesky" the upper triangular T (m, m) with TᵀT = K_mm + jI, R = T⁻¹, applied by
    triangular solves (level-3 BLAS, n m² flops for n rows, half the product with an
    explicit inverse). Also: the settings it was made with, the number of eigenvalues
    dropped, the smallest raw eigenvalue (NaN: not computed) and the relative jitter
    j / mean(diag K_mm) (0 for the eigendecomposition)."""

    factor: np.ndarray
    method: str
    rank_rtol: float
    n_dropped: int
    min_raw: float
    jitter: float = 0.0

    @property
    def m(self) -> int:
        """The number of inducing points."""
        return int(self.factor.shape[0])

    @property
    def rank(self) -> int:
        """r, the number of directions of K_mm kept (m for a Cholesky factor)."""
        return int(self.factor.shape[1])

    def features(self, K_nm: np.ndarray) -> np.ndarray:
        """B = K_nm R (n, r): K_nm R, or the X of X T = K_nm by a triangular solve."""
        if self.method == "eigh":
            return K_nm @ self.factor
        return torch.linalg.solve_triangular(_tensor(self.factor), _tensor(K_nm), upper=True, left=False).numpy()

    def apply(self, V: np.ndarray) -> np.ndarray:
        """R V (m, k) for V (r, k): R V, or the X of T X = V by a triangular solve."""
        if self.method == "eigh":
            return self.factor @ V
        return torch.linalg.solve_triangular(_tensor(self.factor), _tensor(V), upper=True).numpy()

    def apply_transpose(self, V: np.ndarray) -> np.ndarray:
        """Rᵀ V (r, k) for V (m, k): Rᵀ V, or the X of Tᵀ X = V by a triangular solve."""
        if self.method == "eigh":
            return self.factor.T @ V
        return torch.linalg.solve_triangular(_tensor(self.factor).T, _tensor(V), upper=False).numpy()


def _tensor(a: np.ndarray) -> torch.Tensor:
    """A tensor on ``a``'s memory (no copy), read only here: torch's warning about read-only
    arrays (memmaps of stored kernels) is silenced."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        return torch.from_numpy(np.asarray(a))


@dataclass(frozen=True, eq=False)
class NystromFactors:
    """The :class:`InducingRoot` R and, for B = K_nm R, K̃ = B Bᵀ = Q diag(σ²) Qᵀ with
    P = BᵀQ (module docstring; σ in no particular order)."""

    root: InducingRoot
    Q: np.ndarray
    sigma: np.ndarray
    P: np.ndarray

    @property
    def rank(self) -> int:
        """r, the number of K_mm directions kept."""
        return self.root.rank

    @property
    def mean_diag(self) -> float:
        """mean(diag K̃) = Σ_k σ_k² / n."""
        return float(np.sum(self.sigma**2) / self.Q.shape[0])

    def condition_number(self, reg: float) -> float:
        """cond₂(K̃ + λI) = (σ_max² + λ) / (σ_min² + λ), σ_min = 0 when Q has fewer columns
        than rows (n > r); ``inf`` when singular."""
        low = (0.0 if self.Q.shape[0] > self.Q.shape[1] else float(self.sigma.min()) ** 2) + reg
        return (float(self.sigma.max()) ** 2 + reg) / low if low > 0 else math.inf

    @cached_property
    def _squares(self) -> tuple[np.ndarray, np.ndarray]:
        """(Q², 1 − ‖Q_i‖² clipped at 0): what every λ's hat diagonal needs, made once."""
        squares = self.Q**2
        return squares, np.maximum(1.0 - squares.sum(axis=1), 0.0)

    def residuals(self, Y: np.ndarray, coeffs: np.ndarray, reg: float) -> tuple[np.ndarray, np.ndarray]:
        """Y − F (n, k) and 1 − h (n,) from C = QᵀY (``coeffs``) for λ > 0."""
        shrink = reg / (self.sigma**2 + reg)
        squares, outside = self._squares
        return Y - self.Q @ ((1.0 - shrink)[:, None] * coeffs), outside + squares @ shrink

    def dual_weights(self, Y: np.ndarray, coeffs: np.ndarray, reg: float) -> np.ndarray:
        """X = (K̃ + λI)⁻¹ Y = Q diag(1/(σ² + λ)) C + (Y − Q C) / λ (n, k), C = QᵀY, λ > 0."""
        return self.Q @ (coeffs / (self.sigma[:, None] ** 2 + reg)) + (Y - self.Q @ coeffs) / reg

    def weights(self, coeffs: np.ndarray, reg: float) -> np.ndarray:
        """W_S = R P diag(1/(σ² + λ)) C (m, k), C = QᵀY (:func:`inducing_weights`)."""
        return inducing_weights(self.root, self.P, self.sigma, coeffs, reg)


def inducing_weights(root: InducingRoot, P: np.ndarray, sigma: np.ndarray, coeffs: np.ndarray, reg: float) -> np.ndarray:
    """W_S = R P diag(1/(σ² + λ)) C (m, k) for P = BᵀQ, K̃ = Q diag(σ²) Qᵀ and C = QᵀY (from
    a thin SVD B = Q diag(σ) Wᵀ: P = W diag(σ))."""
    return root.apply(P @ (coeffs / (sigma**2 + reg)[:, None]))


def eigh_root(K_mm: np.ndarray, rank_rtol: float) -> InducingRoot:
    """R = U_r diag(s_r^{-1/2}) of a validated K_mm, eigenvalues ≤ ``rank_rtol`` · s_max dropped."""
    s, U = np.linalg.eigh(K_mm)
    if s[-1] <= 0:
        raise InputError(
            "K_mm", f"has no positive eigenvalue (largest {s[-1]:.3g}): the inducing points carry no kernel"
        )
    keep = s > rank_rtol * float(s[-1])
    return InducingRoot(U[:, keep] / np.sqrt(s[keep]), "eigh", rank_rtol, int(K_mm.shape[0] - keep.sum()), float(s[0]))


def jitters(start: float) -> Iterator[float]:
    """The relative jitters tried for a Cholesky factorisation: start, 10·start, … ≤ :data:`MAX_JITTER`."""
    relative = start
    while relative <= MAX_JITTER * (1 + 1e-9):
        yield relative
        relative *= 10.0


def _mean_diagonal(K_mm: np.ndarray) -> float:
    """mean(diag K_mm), > 0 (InputError naming ``K_mm`` otherwise)."""
    mean_diag = float(np.mean(np.diag(K_mm)))
    if mean_diag <= 0:
        raise InputError("K_mm", f"has mean diagonal {mean_diag:.3g}: the inducing points carry no kernel")
    return mean_diag


def _not_factored(start: float, dtype: object) -> InputError:
    """The error of a K_mm that no jitter of :func:`jitters` (``start``) made factorable."""
    return InputError(
        "K_mm",
        f"is not positive semi-definite: the Cholesky factorisation of K_mm + j·mean(diag K_mm)·I fails in {dtype} "
        f"for every j from {start:g} to {MAX_JITTER:g}",
    )


def jittered_cholesky(
    K_mm: np.ndarray, jitter: float, device: torch.device, dtype: torch.dtype
) -> tuple[torch.Tensor, float]:
    """Upper T with TᵀT = K_mm + j·mean(diag K_mm)·I for the first j of :func:`jitters`
    (``jitter``) at which the Cholesky factorisation succeeds, factored in a copy on the
    device; (T, j). InputError naming ``K_mm`` when none does."""
    mean_diag = _mean_diagonal(K_mm)
    info = torch.empty((), dtype=torch.int32, device=device)
    for relative in jitters(jitter):
        T = torch.tensor(K_mm, device=device, dtype=dtype)
        T.diagonal().add_(relative * mean_diag)
        torch.linalg.cholesky_ex(T, upper=True, out=(T, info))
        if int(info) == 0:
            return T, relative
    raise _not_factored(jitter, dtype)


def cholesky_root(K_mm: np.ndarray, rank_rtol: float) -> InducingRoot:
    """T with TᵀT = K_mm + j·mean(diag K_mm)·I, j the first of :func:`jitters` (``rank_rtol``)
    at which the factorisation succeeds, computed in the memory of ``K_mm`` (symmetric,
    C-ordered, overwritten) by :func:`~molntk.regression.blocked_cholesky.shifted_cholesky_in_place`,
    which leaves the strict lower triangle outside the diagonal blocks as it was: a failed
    attempt is undone from it and the saved diagonal blocks (:class:`SymmetricBackup`); the
    lower triangle is zeroed at the end."""
    backup = SymmetricBackup(K_mm)
    mean_diag = _mean_diagonal(K_mm)
    for relative in jitters(rank_rtol):
        if shifted_cholesky_in_place(K_mm, relative * mean_diag, backup):
            for rows in backup.blocks:
                K_mm[rows, : rows.stop] = np.triu(K_mm[rows, : rows.stop], k=rows.start)
            return InducingRoot(K_mm, "cholesky", rank_rtol, 0, math.nan, relative)
    raise _not_factored(rank_rtol, "float64")


def factor_inducing(K_mm: object, rank_rtol: float = RANK_RTOL, method: str = "eigh", *,
                    overwrite: bool = False) -> InducingRoot:
    """Validate and factor K_mm (module docstring; ``method`` one of :data:`ROOT_METHODS`);
    with ``overwrite`` a writable float64 C-ordered K_mm is symmetrised and (Cholesky)
    factored in its own memory: the factor is then the only m × m array. InputError names
    ``K_mm`` / ``rank_rtol`` / ``method``."""
    factor = {"eigh": eigh_root, "cholesky": cholesky_root}[validation.choice(method, "method", ROOT_METHODS)]
    rank_rtol = validation.positive(rank_rtol, "rank_rtol")
    return factor(validation.symmetric_kernel(K_mm, "K_mm", overwrite=overwrite), rank_rtol)


def nystrom_factors(K_nm: object, root: InducingRoot) -> NystromFactors:
    """Validate K_nm (n, m) against the inducing factor ``root`` (:func:`factor_inducing`) and
    decompose K̃ = B Bᵀ, B = K_nm R: the thin SVD of B when n > r, else the eigendecomposition
    of K̃ (module docstring); K_nm is only read. InputError names ``K_nm``."""
    K_nm = validation.matrix(K_nm, "K_nm")
    if K_nm.shape[1] != root.m or K_nm.shape[0] == 0:
        raise InputError("K_nm", f"must be (n, {root.m}) with n ≥ 1 (one column per inducing point), got shape {K_nm.shape}")
    B = root.features(K_nm)
    if B.shape[0] > B.shape[1]:
        Q, sigma, Wt = np.linalg.svd(B, full_matrices=False)
        return NystromFactors(root, Q, sigma, Wt.T * sigma)
    features = torch.from_numpy(B)
    del B  # the features' memory goes with ``features``, once K̃ is formed
    gram = features @ features.T
    del features
    values, vectors = torch.linalg.eigh(gram)
    del gram
    Q = vectors.numpy()
    return NystromFactors(root, Q, np.sqrt(np.maximum(values.numpy(), 0.0)),
                          root.apply_transpose((_tensor(K_nm).T @ vectors).numpy()))
