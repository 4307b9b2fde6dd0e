"""One eigendecomposition of a symmetric train kernel, shared by every solve.

K = V diag(s) Vᵀ (s ascending, V orthonormal). Everything the regression module needs is a
spectral function of K + λI, so it costs O(n²) per regulariser λ, training time t or target
once V is known:

    (K + λI)⁻¹ Y = V diag(1 / (s + λ)) Vᵀ Y,     cond(K + λI) = (s_max + λ) / (s_min + λ).

Eigenvalue clipping. A kernel is positive semi-definite, but rounding (in the kernel itself
and in the eigensolver, ~ n·ε·‖K‖) gives the smallest eigenvalues of a (nearly) singular
kernel tiny negative values. Eigenvalues in [-psd_rtol·s_max, 0) are set to 0, i.e. the
solves use the nearest PSD matrix V diag(max(s, 0)) Vᵀ; the number clipped is recorded.
A more negative eigenvalue means the kernel is not PSD and is an error.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np

from molntk.errors import InputError
from molntk.regression.validation import symmetric_kernel

#: Negative eigenvalues down to -PSD_RTOL · s_max are rounding noise and are clipped to 0.
#: Loose enough for kernels computed in float32 (relative error ~1e-7) and cast to float64.
PSD_RTOL = 1e-6
#: cond(K + λI) above this triggers :class:`IllConditionedWarning`: a float64 solve then
#: keeps only about 16 - 12 = 4 significant digits.
ILL_CONDITIONED = 1e12


class IllConditionedWarning(UserWarning):
    """K + λI is nearly singular: predictions may have lost most of their precision."""


@dataclass(frozen=True, eq=False)
class Eigensystem:
    """Eigendecomposition K = V diag(s) Vᵀ of a symmetric PSD train kernel (s clipped at 0).

    ``values`` (n,) ascending and ≥ 0; ``vectors`` (n, n) with orthonormal columns;
    ``mean_diag`` = mean(diag K) (the kernel's scale, for relative regularisers);
    ``n_clipped`` eigenvalues were tiny negatives set to 0, the smallest being ``min_raw``.
    """

    values: np.ndarray
    vectors: np.ndarray
    mean_diag: float
    n_clipped: int
    min_raw: float

    @property
    def n(self) -> int:
        return int(self.values.size)

    def to_basis(self, array: np.ndarray) -> np.ndarray:
        """Vᵀ A: coefficients of the columns of A (n, ...) in the eigenbasis."""
        return self.vectors.T @ array

    def from_basis(self, coeffs: np.ndarray) -> np.ndarray:
        """V C: back from eigenbasis coefficients to the training points."""
        return self.vectors @ coeffs

    def rotate(self, matrix: np.ndarray) -> np.ndarray:
        """Vᵀ M V: an (n, n) matrix on the training points in the eigenbasis of K."""
        return self.vectors.T @ matrix @ self.vectors

    def condition_number(self, reg: float) -> float:
        """cond₂(K + λI) = (s_max + λ) / (s_min + λ); ``inf`` when K + λI is singular."""
        low = float(self.values[0]) + reg
        high = float(self.values[-1]) + reg
        return high / low if low > 0 else float("inf")


def eigensystem(K: object, name: str = "K_train", *, psd_rtol: float = PSD_RTOL) -> Eigensystem:
    """Eigendecompose a symmetric PSD kernel (numpy or torch, cast to float64).

    Raises :class:`InputError` naming ``name`` when K is not square, not symmetric, has
    non-finite entries, or has an eigenvalue below -psd_rtol · s_max (not PSD).
    """
    matrix = symmetric_kernel(K, name)
    values, vectors = np.linalg.eigh(matrix)
    top = max(float(values[-1]), 0.0)
    min_raw = float(values[0])
    if min_raw < -psd_rtol * top or (top == 0.0 and min_raw < 0.0):
        raise InputError(
            name,
            f"is not positive semi-definite: smallest eigenvalue {min_raw:.3g} is below "
            f"-{psd_rtol:g} × largest ({top:.3g}); check the kernel, or pass a larger psd_rtol to clip it",
        )
    negative = values < 0
    values = np.where(negative, 0.0, values)
    return Eigensystem(
        values=values,
        vectors=vectors,
        mean_diag=float(np.mean(np.diag(matrix))),
        n_clipped=int(negative.sum()),
        min_raw=min_raw,
    )


def warn_if_ill_conditioned(eig: Eigensystem, reg: float, name: str = "K_train") -> float:
    """cond(K + λI); warns with :class:`IllConditionedWarning` above :data:`ILL_CONDITIONED`."""
    cond = eig.condition_number(reg)
    if cond > ILL_CONDITIONED:
        warnings.warn(
            f"{name} + λI is nearly singular (λ = {reg:.3g}, condition number {cond:.3g} > {ILL_CONDITIONED:.0e}); "
            "use a larger regulariser",
            IllConditionedWarning,
            stacklevel=3,
        )
    return cond
