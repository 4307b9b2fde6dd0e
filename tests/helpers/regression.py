"""Shared helpers for the kernel-regression tests (tests/regression): random-feature and RBF
problems, dense reference formulas and the fitted-attribute set of an estimator."""

from __future__ import annotations

import math

import numpy as np
import scipy.linalg


def fitted_attributes(model: object) -> set[str]:
    """The public fitted attributes (scikit-learn's trailing underscore) of ``model``."""
    return {name for name in vars(model) if name.endswith("_") and not name.startswith("_")}


def feature_problem(n: int = 40, m: int = 9, d: int = 120, k: int = 3, seed: int = 0) -> dict[str, np.ndarray]:
    """Random-feature kernel K = Φ Φᵀ / d (full rank when d > n) with test rows and targets."""
    rng = np.random.default_rng(seed)
    phi, phi_test = rng.normal(size=(n, d)), rng.normal(size=(m, d))
    return {
        "phi": phi / math.sqrt(d),
        "phi_test": phi_test / math.sqrt(d),
        "K": phi @ phi.T / d,
        "K_test": phi_test @ phi.T / d,
        "k_diag": np.sum(phi_test**2, axis=1) / d,
        "Y": rng.normal(size=(n, k)) * [1.0, 3.0, 0.5][:k] + [2.0, -1.0, 0.0][:k],
    }


def rbf_problem(n: int = 60, m: int = 11, k: int = 2, seed: int = 1) -> dict[str, np.ndarray]:
    """Gaussian RBF kernel on 3-d points, smooth targets with noise."""
    rng = np.random.default_rng(seed)
    X, X_test = rng.uniform(-2, 2, size=(n, 3)), rng.uniform(-2, 2, size=(m, 3))

    def rbf(A: np.ndarray, B: np.ndarray) -> np.ndarray:
        return np.exp(-0.5 * ((A[:, None, :] - B[None, :, :]) ** 2).sum(-1))

    Y = np.stack([np.sin(X[:, 0]) + X[:, 1] ** 2, np.cos(X.sum(1))], axis=1)[:, :k] + 0.1 * rng.normal(size=(n, k))
    return {"K": rbf(X, X), "K_test": rbf(X_test, X), "k_diag": np.ones(m), "Y": Y}


def dense_M(theta: np.ndarray, t: float, lr: float, reg: float) -> np.ndarray:
    """M_t = (Θ + λI)⁻¹ (I - expm(-η (Θ + λI) t)) by dense linear algebra."""
    A = theta + reg * np.eye(len(theta))
    if math.isinf(t):
        return np.linalg.inv(A)
    return np.linalg.solve(A, np.eye(len(theta)) - scipy.linalg.expm(-lr * t * A))


def rel_err(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.max(np.abs(np.asarray(a) - np.asarray(b))) / np.max(np.abs(b)))


def ridge_fit_predict(K: np.ndarray, Y: np.ndarray, train: np.ndarray, test: np.ndarray, reg: float) -> np.ndarray:
    A = K[np.ix_(train, train)] + reg * np.eye(len(train))
    return K[np.ix_(test, train)] @ np.linalg.solve(A, Y[train])
