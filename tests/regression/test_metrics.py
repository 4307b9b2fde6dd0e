"""Regression metrics (molntk.regression.metrics) against scikit-learn's."""

from __future__ import annotations

import math

import numpy as np
import pytest
from sklearn.metrics import mean_absolute_error, r2_score, root_mean_squared_error

from molntk.errors import InputError
from molntk.regression import calibration_metrics, coverage_curve, mae, r2, regression_metrics, rmse


def test_metrics_match_sklearn():
    rng = np.random.default_rng(0)
    y, pred = rng.normal(size=(30, 3)), rng.normal(size=(30, 3))
    np.testing.assert_allclose(mae(y, pred), mean_absolute_error(y, pred, multioutput="raw_values"), rtol=1e-14)
    np.testing.assert_allclose(rmse(y, pred), root_mean_squared_error(y, pred, multioutput="raw_values"), rtol=1e-14)
    np.testing.assert_allclose(r2(y, pred), r2_score(y, pred, multioutput="raw_values"), rtol=1e-13)
    assert r2(y[:, 0], pred[:, 0]) == pytest.approx(r2_score(y[:, 0], pred[:, 0]), rel=1e-13)
    summary = regression_metrics(y[:, 1], pred[:, 1])
    assert summary["mae"] == pytest.approx(mean_absolute_error(y[:, 1], pred[:, 1]), rel=1e-14)
    assert math.isnan(r2(np.ones(5), np.arange(5.0)))


def test_calibration_metrics_count_errors_within_one_and_two_sigma():
    """Errors 0.5σ, 1.5σ, −2.5σ, 1σ (boundary inside) → |z| = 0.5, 1.5, 2.5, 1."""
    y = np.array([1.0, 2.0, 3.0, 4.0])
    std = np.array([2.0, 1.0, 0.4, 0.5])
    pred = y + np.array([1.0, 1.5, -1.0, 0.5])
    out = calibration_metrics(y, pred, std)
    assert out == {"within_1sigma": 0.5, "within_2sigma": 0.75, "mean_abs_z": 1.375, "median_abs_z": 1.25}


def test_coverage_curve_of_gaussian_errors_follows_the_diagonal():
    """Errors drawn N(0, σ²) with their own σ: the observed coverage at p is p up to sampling
    error (std √(p(1−p)/n) ≤ 0.0016 for n = 100,000; 0.01 allowed)."""
    rng = np.random.default_rng(0)
    std = rng.uniform(0.1, 10.0, size=100_000)
    levels = np.array([0.1, 0.5, 0.683, 0.9, 0.954])
    observed = coverage_curve(np.zeros_like(std), rng.normal(size=std.size) * std, std, levels)
    np.testing.assert_allclose(observed, levels, atol=0.01)


def test_calibration_inputs_are_checked():
    for std, source in [(np.array([1.0, 0.0]), "std"), (np.array([1.0]), "std")]:
        with pytest.raises(InputError) as err:
            calibration_metrics(np.zeros(2), np.zeros(2), std)
        assert err.value.source == source
    with pytest.raises(InputError) as err:
        coverage_curve(np.zeros(2), np.zeros(2), np.ones(2), [0.5, 1.0])
    assert err.value.source == "levels"
