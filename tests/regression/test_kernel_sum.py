"""KernelSumRegressor (molntk.regression.kernel_sum): kernel ridge on Σ_i c_i K_i / τ_i with the
weights and λ chosen by cross-validation, against brute-force leave-one-out refits and dense
solves; fixed weights, scale invariance, standard deviations, bad input."""

from __future__ import annotations

import numpy as np
import pytest

from molntk.errors import InputError
from molntk.regression import KernelRegressor, KernelSumRegressor, TargetScaler

RELATIVE_GRID = [1e-4, 1e-3, 1e-2, 1e-1, 1.0]


def two_scale_problem(n: int = 40, m: int = 9, seed: int = 3) -> dict[str, object]:
    """Targets with a short-range and a long-range part; K_1 sees only the first feature
    (RBF, short length), K_2 all three (RBF, long length) and is 50× larger in scale, so
    neither alone explains y and the weights matter."""
    rng = np.random.default_rng(seed)
    X, X_test = rng.uniform(-2, 2, size=(n, 3)), rng.uniform(-2, 2, size=(m, 3))

    def rbf(A, B, length, cols):
        d2 = ((A[:, None, cols] - B[None, :, cols]) ** 2).sum(-1)
        return np.exp(-0.5 * d2 / length**2)

    y = np.sin(3 * X[:, 0]) + 0.5 * X[:, 1:].sum(1) + 0.05 * rng.normal(size=n)
    K1, K1_test = rbf(X, X, 0.4, [0]), rbf(X_test, X, 0.4, [0])
    K2, K2_test = 50 * rbf(X, X, 2.0, [0, 1, 2]), 50 * rbf(X_test, X, 2.0, [0, 1, 2])
    return {"train": [K1, K2], "test": [K1_test, K2_test], "diag": [np.ones(m), 50 * np.ones(m)], "y": y}


def brute_force_loo_mae(K: np.ndarray, z: np.ndarray, lam: float) -> float:
    """Mean |z_i − f_{−i}(x_i)| by n refits of kernel ridge without molecule i."""
    n = len(z)
    errors = []
    for i in range(n):
        keep = np.arange(n) != i
        alpha = np.linalg.solve(K[np.ix_(keep, keep)] + lam * np.eye(n - 1), z[keep])
        errors.append(abs(z[i] - K[i, keep] @ alpha))
    return float(np.mean(errors))


def test_the_chosen_weights_and_lambda_minimise_brute_force_leave_one_out_and_predict_by_a_dense_solve():
    p = two_scale_problem()
    weights = [0.0, 0.1, 1.0, 10.0]
    regressor = KernelRegressor("ntk", reg="cv", cv="loo", cv_loss="absolute", relative_grid=RELATIVE_GRID)
    model = KernelSumRegressor(regressor, weights).fit(p["train"], p["y"])
    tau = [np.mean(np.diag(K)) for K in p["train"]]
    scaler = TargetScaler.fit(p["y"][:, None])
    z = scaler.transform(p["y"][:, None])[:, 0]
    table = {}
    for c in weights:
        K = p["train"][0] / tau[0] + c * p["train"][1] / tau[1]
        table[c] = min((brute_force_loo_mae(K, z, r * np.mean(np.diag(K))), r) for r in RELATIVE_GRID)
    best_c = min(table, key=lambda c: table[c][0])
    assert len({round(e, 6) for e, _ in table.values()}) == len(weights)  # the weights matter here
    assert model.weights_ == (1.0, best_c)
    assert model.reg_relative_ == pytest.approx(table[best_c][1], rel=1e-12)
    # the search's CV errors are the brute-force ones (closed-form LOO vs refits: rounding only)
    for (point, error), c in zip(model.search_, weights):
        assert point == (1.0, c)
        assert error == pytest.approx(table[c][0], rel=1e-8)
    K = p["train"][0] / tau[0] + best_c * p["train"][1] / tau[1]
    K_test = p["test"][0] / tau[0] + best_c * p["test"][1] / tau[1]
    lam = table[best_c][1] * np.mean(np.diag(K))
    expected = scaler.inverse_transform((K_test @ np.linalg.solve(K + lam * np.eye(len(K)), z))[:, None])[:, 0]
    np.testing.assert_allclose(model.predict(p["test"]), expected, rtol=1e-9, atol=1e-12)


def test_the_sum_does_not_depend_on_the_scale_of_a_kernel():
    p = two_scale_problem()
    model = KernelSumRegressor(KernelRegressor(relative_grid=RELATIVE_GRID), [0.0, 0.3, 3.0]).fit(p["train"], p["y"])
    scaled = KernelSumRegressor(KernelRegressor(relative_grid=RELATIVE_GRID), [0.0, 0.3, 3.0]).fit(
        [p["train"][0], 1e3 * p["train"][1]], p["y"])
    assert scaled.weights_ == model.weights_
    np.testing.assert_allclose(scaled.predict([p["test"][0], 1e3 * p["test"][1]]), model.predict(p["test"]), rtol=1e-10)


def test_three_kernels_search_the_product_grid_and_given_points_fix_the_weights():
    p = two_scale_problem()
    K3 = p["train"][0] * p["train"][1]  # a product of PSD kernels is PSD
    K3_test = p["test"][0] * p["test"][1]
    grid = KernelSumRegressor(KernelRegressor(relative_grid=RELATIVE_GRID), [0.0, 1.0]).fit([*p["train"], K3], p["y"])
    assert [point for point, _ in grid.search_] == [(1.0, 0.0, 0.0), (1.0, 0.0, 1.0), (1.0, 1.0, 0.0), (1.0, 1.0, 1.0)]
    fixed = KernelSumRegressor(KernelRegressor(reg=0.05, solver="cholesky"), [[0.5, 2.0]]).fit([*p["train"], K3], p["y"])
    assert fixed.weights_ == (1.0, 0.5, 2.0) and fixed.search_ == []
    tau = [np.mean(np.diag(K)) for K in (*p["train"], K3)]
    K = p["train"][0] / tau[0] + 0.5 * p["train"][1] / tau[1] + 2.0 * K3 / tau[2]
    K_test = p["test"][0] / tau[0] + 0.5 * p["test"][1] / tau[1] + 2.0 * K3_test / tau[2]
    direct = KernelRegressor(reg=0.05, solver="cholesky").fit(K, p["y"])
    np.testing.assert_allclose(fixed.predict([*p["test"], K3_test]), direct.predict(K_test), rtol=1e-12)


def test_standard_deviations_are_those_of_the_combined_kernel():
    p = two_scale_problem()
    model = KernelSumRegressor(KernelRegressor(relative_grid=RELATIVE_GRID), [0.1]).fit(p["train"], p["y"])
    tau = model.scales_
    K = p["train"][0] / tau[0] + 0.1 * p["train"][1] / tau[1]
    direct = KernelRegressor(relative_grid=RELATIVE_GRID).fit(K, p["y"])
    K_test = p["test"][0] / tau[0] + 0.1 * p["test"][1] / tau[1]
    diag = p["diag"][0] / tau[0] + 0.1 * p["diag"][1] / tau[1]
    mean, std = model.predict(p["test"], p["diag"], return_std=True)
    expected_mean, expected_std = direct.predict(K_test, diag, return_std=True)
    # the same sum formed in another order: rounding, amplified by cond(K + λI) (≈ 1e4 here)
    np.testing.assert_allclose(mean, expected_mean, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(std, expected_std, rtol=1e-9)
    # fitted attributes are answered by the regressor of the chosen sum
    assert model.amplitude_ is model.regressor_.amplitude_
    np.testing.assert_allclose(model.amplitude_, direct.amplitude_, rtol=1e-9)
    assert model.reg_relative_ == direct.reg_relative_


def test_the_fitted_state_as_arrays_restores_the_same_predictions():
    """fitted_arrays → load_fitted_arrays (what model files store): the same weights, scales,
    means and stds (the same arrays, so exactly); damaged weights or scales are named."""
    p = two_scale_problem()
    model = KernelSumRegressor(KernelRegressor(relative_grid=RELATIVE_GRID), [0.0, 0.1, 1.0]).fit(p["train"], p["y"])
    arrays = model.fitted_arrays()
    restored = KernelSumRegressor(KernelRegressor(relative_grid=RELATIVE_GRID)).load_fitted_arrays(arrays)
    assert restored.weights_ == model.weights_ and np.array_equal(restored.scales_, model.scales_)
    for got, expected in zip(restored.predict(p["test"], p["diag"], return_std=True), model.predict(p["test"], p["diag"], return_std=True)):
        np.testing.assert_array_equal(got, expected)
    with pytest.raises(InputError, match="sum_weights"):
        KernelSumRegressor().load_fitted_arrays(arrays | {"sum_weights": np.array([0.5, 1.0])})
    with pytest.raises(InputError, match="sum_scales"):
        KernelSumRegressor().load_fitted_arrays(arrays | {"sum_scales": np.array([1.0, -1.0])})
    with pytest.raises(InputError, match="fitted_arrays called before fit"):
        KernelSumRegressor().fitted_arrays()


def test_bad_input_is_refused_naming_it():
    p = two_scale_problem()
    cv = KernelRegressor(relative_grid=RELATIVE_GRID)
    cases = [
        (KernelSumRegressor(cv), [p["train"][0]], "kernels", "at least 2"),
        (KernelSumRegressor(cv), p["train"][0], "kernels", "list of kernel arrays"),
        (KernelSumRegressor(cv), [p["train"][0], p["train"][1][:-1, :-1]], "kernels", "must be 40 x 40"),
        (KernelSumRegressor(cv, [0.1, -1.0]), p["train"], "weights", "≥ 0"),
        (KernelSumRegressor(cv, []), p["train"], "weights", "non-empty"),
        (KernelSumRegressor(cv, [[0.1, 0.2]]), p["train"], "weights", "the 1 weights"),
        (KernelSumRegressor(KernelRegressor(reg=0.1), [0.1, 1.0]), p["train"], "weights", "reg='cv'"),
        (KernelSumRegressor("ridge"), p["train"], "regressor", "KernelRegressor"),
    ]
    for model, kernels, source, words in cases:
        with pytest.raises(InputError) as info:
            model.fit(kernels, p["y"])
        assert info.value.source == source and words in str(info.value)
    fitted = KernelSumRegressor(cv, [0.1]).fit(p["train"], p["y"])
    with pytest.raises(InputError, match="must hold 2 kernels"):
        fitted.predict([p["test"][0]])
