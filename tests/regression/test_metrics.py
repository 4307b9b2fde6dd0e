"""Regression metrics (molntk.regression.metrics) against scikit-learn's."""

from __future__ import annotations

import math

import numpy as np
import pytest
from sklearn.metrics import mean_absolute_error, r2_score, root_mean_squared_error

from molntk.errors import InputError
from molntk.regression import (calibration_metrics, coverage_curve, mae, mae_interval, mean_error_interval,
                               paired_error_difference, paired_mae_difference, r2, regression_metrics, rmse)


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


def test_mae_interval_agrees_with_the_normal_theory_interval():
    """n = 2,000 exponential errors: the percentile interval of the mean and mean ± 1.96 s/√n
    differ by the skew of the mean's distribution (≈ 0.03 standard errors here) and the
    Monte Carlo error of a 2,000-resample percentile (≈ 0.06 standard errors, ≈ 3 % of the
    half-width); 10 % of the half-width is allowed."""
    rng = np.random.default_rng(3)
    y = rng.normal(size=2000)
    pred = y + rng.exponential(size=2000) * rng.choice([-1.0, 1.0], size=2000)
    errors = np.abs(y - pred)
    half = 1.959964 * errors.std(ddof=1) / np.sqrt(len(errors))
    low, high = mae_interval(y, pred)
    assert low == pytest.approx(errors.mean() - half, abs=0.1 * half)
    assert high == pytest.approx(errors.mean() + half, abs=0.1 * half)


def test_paired_mae_difference_covers_the_true_difference_at_its_level():
    """Monte Carlo coverage: 200 test sets of 300 molecules where model b's errors are model
    a's plus independent noise, so E|e_a| − E|e_b| is known in closed form (half-normal means
    σ√(2/π)); the 95 % interval must cover it in 90–99 % of the sets (binomial std of the
    observed coverage 1.5 %; the percentile bootstrap undercovers by < 1 % at n = 300)."""
    rng = np.random.default_rng(4)
    sigma_a, sigma_noise = 1.0, 0.5
    truth = np.sqrt(2 / np.pi) * (sigma_a - np.hypot(sigma_a, sigma_noise))
    covered = 0
    for seed in range(200):
        y = rng.normal(size=300)
        e_a = rng.normal(scale=sigma_a, size=300)
        pred_a, pred_b = y + e_a, y + e_a + rng.normal(scale=sigma_noise, size=300)
        out = paired_mae_difference(y, pred_a, pred_b, seed=seed)
        covered += out["ci_low"] <= truth <= out["ci_high"]
    assert 0.90 <= covered / 200 <= 0.99


def test_paired_interval_is_narrower_than_the_models_own_intervals():
    """Two models whose errors share most of their size: the paired difference's interval
    is much narrower than either MAE's interval, and it excludes 0 where the separate
    intervals overlap; a model against itself gives 0 with the interval [0, 0]."""
    rng = np.random.default_rng(5)
    y = rng.normal(size=1000)
    shared = rng.normal(size=1000)
    pred_a = y + shared
    pred_b = y + 1.03 * shared + rng.normal(scale=0.05, size=1000)
    low_a, high_a = mae_interval(y, pred_a)
    low_b, high_b = mae_interval(y, pred_b)
    out = paired_mae_difference(y, pred_a, pred_b)
    assert high_a > low_b  # the separate intervals overlap
    assert out["ci_high"] < 0  # the paired one says a is better
    assert out["ci_high"] - out["ci_low"] < 0.2 * (high_a - low_a)
    assert out["mae_difference"] == pytest.approx(mae(y, pred_a) - mae(y, pred_b), rel=1e-12)
    same = paired_mae_difference(y, pred_a, pred_a)
    assert (same["mae_difference"], same["ci_low"], same["ci_high"]) == (0.0, 0.0, 0.0)


def test_bootstrap_intervals_refuse_several_targets_and_a_bad_level():
    y = np.zeros((10, 2))
    with pytest.raises(InputError, match="pred_a"):
        paired_mae_difference(y, y + 1, y)
    with pytest.raises(InputError, match="confidence"):
        mae_interval(np.zeros(10), np.arange(10.0), confidence=1.5)


def test_grouped_errors_resample_whole_items_like_a_numpy_cluster_bootstrap():
    """300 frames of 3–60 components whose errors share a frame effect: the interval of
    Σ e_i / Σ c_i from per-frame sums equals a numpy bootstrap drawing whole frames (20,000
    resamples; the two differ by Monte Carlo error, ≈ 3 % of the half-width for 2,000
    resamples; 12 % allowed), and is wider than the interval that treats the components as
    independent (frame-correlated errors: resampling components understates the spread).
    The paired form of two models on the same frames gives the difference of their MAEs."""
    rng = np.random.default_rng(6)
    counts = rng.integers(1, 21, size=300) * 3
    frame_effect = rng.exponential(size=300)
    components = [np.abs(f + 0.2 * rng.normal(size=c)) for f, c in zip(frame_effect, counts)]
    sums = np.array([c.sum() for c in components])
    low, high = mean_error_interval(sums, counts)
    draws = rng.integers(0, 300, size=(20_000, 300))
    brute = np.percentile(sums[draws].sum(axis=1) / counts[draws].sum(axis=1), [2.5, 97.5])
    half = (brute[1] - brute[0]) / 2
    assert low == pytest.approx(brute[0], abs=0.12 * half)
    assert high == pytest.approx(brute[1], abs=0.12 * half)
    flat_low, flat_high = mean_error_interval(np.concatenate(components))
    assert high - low > 2 * (flat_high - flat_low)
    other = sums * 1.1
    diff = paired_error_difference(sums, other, counts)
    assert diff["mae_difference"] == pytest.approx((sums.sum() - other.sum()) / counts.sum(), rel=1e-12)
    assert diff["ci_high"] < 0
    with pytest.raises(InputError, match="counts"):
        mean_error_interval(sums, counts[:-1])
    with pytest.raises(InputError, match="errors.*non-finite"):
        mean_error_interval(np.array([1.0, np.nan]))
