"""NNGP posterior: Gaussian-process regression on the NNGP kernel with noise variance λ.

With K = K(X, X), K* = K(x, X) (m, n) and k** = K(x, x):

    mean(x) = K* (K + λI)⁻¹ Y
    var(x)  = k** - K* (K + λI)⁻¹ K*ᵀ      (diagonal; the latent f, add λ for a noisy y)

From the eigendecomposition K = V diag(s) Vᵀ, with C = K* V:
mean = K* V diag(1/(s + λ)) Vᵀ Y and var_i = k**_i - Σ_j C_ij² / (s_j + λ).
"""

from __future__ import annotations

import math

import numpy as np

from molntk.regression import validation
from molntk.regression.ntk import ntk_filter, ntk_weights
from molntk.regression.spectral import Eigensystem


def nngp_variance(nngp: Eigensystem, test_train: object, test_diag: object, *, reg: float = 0.0) -> np.ndarray:
    """Posterior variance k** - K* (K + λI)⁻¹ K*ᵀ (diagonal), shape (m,).

    ``test_train`` is K(x, X) (m, n), ``test_diag`` K(x, x) (m,). At λ = 0 a singular K is
    pseudo-inverted (:func:`~molntk.regression.ntk.ntk_filter`). Rounding below 0 is clipped to 0.
    """
    reg = validation.nonnegative(reg, "reg")
    cross = validation.matrix(test_train, "test_train", cols=nngp.n)
    prior = validation.vector(test_diag, "test_diag", length=cross.shape[0])
    C = cross @ nngp.vectors
    g = ntk_filter(nngp.values + reg, t=math.inf)
    return np.maximum(prior - (C**2) @ g, 0.0)


def nngp_posterior(
    nngp: Eigensystem,
    test_train: object,
    Y: object,
    *,
    reg: float = 0.0,
    test_diag: object | None = None,
) -> tuple[np.ndarray, np.ndarray | None]:
    """Posterior mean K* (K + λI)⁻¹ Y ((m,) or (m, k), like ``Y``) and variance ((m,), or None
    when ``test_diag`` is not given). ``nngp`` is the eigensystem of K(X, X)."""
    weights = ntk_weights(nngp, Y, t=math.inf, reg=reg)
    cross = validation.matrix(test_train, "test_train", cols=nngp.n)
    variance = None if test_diag is None else nngp_variance(nngp, cross, test_diag, reg=reg)
    return cross @ weights, variance
