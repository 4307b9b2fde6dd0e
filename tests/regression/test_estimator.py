"""The scikit-learn estimator KernelRegressor (molntk.regression.estimator): torch inputs,
predictive standard deviations, cloning and grid search, conditioning, bad input."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch
from sklearn.base import clone
from sklearn.model_selection import GridSearchCV, KFold
from sklearn.utils import get_tags

from molntk.errors import InputError
from molntk.regression import (
    DressedAtomModel,
    IllConditionedWarning,
    KernelRegressor,
    eigensystem,
    ntk_gp_variance,
    ntk_mean,
)
from molntk.regression.sparse import SparseKernelRegressor
from tests.helpers.regression import feature_problem, fitted_attributes, rbf_problem, ridge_fit_predict


# ----------------------------------------------------------------------------- inputs and predictive standard deviation


def test_torch_inputs_give_the_same_predictions():
    p = feature_problem()
    numpy_model = KernelRegressor("ntk", reg=0.01).fit(p["K"], p["Y"])
    torch_model = KernelRegressor("ntk", reg=0.01).fit(torch.from_numpy(p["K"]), torch.from_numpy(p["Y"]))
    np.testing.assert_array_equal(torch_model.predict(torch.from_numpy(p["K_test"])), numpy_model.predict(p["K_test"]))


def test_ntk_regressor_std_is_scaled_ntk_gp_variance():
    p = feature_problem(k=2)
    rng = np.random.default_rng(11)
    psi = np.tanh(p["phi"] @ rng.normal(size=(p["phi"].shape[1], 70)))
    psi_test = np.tanh(p["phi_test"] @ rng.normal(size=(p["phi"].shape[1], 70)))
    K, K_test, k_diag = psi @ psi.T, psi_test @ psi.T, np.sum(psi_test**2, 1)
    model = KernelRegressor("ntk", t=2.0, lr=0.5, reg=0.01, variance="ntk-gp", amplitude="none")
    model.fit(p["K"], p["Y"], K_nngp_train=K)
    mean, std = model.predict(p["K_test"], k_diag, return_std=True, K_nngp_test_train=K_test, std_of="f")
    eig = eigensystem(p["K"])
    var = ntk_gp_variance(eig, eig.rotate(K), p["K_test"], K_test, k_diag, t=2.0, lr=0.5, reg=0.01)
    sigma = p["Y"].std(axis=0)
    np.testing.assert_allclose(std, np.sqrt(var[:, None]) * sigma, rtol=1e-12)
    Z = (p["Y"] - p["Y"].mean(0)) / sigma
    np.testing.assert_allclose(mean, p["Y"].mean(0) + sigma * ntk_mean(eig, p["K_test"], Z, t=2.0, lr=0.5, reg=0.01), rtol=1e-12)


# ----------------------------------------------------------------------------- scikit-learn estimators


def test_estimators_are_cloned_with_their_parameters_only():
    """``clone`` (used by every scikit-learn search) copies the parameters as given and no
    fitted state; the clone refits to the same predictions."""
    p = feature_problem()
    counts = np.random.default_rng(0).integers(0, 5, size=(40, 3))
    cases = [
        (KernelRegressor("nngp", reg=0.1, relative_grid=[1e-3, 1e-1], solver="cholesky"), (p["K"], p["Y"]), p["K_test"]),
        (
            SparseKernelRegressor(reg="cv", cv="gcv", relative_grid=[1e-2, 1.0], rank_rtol=1e-10),
            (p["K"][:, :10], p["K"][:10, :10], p["Y"]),
            p["K_test"][:, :10],
        ),
        (DressedAtomModel(intercept=True, ridge=1e-8), (counts, p["Y"][:, 0]), counts[:5]),
    ]
    for estimator, fit_args, test_input in cases:
        twin = clone(estimator)
        assert twin is not estimator and twin.get_params() == estimator.get_params()
        estimator.fit(*fit_args)
        assert fitted_attributes(estimator) and not fitted_attributes(clone(estimator))
        np.testing.assert_array_equal(clone(estimator).fit(*fit_args).predict(test_input), estimator.predict(test_input))


def test_grid_search_over_reg_on_a_precomputed_kernel_equals_a_manual_loop():
    """GridSearchCV slices the precomputed kernel by rows and columns (the ``pairwise`` tag):
    its scores, best λ and refitted predictions equal k-fold R² of dense ridge solves."""
    p = rbf_problem(n=60, k=2, seed=4)
    K, Y = p["K"], p["Y"]
    grid = [1e-3, 1e-2, 1e-1, 1.0, 10.0]
    folds = KFold(n_splits=4, shuffle=True, random_state=0)
    assert get_tags(KernelRegressor()).input_tags.pairwise
    search = GridSearchCV(KernelRegressor("ntk", standardize=False), {"reg": grid}, cv=folds).fit(K, Y)
    scores = []
    for reg in grid:
        r2_folds = []
        for train, test in folds.split(K):
            pred = ridge_fit_predict(K, Y, train, test, reg)
            residual = ((Y[test] - pred) ** 2).sum(axis=0)
            total = ((Y[test] - Y[test].mean(axis=0)) ** 2).sum(axis=0)
            r2_folds.append(np.mean(1.0 - residual / total))  # R² averaged over the two targets
        scores.append(np.mean(r2_folds))
    # cond(K_fold + λI) ≤ ~1e5 at λ = 1e-3: eigh and LU solves agree to ~1e-11 relative.
    np.testing.assert_allclose(search.cv_results_["mean_test_score"], scores, rtol=1e-9)
    best = grid[int(np.argmax(scores))]
    assert 0 < grid.index(best) < len(grid) - 1  # an interior optimum: the comparison is not trivial
    assert search.best_params_ == {"reg": best} and search.best_estimator_.reg_ == best
    expected = p["K_test"] @ np.linalg.solve(K + best * np.eye(len(K)), Y)
    np.testing.assert_allclose(search.predict(p["K_test"]), expected, rtol=1e-9, atol=1e-12)


# ----------------------------------------------------------------------------- conditioning


def test_condition_number_clipping_and_warnings():
    p = feature_problem()
    eig = eigensystem(p["K"])
    for reg in (0.0, 0.1):
        np.testing.assert_allclose(eig.condition_number(reg), np.linalg.cond(p["K"] + reg * np.eye(len(p["K"]))), rtol=1e-6)
    # rank 10 < n = 40: rounding leaves tiny negative eigenvalues, which are clipped to 0
    phi = np.random.default_rng(0).normal(size=(40, 10))
    low_rank = phi @ phi.T
    eig = eigensystem(low_rank)
    assert eig.n_clipped > 0 and eig.min_raw < 0 and np.all(eig.values >= 0)
    assert eig.condition_number(0.0) == math.inf
    with pytest.warns(IllConditionedWarning, match="nearly singular"):
        KernelRegressor("ntk", reg=0.0).fit(low_rank, np.ones(40))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model = KernelRegressor("ntk", reg=1.0).fit(low_rank, np.arange(40.0))
    assert model.eigenvalues_clipped_ == eig.n_clipped
    assert model.condition_number_ == pytest.approx(np.linalg.cond(low_rank + np.eye(40)), rel=1e-8)
    # a clearly indefinite matrix is not a kernel
    with pytest.raises(InputError, match="positive semi-definite") as err:
        eigensystem(low_rank - 0.5 * np.eye(40))
    assert err.value.source == "K_train"


# ----------------------------------------------------------------------------- bad input


def _with_nan(array: np.ndarray, index: tuple[int, ...]) -> np.ndarray:
    array = array.copy()
    array[index] = np.nan
    return array


BASE = feature_problem(n=12, m=4, d=30, k=2)


@pytest.mark.parametrize(
    ("overrides", "source", "message"),
    [
        ({"K_train": BASE["K"][:, :11]}, "K_train", "square"),
        ({"K_train": _with_nan(BASE["K"], (3, 3))}, "K_train", "non-finite"),
        ({"K_train": BASE["K"] + np.triu(np.ones((12, 12)), 1)}, "K_train", "symmetric"),
        ({"Y": BASE["Y"][:11]}, "Y", "12 rows"),
        ({"Y": _with_nan(BASE["Y"], (0, 1))}, "Y", "non-finite"),
        ({"Y": np.zeros((12, 2, 2))}, "Y", "shape"),
    ],
)
def test_bad_fit_inputs_name_the_argument(overrides, source, message):
    args = {"K_train": BASE["K"], "Y": BASE["Y"], **overrides}
    with pytest.raises(InputError, match=message) as err:
        KernelRegressor("ntk", reg=0.1).fit(args["K_train"], args["Y"])
    assert err.value.source == source


def test_bad_predict_inputs_name_the_argument():
    model = KernelRegressor("ntk", reg=0.1, variance="ntk-gp").fit(BASE["K"], BASE["Y"], K_nngp_train=BASE["K"])
    cases = [
        ({"K_test_train": BASE["K_test"][:, :5]}, "K_test_train"),
        ({"K_test_train": _with_nan(BASE["K_test"], (1, 2))}, "K_test_train"),
        ({"k_test_diag": BASE["k_diag"][:3], "return_std": True, "K_nngp_test_train": BASE["K_test"]}, "k_test_diag"),
        ({"k_test_diag": BASE["k_diag"], "return_std": True}, "K_nngp_test_train"),
        ({"return_std": True}, "k_test_diag"),
        ({"k_test_diag": BASE["k_diag"], "return_std": True, "K_nngp_test_train": BASE["K_test"][:2]}, "K_nngp_test_train"),
    ]
    for overrides, source in cases:
        args = {"K_test_train": BASE["K_test"], **overrides}
        with pytest.raises(InputError) as err:
            model.predict(**args)
        assert err.value.source == source, overrides
    no_nngp = KernelRegressor("ntk", reg=0.1, variance="ntk-gp").fit(BASE["K"], BASE["Y"])
    with pytest.raises(InputError) as err:
        no_nngp.predict(BASE["K_test"], BASE["k_diag"], return_std=True, K_nngp_test_train=BASE["K_test"])
    assert err.value.source == "K_nngp_train"
    with pytest.raises(InputError, match="before fit"):
        KernelRegressor().predict(BASE["K_test"])


@pytest.mark.parametrize(
    ("kwargs", "source"),
    [
        ({"method": "svm"}, "method"),
        ({"cv": "bootstrap"}, "cv"),
        ({"cv_loss": "huber"}, "cv_loss"),
        ({"cv": "gcv", "cv_loss": "absolute"}, "cv_loss"),
        ({"reg": -1.0}, "reg"),
        ({"reg": "auto"}, "reg"),
        ({"t": -1.0}, "t"),
        ({"lr": 0.0}, "lr"),
        ({"method": "nngp", "t": 1.0}, "t"),
        ({"n_folds": 1}, "n_folds"),
    ],
)
def test_bad_settings_name_the_argument(kwargs, source):
    model = KernelRegressor(**kwargs)  # parameters are stored as given (scikit-learn) and checked by fit
    with pytest.raises(InputError) as err:
        model.fit(BASE["K"], BASE["Y"])
    assert err.value.source == source
