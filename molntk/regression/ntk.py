"""NTK regression: mean prediction and NTK-GP variance at training time t (and t = ∞).

Model (Lee et al. 2019, "Wide neural networks of any depth evolve as linear models"): the
linearised network f_θ(x) = f₀(x) + ∇_θ f₀(x) (θ - θ₀), trained by gradient flow
dθ/dt = -η ∇L with L(θ) = ½ Σ_i ‖f_θ(x_i) - y_i‖² + ½ λ ‖θ - θ₀‖² (λ ≥ 0 a diagonal
regulariser; a loss averaged over the n points is the same with η → η/n). With
Θ = Θ(X, X) the NTK, K the NNGP kernel (the prior covariance of f₀) and

    M_t = (Θ + λI)⁻¹ (I - e^{-η (Θ + λI) t}),       M_∞ = (Θ + λI)⁻¹,

the output at time t is Gaussian over initialisations with

    μ_t(x)    = Θ(x, X) M_t Y
    Σ_t(x, x) = K(x, x) + Θ(x, X) M_t K M_t Θ(X, x) - 2 Θ(x, X) M_t K(X, x)

(the covariance "Σ(t)" of Lee et al., eq. 16, with Θ → Θ + λI inside M_t). μ_0 = 0, and
μ_∞ with λ > 0 is kernel ridge regression on Θ.

Everything is computed from one eigendecomposition Θ = V diag(s) Vᵀ: with a = s + λ,
M_t = V diag(g_t(a)) Vᵀ where g_t(a) = (1 - e^{-η a t}) / a (see :func:`ntk_filter`).

Discrete gradient descent. ``steps=s`` replaces the gradient flow over time t by s full-batch
steps θ ← θ - η ∇L of the linearised network: then f - Y contracts by (I - η (Θ + λI)) per
step, and M_s = (Θ + λI)⁻¹ (I - (I - η (Θ + λI))^s), i.e. g_s(a) = (1 - (1 - η a)^s) / a.
It tends to the gradient flow at t = s as η a → 0 for every eigenvalue a, and is what a
finite network trained with a finite learning rate follows as its width grows.
"""

from __future__ import annotations

import math

import numpy as np

from molntk.regression import validation
from molntk.regression.spectral import Eigensystem


def ntk_filter(a: np.ndarray, *, t: float = math.inf, lr: float = 1.0, steps: int | None = None) -> np.ndarray:
    """g_t(a) = (1 - e^{-η a t}) / a, the eigenvalues of M_t for eigenvalues a of Θ + λI.

    g_∞(a) = 1/a. At a = 0 (a singular kernel, λ = 0): g_t(0) = η t, the limit a → 0, and
    g_∞(0) = 0, i.e. the pseudo-inverse. Both are harmless: for a PSD Θ the test kernel
    Θ(x, X) is orthogonal to Θ's null space, so those components never reach a prediction.
    ``-expm1(-η a t) / a`` keeps full precision for small η a t.

    With ``steps=s`` (then ``t`` must stay ∞): s gradient-descent steps of size η,
    g_s(a) = (1 - (1 - η a)^s) / a, with g_s(0) = η s; for η a < 1 it is computed as
    -expm1(s log1p(-η a)) / a (full precision for small η a).
    """
    a = np.asarray(a, dtype=np.float64)
    zero = a == 0
    safe = np.where(zero, 1.0, a)
    if steps is not None:
        if not math.isinf(t):
            raise ValueError("give either a training time t or a number of gradient-descent steps, not both")
        step = lr * safe
        small = step < 1.0
        decay = np.where(small, -np.expm1(steps * np.log1p(-np.where(small, step, 0.0))), 1.0 - (1.0 - step) ** steps)
        return np.where(zero, lr * steps, decay / safe)
    if math.isinf(t):
        return np.where(zero, 0.0, 1.0 / safe)
    return np.where(zero, lr * t, -np.expm1(-lr * t * safe) / safe)


def _check_time(t: float, lr: float, reg: float, steps: int | None) -> tuple[float, float, float, int | None]:
    if steps is not None and (isinstance(steps, bool) or not isinstance(steps, (int, np.integer)) or steps < 0):
        raise ValueError(f"steps must be an integer >= 0, got {steps!r}")
    return (
        validation.nonnegative(t, "t", allow_inf=True),
        validation.positive(lr, "lr"),
        validation.nonnegative(reg, "reg"),
        None if steps is None else int(steps),
    )


def ntk_weights(
    theta: Eigensystem, Y: object, *, t: float = math.inf, lr: float = 1.0, reg: float = 0.0, steps: int | None = None
) -> np.ndarray:
    """Dual weights W = M_t Y = V diag(g_t(s + λ)) Vᵀ Y, so that μ_t(x) = Θ(x, X) W.

    ``Y`` is (n,) or (n, k); W has the same shape. Cost O(n² k). ``steps``: M_s of
    gradient descent instead of gradient flow (module doc).
    """
    t, lr, reg, steps = _check_time(t, lr, reg, steps)
    Y2, was_1d = validation.targets(Y, "Y", rows=theta.n)
    g = ntk_filter(theta.values + reg, t=t, lr=lr, steps=steps)
    return validation.restore(theta.from_basis(g[:, None] * theta.to_basis(Y2)), was_1d)


def ntk_mean(
    theta: Eigensystem,
    theta_test_train: object,
    Y: object,
    *,
    t: float = math.inf,
    lr: float = 1.0,
    reg: float = 0.0,
    steps: int | None = None,
) -> np.ndarray:
    """μ_t(x) = Θ(x, X) (Θ + λI)⁻¹ (I - e^{-η (Θ + λI) t}) Y for the rows x of ``theta_test_train``.

    ``theta`` is the eigensystem of Θ(X, X); ``theta_test_train`` is Θ(x, X), shape (m, n);
    ``Y`` (n,) or (n, k). Returns (m,) or (m, k). ``t = inf`` gives Θ(x, X) (Θ + λI)⁻¹ Y;
    ``steps`` the mean after that many gradient-descent steps of size η (module doc).
    """
    weights = ntk_weights(theta, Y, t=t, lr=lr, reg=reg, steps=steps)
    cross = validation.matrix(theta_test_train, "theta_test_train", cols=theta.n)
    return cross @ weights


def ntk_gp_variance(
    theta: Eigensystem,
    nngp_train_rotated: np.ndarray,
    theta_test_train: object,
    nngp_test_train: object,
    nngp_test_diag: object,
    *,
    t: float = math.inf,
    lr: float = 1.0,
    reg: float = 0.0,
    steps: int | None = None,
) -> np.ndarray:
    """Diagonal of the NTK-GP covariance Σ_t(x, x) for the m test points, shape (m,).

    Σ_t(x, x) = K(x, x) + Θ(x, X) M_t K M_t Θ(X, x) - 2 Θ(x, X) M_t K(X, x). In the
    eigenbasis of Θ, with P = Θ(x, X) V diag(g_t(s + λ)), R = Vᵀ K V, C = K(x, X) V:

        Σ_t(x_i, x_i) = K(x_i, x_i) + (P R Pᵀ)_ii - 2 (P Cᵀ)_ii.

    ``nngp_train_rotated`` is R = ``theta.rotate(K_nngp_train)`` (computed once, reused for
    every t, λ and test set); ``theta_test_train`` is Θ(x, X), ``nngp_test_train`` K(x, X)
    (both (m, n)) and ``nngp_test_diag`` K(x, x) (m,). It is the variance of a Gaussian
    process, ≥ 0 in exact arithmetic; rounding below 0 is clipped to 0. Cost O(m n²).
    ``steps``: after that many gradient-descent steps instead of time t (module doc).
    """
    t, lr, reg, steps = _check_time(t, lr, reg, steps)
    theta_cross = validation.matrix(theta_test_train, "theta_test_train", cols=theta.n)
    m = theta_cross.shape[0]
    nngp_cross = validation.matrix(nngp_test_train, "nngp_test_train", rows=m, cols=theta.n)
    prior = validation.vector(nngp_test_diag, "nngp_test_diag", length=m)
    rotated = validation.matrix(nngp_train_rotated, "nngp_train_rotated", rows=theta.n, cols=theta.n)
    g = ntk_filter(theta.values + reg, t=t, lr=lr, steps=steps)
    P = (theta_cross @ theta.vectors) * g
    C = nngp_cross @ theta.vectors
    variance = prior + np.einsum("ij,ij->i", P @ rotated, P) - 2.0 * np.einsum("ij,ij->i", P, C)
    return np.maximum(variance, 0.0)
