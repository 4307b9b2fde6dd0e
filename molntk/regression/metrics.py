"""Regression metrics per target: MAE, RMSE, R².

For targets y (n,) or (n, k) and predictions ŷ of the same shape, per target column:

    MAE  = (1/n) Σ_i |y_i - ŷ_i|
    RMSE = ((1/n) Σ_i (y_i - ŷ_i)²)^{1/2}
    R²   = 1 - Σ_i (y_i - ŷ_i)² / Σ_i (y_i - ȳ)²     (NaN for a constant y: undefined)

A 1-d input gives a float, a 2-d input a (k,) array.
"""

from __future__ import annotations

import numpy as np

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
