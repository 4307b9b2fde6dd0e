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

How sure a test MAE is, over the sampling of the n test molecules (1-d targets): the
bootstrap percentile interval of the MAE (:func:`mae_interval`), and of the paired
difference of two models' MAEs on the same molecules (:func:`paired_mae_difference`),

    Δ = (1/n) Σ_i (|y_i − ŷ^a_i| − |y_i − ŷ^b_i|),

resampled by molecule, so the two models' errors on a molecule stay together (paired
intervals are much narrower than two separate ones: the models' errors are correlated).
Where an item holds several errors (an MD frame's 3n force components) the MAE is
Σ_i e_i / Σ_i c_i of per-item error sums e_i and counts c_i, and whole items are resampled
(:func:`mean_error_interval`, :func:`paired_error_difference`).
``scipy.stats.bootstrap``, percentile method, :data:`BOOTSTRAP_RESAMPLES` resamples; the
ends of a 95 % interval carry a Monte Carlo error of ≈ 3 % of its half-width.
"""

from __future__ import annotations

import numpy as np
import scipy.stats

from molntk.errors import InputError
from molntk.regression import validation

#: Resamples of the bootstrap intervals of test MAEs (module docstring).
BOOTSTRAP_RESAMPLES = 2000
#: Test molecules resampled at once (memory: batch × n indices).
_BOOTSTRAP_BATCH = 200


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


def _absolute_errors(y_true: object, y_pred: object, name: str) -> np.ndarray:
    """|y − ŷ| of 1-d targets (InputError naming ``name`` for 2-d ones: one interval per target)."""
    Y, P, was_1d = _pair(y_true, y_pred)
    if not was_1d:
        raise InputError(name, f"must be 1-d (one target) for a bootstrap interval, got shape {Y.shape}")
    return np.abs(Y - P)[:, 0]


def _items(errors: object, counts: object | None, name: str) -> tuple[np.ndarray, np.ndarray]:
    """(per-item error sums, per-item counts) as float arrays; InputError naming ``name`` or
    ``counts`` when they are not 1-d, not finite, of other lengths or counts ≤ 0."""
    values = validation.as_float64(errors, name)
    if values.ndim != 1 or values.size == 0:
        raise InputError(name, f"must be a non-empty 1-d array (one value per item), got shape {values.shape}")
    if counts is None:
        return values, np.ones_like(values)
    weights = validation.as_float64(counts, "counts")
    if weights.shape != values.shape or np.any(weights <= 0):
        raise InputError("counts", f"must be > 0, one per item of {name} ({values.size}), got shape {weights.shape}")
    return values, weights


def _ratio_interval(values: np.ndarray, counts: np.ndarray, confidence: float, seed: int) -> tuple[float, float]:
    """Bootstrap percentile interval of Σ values / Σ counts, items resampled whole."""
    if not 0.0 < confidence < 1.0:
        raise InputError("confidence", f"must be in (0, 1), got {confidence}")
    ratios = values / counts
    if len(values) < 2 or np.all(ratios == ratios[0]):
        return float(ratios[0]), float(ratios[0])  # no spread: the interval is the point
    result = scipy.stats.bootstrap((values, counts), lambda v, c, axis: v.sum(axis) / c.sum(axis), paired=True,
                                   vectorized=True, n_resamples=BOOTSTRAP_RESAMPLES, batch=_BOOTSTRAP_BATCH,
                                   confidence_level=confidence, method="percentile", rng=np.random.default_rng(seed))
    return float(result.confidence_interval.low), float(result.confidence_interval.high)


def mean_error_interval(errors: object, counts: object | None = None, confidence: float = 0.95,
                        seed: int = 0) -> tuple[float, float]:
    """Bootstrap ``confidence`` interval (low, high) of the MAE Σ_i e_i / Σ_i c_i, where item i
    (a test molecule, an MD frame) contributes the sum e_i of its c_i absolute errors
    (``counts`` None: one each, the mean); items are resampled whole, so the errors of one
    frame's force components stay together."""
    values, weights = _items(errors, counts, "errors")
    return _ratio_interval(values, weights, confidence, seed)


def paired_error_difference(errors_a: object, errors_b: object, counts: object | None = None,
                            confidence: float = 0.95, seed: int = 0) -> dict[str, float]:
    """MAE(a) − MAE(b) of two models' per-item absolute-error sums on the same items (as
    :func:`mean_error_interval`), with the paired bootstrap ``confidence`` interval of
    Σ_i (e^a_i − e^b_i) / Σ_i c_i: ``{"mae_difference", "ci_low", "ci_high"}``."""
    a, weights = _items(errors_a, counts, "errors_a")
    b, _ = _items(errors_b, counts, "errors_b")
    if a.shape != b.shape:
        raise InputError("errors_b", f"must have one value per item of errors_a ({a.size}), got {b.size}")
    d = a - b
    low, high = _ratio_interval(d, weights, confidence, seed)
    return {"mae_difference": float(d.sum() / weights.sum()), "ci_low": low, "ci_high": high}


def mae_interval(y_true: object, y_pred: object, confidence: float = 0.95, seed: int = 0) -> tuple[float, float]:
    """Bootstrap ``confidence`` interval (low, high) of the MAE over the test molecules (module docstring)."""
    return mean_error_interval(_absolute_errors(y_true, y_pred, "y_pred"), confidence=confidence, seed=seed)


def paired_mae_difference(y_true: object, pred_a: object, pred_b: object, confidence: float = 0.95,
                          seed: int = 0) -> dict[str, float]:
    """MAE(a) − MAE(b) on the same test molecules with its paired bootstrap ``confidence``
    interval (module docstring): ``{"mae_difference", "ci_low", "ci_high"}``."""
    return paired_error_difference(_absolute_errors(y_true, pred_a, "pred_a"), _absolute_errors(y_true, pred_b, "pred_b"),
                                   confidence=confidence, seed=seed)
