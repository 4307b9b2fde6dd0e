"""The amplitude σ_f² of the Gaussian process behind kernel ridge, fitted on the training data.

Kernel ridge on a kernel K with regulariser λ is the posterior mean of the GP model

    y = f + ε,    f ~ GP(0, σ_f² K),    ε ~ N(0, σ_n²),    λ = σ_n² / σ_f²,

whose mean does not depend on σ_f² (only on λ). The predictive variances do: with
A = K + λI, k* = K(X, x), k** = K(x, x),

    Var[f(x)] = σ_f² (k** − k*ᵀ A⁻¹ k*),      Var[y(x)] = Var[f(x)] + σ_f² λ.

Given λ (chosen by cross-validation), σ_f² has closed forms from the dual weights
W = A⁻¹ Z of the (standardised) targets Z and the diagonal d_i = [A⁻¹]_ii:

- ``"ml"``, maximum marginal likelihood: log p(z) = −½ zᵀA⁻¹z / σ_f² − ½ log det(σ_f² A)
  − (n/2) log 2π is largest at σ_f² = zᵀ A⁻¹ z / n = (1/n) Σ_i Z_i W_i;
- ``"loo"``, leave-one-out predictive likelihood (Rasmussen & Williams 2006, §5.4.2): the
  model without point i predicts y_i with residual r_i = W_i / d_i and variance
  σ_f² / d_i; Σ_i log N(r_i; 0, σ_f² / d_i) is largest at σ_f² = (1/n) Σ_i r_i² d_i =
  (1/n) Σ_i W_i² / d_i, i.e. the LOO z-scores r_i (d_i / σ_f²)^{1/2} have unit mean square;
- ``"none"``: σ_f² = 1, the kernel's own scale (uncalibrated).

LOO is the default of :class:`~molntk.regression.KernelRegressor`: it scores the
predictive distributions of held-out points, which is what a coverage test checks, and
(R&W §5.4.2; Bachoc 2013) it stays calibrated when the GP model is misspecified — as a
quadrature NTK with λ at its floor is — while the marginal likelihood trusts the model.
Both are reported on QM9 by ``benchmarks/uncertainty_calibration.py``. The amplitude is
per target (one λ, k amplitudes).
"""

from __future__ import annotations

import math

import numpy as np
import scipy.linalg

from molntk.errors import InputError
from molntk.regression import validation
from molntk.regression.ntk import ntk_filter
from molntk.regression.selection import loo_residuals
from molntk.regression.spectral import Eigensystem

AMPLITUDES = ("loo", "ml", "none")


def fit_amplitude(method: str, weights: np.ndarray, targets: np.ndarray, inverse_diagonal: np.ndarray) -> np.ndarray:
    """σ_f² per target, (k,), by ``method`` (module docstring) from W = A⁻¹ Z (n, k), the
    targets Z (n, k) and d = diag(A⁻¹) (n,)."""
    method = validation.choice(method, "amplitude", AMPLITUDES)
    if method == "none":
        return np.ones(weights.shape[1])
    if method == "ml":
        return np.mean(targets * weights, axis=0)
    return np.mean(weights**2 / inverse_diagonal[:, None], axis=0)


def inverse_diagonal(eig: Eigensystem, reg: float) -> np.ndarray:
    """d_i = [(K + λI)⁻¹]_ii = Σ_j V_ij² / (s_j + λ) (pseudo-inverse where s_j + λ = 0)."""
    return (eig.vectors**2) @ ntk_filter(eig.values + reg)


def eig_targets(eig: Eigensystem, weights: np.ndarray, reg: float) -> np.ndarray:
    """The targets Z = (K + λI) W = V diag(s + λ) Vᵀ W of dual weights W."""
    return eig.from_basis((eig.values + reg)[:, None] * eig.to_basis(weights))


def eigen_amplitude(method: str, eig: Eigensystem, weights: np.ndarray, reg: float) -> np.ndarray:
    """σ_f² per target from the eigensystem of K and W = (K + λI)⁻¹ Z."""
    return fit_amplitude(method, weights, eig_targets(eig, weights, reg), inverse_diagonal(eig, reg))


def loo_predictive(eig: Eigensystem, Z: object, reg: float) -> tuple[np.ndarray, np.ndarray]:
    """Leave-one-out residuals r_i = [A⁻¹Z]_i / d_i ((n,) or (n, k) like Z) and the LOO
    predictive variances of y at σ_f² = 1, 1 / d_i (n,) (R&W eqs. 5.10–5.12)."""
    residuals = loo_residuals(eig, Z, reg)
    return residuals, 1.0 / inverse_diagonal(eig, reg)


def log_marginal_likelihood(eig: Eigensystem, Z: object, reg: float, amplitude: float) -> float | np.ndarray:
    """log p(z) = −½ zᵀ(σ_f² A)⁻¹z − ½ Σ_j log(σ_f² (s_j + λ)) − (n/2) log 2π per target
    (a float for 1-d Z), A = K + λI > 0."""
    reg = validation.nonnegative(reg, "reg")
    amplitude = validation.positive(amplitude, "amplitude")
    Z2, was_1d = validation.targets(Z, "Z", rows=eig.n)
    a = eig.values + reg
    if np.any(a <= 0):
        raise InputError("reg", "K + λI is singular: the marginal likelihood needs λ > 0 or a positive definite K")
    quadratic = np.sum(eig.to_basis(Z2) ** 2 / a[:, None], axis=0)
    value = -0.5 * quadratic / amplitude - 0.5 * np.sum(np.log(amplitude * a)) - 0.5 * eig.n * math.log(2 * math.pi)
    return float(value[0]) if was_1d else value


def cholesky_inverse_diagonal(factor: np.ndarray) -> np.ndarray:
    """d = diag((K + λI)⁻¹) from the lower Cholesky factor L of K + λI (LAPACK dpotri, n³/3 flops)."""
    inverse, info = scipy.linalg.lapack.dpotri(factor, lower=1)
    if info != 0:
        raise InputError("K_train", f"K + λI could not be inverted from its Cholesky factor (LAPACK dpotri info {info})")
    return np.diag(inverse).copy()


class UncalibratedWarning(UserWarning):
    """The training data determine no amplitude (every leave-one-out residual is 0 to rounding,
    e.g. copies of one molecule): standard deviations are returned as inf, "unknown"."""


#: Leave-one-out residuals below this fraction of the targets' magnitude are rounding: no information.
ROUNDING = 1e-9


def refit_loo_residuals(eig: Eigensystem, reg: float, weights: np.ndarray, shifts: np.ndarray) -> np.ndarray:
    """Standardised LOO residuals when the targets depend on fits to all training points (a
    baseline): leaving point i out changes Z to Z + δ_i (``shifts[i]``, (n, k)), and
    r_i = [A⁻¹(Z + δ_i)]_i / d_i = (W_i + Σ_j [A⁻¹]_ij δ_ij) / d_i, shape (n, k). Forms A⁻¹: n³."""
    g = ntk_filter(eig.values + reg)
    inverse = (eig.vectors * g) @ eig.vectors.T
    corrections = np.einsum("ij,ijk->ik", inverse, shifts)
    return (weights + corrections) / np.diag(inverse)[:, None]
