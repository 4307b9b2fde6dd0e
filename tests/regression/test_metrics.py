"""Regression metrics (molntk.regression.metrics) against scikit-learn's."""

from __future__ import annotations

import math

import numpy as np
import pytest
from sklearn.metrics import mean_absolute_error, r2_score, root_mean_squared_error

from molntk.regression import mae, r2, regression_metrics, rmse


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
