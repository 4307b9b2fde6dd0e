"""Regression metrics per target: MAE, RMSE, R²; calibration of predictive standard deviations.

For targets y (n,) or (n, k) and predictions ŷ of the same shape, per target column:

    MAE  = (1/n) Σ_i |y_i - ŷ_i|
    RMSE = ((1/n) Σ_i (y_i - ŷ_i)²)^{1/2}
    R²   = 1 - Σ_i (y_i - ŷ_i)² / Σ_i (y_i - ȳ)²     (NaN for a constant y: undefined)

A 1-d input gives a float, a 2-d input a (k,) array.

Calibration of a predictive std σ_i (of y), from the z-scores z_i = (y_i − ŷ_i) / σ_i
(all targets pooled): the fraction of |z| ≤ 1 and ≤ 2 (68.3 % and 95.4 % for Gaussian
errors of that std), mean |z| (√(2/π) ≈ 0.80) and median |z| (0.674); the coverage curve
gives, for each confidence level p, the fraction of errors inside the central interval
|z| ≤ Φ⁻¹((1 + p) / 2) (p itself when calibrated).
"""

from __future__ import annotations

import numpy as np
import scipy.stats

from molntk.errors import InputError
from molntk.regression import validation


def _pair(y_true: object, y_pred: object) -> tuple[np.ndarray, np.ndarray, bool]:
    true = validation.as_float64(y_true, "y_true")
    Y, was_1d = validation.targets(true, "y_true", rows=max(true.shape[:1], default=1))
    pred = validation.as_float64(y_pred, "y_pred")
    if pred.shape != true.shape:
        raise InputError("y_pred", f"must have shape {true.shape} like y_true, got {pred.shape}")
    if Y.shape[0] == 0:
        raise InputError("y_true", "is empty")
    return Y, pred.reshape(Y.shape), was_1d


def _out(values: np.ndarray, was_1d: bool) -> float | np.ndarray:
    return float(values[0]) if was_1d else values


def mae(y_true: object, y_pred: object) -> float | np.ndarray:
    """Mean absolute error per target."""
    Y, P, was_1d = _pair(y_true, y_pred)
    return _out(np.mean(np.abs(Y - P), axis=0), was_1d)


def rmse(y_true: object, y_pred: object) -> float | np.ndarray:
    """Root mean squared error per target."""
    Y, P, was_1d = _pair(y_true, y_pred)
    return _out(np.sqrt(np.mean((Y - P) ** 2, axis=0)), was_1d)


def r2(y_true: object, y_pred: object) -> float | np.ndarray:
    """Coefficient of determination per target (NaN where y_true is constant)."""
    Y, P, was_1d = _pair(y_true, y_pred)
    residual = np.sum((Y - P) ** 2, axis=0)
    total = np.sum((Y - Y.mean(axis=0)) ** 2, axis=0)
    safe = np.where(total > 0, total, 1.0)
    return _out(np.where(total > 0, 1.0 - residual / safe, np.nan), was_1d)


def regression_metrics(y_true: object, y_pred: object) -> dict[str, float | list[float]]:
    """``{"mae": ..., "rmse": ..., "r2": ...}`` as floats (1-d) or per-target lists (2-d)."""
    values = {"mae": mae(y_true, y_pred), "rmse": rmse(y_true, y_pred), "r2": r2(y_true, y_pred)}
    return {key: value.tolist() if isinstance(value, np.ndarray) else value for key, value in values.items()}


def z_scores(y_true: object, y_pred: object, std: object) -> np.ndarray:
    """|y − ŷ| / σ, all targets pooled (1-d); InputError naming ``std`` unless it has
    y_true's shape and is > 0 (inf allowed: no information, z = 0)."""
    Y, P, _ = _pair(y_true, y_pred)
    sigma = validation.as_float64(std, "std")
    if sigma.size != Y.size:
        raise InputError("std", f"must have one value per prediction ({Y.size}), got shape {sigma.shape}")
    sigma = sigma.reshape(Y.shape)
    if np.isnan(sigma).any() or np.any(sigma <= 0):
        raise InputError("std", "must be > 0 everywhere (a std of 0 or NaN has no z-score)")
    return (np.abs(Y - P) / sigma).ravel()


def calibration_metrics(y_true: object, y_pred: object, std: object) -> dict[str, float]:
    """``{"within_1sigma", "within_2sigma", "mean_abs_z", "median_abs_z"}`` (module docstring)."""
    z = z_scores(y_true, y_pred, std)
    return {
        "within_1sigma": float(np.mean(z <= 1.0)),
        "within_2sigma": float(np.mean(z <= 2.0)),
        "mean_abs_z": float(np.mean(z)),
        "median_abs_z": float(np.median(z)),
    }


def coverage_curve(y_true: object, y_pred: object, std: object, levels: object) -> np.ndarray:
    """Observed fraction of errors within the central interval of each confidence level p in
    ``levels`` (0 < p < 1): mean(|z| ≤ Φ⁻¹((1 + p) / 2))."""
    p = validation.as_float64(levels, "levels").ravel()
    if p.size == 0 or np.any((p <= 0) | (p >= 1)):
        raise InputError("levels", "must be confidence levels strictly between 0 and 1")
    z = z_scores(y_true, y_pred, std)
    return np.mean(z[None, :] <= scipy.stats.norm.ppf((1 + p) / 2)[:, None], axis=1)
