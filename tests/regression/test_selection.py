"""λ selection (molntk.regression.selection): leave-one-out, k-fold and GCV closed forms
against refits and their formulas; the regressor's choice of λ."""

from __future__ import annotations

import inspect
import math
import pickle

import numpy as np
import pytest

from molntk.errors import InputError
from molntk.regression import (
    KernelRegressor,
    eigensystem,
    fold_ids,
    gcv_score,
    kfold_residuals,
    loo_residuals,
    select_regularizer,
)
from molntk.regression.selection import DEFAULT_RELATIVE_GRID, CVResult
from tests.helpers.regression import dense_M, feature_problem, fitted_attributes, rbf_problem, ridge_fit_predict


@pytest.mark.parametrize("reg", [1e-3, 0.1])
def test_loo_closed_form_equals_brute_force(reg):
    p = rbf_problem(n=30)
    K, Y = p["K"], p["Y"]
    brute = np.array([Y[i] - ridge_fit_predict(K, Y, np.delete(np.arange(30), i), np.array([i]), reg)[0] for i in range(30)])
    np.testing.assert_allclose(loo_residuals(eigensystem(K), Y, reg), brute, rtol=1e-8, atol=1e-10)


@pytest.mark.parametrize("reg", [1e-3, 0.1])
def test_kfold_block_inverse_equals_brute_force(reg):
    p = rbf_problem(n=32)
    K, Y = p["K"], p["Y"]
    folds = fold_ids(32, 5, seed=4)
    brute = np.empty_like(Y)
    for f in range(5):
        test, train = np.flatnonzero(folds == f), np.flatnonzero(folds != f)
        brute[test] = Y[test] - ridge_fit_predict(K, Y, train, test, reg)
    np.testing.assert_allclose(kfold_residuals(eigensystem(K), Y, reg, folds), brute, rtol=1e-8, atol=1e-10)


@pytest.mark.parametrize("criterion", ["loo", "kfold"])
def test_absolute_loss_scores_the_mean_absolute_refit_residual(criterion):
    """loss="absolute": each λ's score is mean |y_i − ŷ(x_i)| over the held-out points of
    refits without them (one point, or its fold), per target; the λ chosen is its argmin and
    ``best_error`` the score there (squared loss: √ of it)."""
    p = rbf_problem(n=30)
    K, Y = p["K"], p["Y"]
    relative = np.array([1e-4, 1e-2, 1.0])
    held_out = [np.array([i]) for i in range(30)] if criterion == "loo" else [
        np.flatnonzero(fold_ids(30, 5, seed=2) == f) for f in range(5)]
    curves = {loss: select_regularizer(eigensystem(K), Y, criterion=criterion, relative_grid=relative, n_folds=5, seed=2,
                                       loss=loss) for loss in ("absolute", "squared")}
    for j, reg in enumerate(curves["absolute"].grid):
        residuals = np.empty_like(Y)
        for test in held_out:
            residuals[test] = Y[test] - ridge_fit_predict(K, Y, np.setdiff1d(np.arange(30), test), test, reg)
        np.testing.assert_allclose(curves["absolute"].scores_per_target[j], np.mean(np.abs(residuals), axis=0), rtol=1e-8)
        np.testing.assert_allclose(curves["squared"].scores_per_target[j], np.mean(residuals**2, axis=0), rtol=1e-8)
    absolute, squared = curves["absolute"], curves["squared"]
    assert absolute.loss == "absolute" and absolute.best_error == absolute.scores.min()
    assert squared.best_error == pytest.approx(math.sqrt(squared.scores.min()), rel=1e-15)
    with pytest.raises(InputError, match="GCV scores squared residuals only") as err:
        select_regularizer(eigensystem(K), Y, criterion="gcv", loss="absolute")
    assert err.value.source == "loss"


def test_fold_ids_are_deterministic_and_balanced():
    a, b, c = fold_ids(23, 5, seed=1), fold_ids(23, 5, seed=1), fold_ids(23, 5, seed=2)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)
    assert sorted(np.bincount(a).tolist()) == [4, 4, 5, 5, 5]


@pytest.mark.parametrize("t", [0.7, math.inf])
def test_gcv_matches_its_formula(t):
    p = feature_problem()
    K, Y, reg, lr, n = p["K"], p["Y"], 0.02, 1.5, len(p["K"])
    H = K @ dense_M(K, t, lr, reg)
    expected = np.mean(((np.eye(n) - H) @ Y) ** 2, axis=0) / (1 - np.trace(H) / n) ** 2
    np.testing.assert_allclose(gcv_score(eigensystem(K), Y, reg, t=t, lr=lr), expected, rtol=1e-9)


def test_kfold_at_finite_time_equals_per_fold_refits():
    p = feature_problem(n=30)
    K, Y, t, lr = p["K"], p["Y"], 1.3, 0.9
    folds = fold_ids(30, 4, seed=0)
    relative = np.array([1e-3, 1e-1])
    result = select_regularizer(eigensystem(K), Y, criterion="kfold", relative_grid=relative, n_folds=4, t=t, lr=lr, K_train=K)
    for row, reg in zip(result.scores_per_target, result.grid):
        residuals = np.empty_like(Y)
        for f in range(4):
            test, train = np.flatnonzero(folds == f), np.flatnonzero(folds != f)
            M = dense_M(K[np.ix_(train, train)], t, lr, reg)
            residuals[test] = Y[test] - K[np.ix_(test, train)] @ M @ Y[train]
        np.testing.assert_allclose(row, np.mean(residuals**2, axis=0), rtol=1e-9)


@pytest.mark.parametrize("criterion", ["loo", "kfold", "gcv"])
def test_chosen_reg_is_the_minimum_of_the_curve(criterion):
    p = rbf_problem()
    model = KernelRegressor("ntk", reg="cv", cv=criterion, n_folds=4, seed=3).fit(p["K"], p["Y"])
    curve = model.cv_result_
    assert curve.criterion == criterion
    assert len(curve.grid) == len(DEFAULT_RELATIVE_GRID)
    best = int(np.argmin(curve.scores))
    assert model.reg_ == curve.grid[best] == curve.best_reg
    np.testing.assert_allclose(curve.relative_grid, DEFAULT_RELATIVE_GRID)
    np.testing.assert_allclose(np.array(curve.grid) / np.mean(np.diag(p["K"])), DEFAULT_RELATIVE_GRID)
    np.testing.assert_allclose(curve.scores, np.mean(curve.scores_per_target, axis=1))
    # the curve is the one select_regularizer gives for the standardised targets
    Z = (p["Y"] - p["Y"].mean(0)) / p["Y"].std(0)
    direct = select_regularizer(eigensystem(p["K"]), Z, criterion=criterion, n_folds=4, seed=3)
    np.testing.assert_allclose(curve.scores, direct.scores, rtol=1e-12)
    assert fitted_attributes(model) >= {"reg_", "cv_result_", "condition_number_", "fit_seconds_", "eigenvalues_clipped_"}


@pytest.mark.parametrize(("scores", "edge"), [
    ([np.inf, np.inf, 1.0, 2.0, 3.0], True),  # the smallest λ that was scored
    ([np.inf, 2.0, 1.0, 3.0, np.inf], False),  # inside the scored λ's
    ([3.0, 2.0, 1.0, np.inf, np.inf], True),  # the largest scored
    ([2.0, 1.0, 3.0, 4.0, 5.0], False),
    ([1.0, 2.0, 3.0, 4.0, 5.0], True),
])
def test_grid_edge_counts_only_the_scored_lambdas(scores, edge):
    """A λ whose solve did not factor is scored inf (the Falkon and sparse searches): it is not
    a point of the curve, so a minimum beside it lies on the curve's edge."""
    grid = np.logspace(-8, -4, 5)
    curve = CVResult("holdout", grid, grid, np.array(scores)[:, None])
    assert curve.at_grid_edge is edge


def test_more_noise_selects_a_larger_regulariser():
    p = rbf_problem(n=80, k=1, seed=2)
    rng = np.random.default_rng(0)
    clean = p["Y"][:, 0]
    chosen = []
    for noise in (0.01, 3.0):
        y = clean + noise * rng.normal(size=80)
        chosen.append(KernelRegressor("nngp", cv="loo").fit(p["K"], y).reg_)
    assert chosen[1] > 100 * chosen[0]


def test_selection_sees_training_data_only():
    """Neither fit nor the selection take test data, and predicting changes nothing fitted."""
    assert list(inspect.signature(KernelRegressor.fit).parameters) == ["self", "K_train", "Y", "K_nngp_train"]
    selection_args = set(inspect.signature(select_regularizer).parameters)
    assert not {name for name in selection_args if "test" in name}
    p = rbf_problem()
    model = KernelRegressor("ntk", cv="kfold").fit(p["K"], p["Y"])
    fitted = pickle.dumps(vars(model))
    first = model.predict(p["K_test"])
    model.predict(np.random.default_rng(0).normal(size=(5, len(p["K"]))))
    assert pickle.dumps(vars(model)) == fitted
    np.testing.assert_array_equal(model.predict(p["K_test"]), first)


def test_loo_is_refused_at_finite_time():
    p = feature_problem()
    with pytest.raises(InputError) as err:
        KernelRegressor("ntk", t=1.0, cv="loo").fit(p["K"], p["Y"])
    assert err.value.source == "cv"
    with pytest.raises(InputError, match="LOO"):
        select_regularizer(eigensystem(p["K"]), p["Y"], criterion="loo", t=1.0)
    # finite t with k-fold or GCV works
    KernelRegressor("ntk", t=1.0, cv="gcv").fit(p["K"], p["Y"])
    KernelRegressor("ntk", t=1.0, cv="kfold", relative_grid=[1e-4, 1e-2]).fit(p["K"], p["Y"])
