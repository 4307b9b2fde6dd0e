"""Target standardisation (molntk.regression.scaling) and the standardised regressor's equivariance."""

from __future__ import annotations

import numpy as np

from molntk.regression import KernelRegressor, TargetScaler
from tests.helpers.regression import rbf_problem


def test_target_standardisation_round_trip():
    rng = np.random.default_rng(0)
    Y = rng.normal(size=(50, 3)) * [1e-3, 1.0, 1e4] + [5.0, -2.0, 1e5]
    Y[:, 1] = 7.0  # a constant target keeps scale 1
    scaler = TargetScaler.fit(Y)
    Z = scaler.transform(Y)
    np.testing.assert_allclose(Z.mean(0), 0.0, atol=1e-12)
    np.testing.assert_allclose(Z[:, [0, 2]].std(0), 1.0, rtol=1e-12)
    assert scaler.scale[1] == 1.0
    np.testing.assert_allclose(scaler.inverse_transform(Z), Y, rtol=1e-14)
    np.testing.assert_allclose(scaler.inverse_transform_variance(np.ones(4)), np.tile(scaler.scale**2, (4, 1)))
    identity = TargetScaler.fit(Y, enabled=False)
    np.testing.assert_array_equal(identity.transform(Y), Y)


def test_standardised_regressor_is_affine_equivariant():
    """Standardised fits of Y and of a Y + b give a ŷ + b (the same model in other units)."""
    p = rbf_problem()
    a, b = np.array([1e3, -2.0]), np.array([-5.0, 1e4])
    base = KernelRegressor("ntk", reg=0.01).fit(p["K"], p["Y"]).predict(p["K_test"])
    moved = KernelRegressor("ntk", reg=0.01).fit(p["K"], a * p["Y"] + b).predict(p["K_test"])
    np.testing.assert_allclose(moved, a * base + b, rtol=1e-10)
