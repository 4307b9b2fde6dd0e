"""The fitted GP amplitude (molntk.regression.calibration) against independent computations:
scikit-learn's GP log marginal likelihood, brute-force leave-one-out refits, and the
coverage of data drawn from a known GP."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.optimize
import scipy.stats
from sklearn.gaussian_process import GaussianProcessRegressor
from sklearn.gaussian_process.kernels import RBF, ConstantKernel, WhiteKernel

from molntk.errors import InputError
from molntk.regression import KernelRegressor, eigensystem
from molntk.regression.calibration import eigen_amplitude, log_marginal_likelihood, loo_predictive
from tests.helpers.regression import rbf_problem

LAM = 0.05


def _rbf_points(n: int = 30, seed: int = 3) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Points X (n, 2), the unit RBF kernel on them (length 1) and targets with noise."""
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2, 2, size=(n, 2))
    K = np.exp(-0.5 * ((X[:, None] - X[None]) ** 2).sum(-1))
    return X, K, np.sin(2 * X[:, 0]) * 3.0 + X[:, 1] + 0.2 * rng.normal(size=n)


def test_ml_amplitude_maximises_sklearns_log_marginal_likelihood():
    """sklearn's GPR with kernel c · RBF(1) + WhiteKernel(c λ) (noise tied to λ as in kernel
    ridge): its log marginal likelihood equals ours at every c, and a numeric maximiser over c
    (Brent on log c, tolerance 1e-10) equals the closed form zᵀ(K + λI)⁻¹z / n."""
    X, K, y = _rbf_points()
    eig = eigensystem(K)
    gpr = GaussianProcessRegressor(ConstantKernel(1.0) * RBF(1.0, "fixed") + WhiteKernel(LAM), alpha=0.0, optimizer=None)
    gpr.fit(X, y)

    def sklearn_lml(c: float) -> float:  # theta: log c, log noise (RBF fixed)
        return gpr.log_marginal_likelihood(np.log([c, c * LAM]))

    for c in (0.3, 2.0, 7.0):
        assert log_marginal_likelihood(eig, y, LAM, c) == pytest.approx(sklearn_lml(c), rel=1e-10)
    best = scipy.optimize.minimize_scalar(lambda s: -sklearn_lml(np.exp(s)), bracket=(-3, 3), tol=1e-10)
    W = np.linalg.solve(K + LAM * np.eye(len(y)), y)[:, None]
    closed = eigen_amplitude("ml", eig, W, LAM)[0]
    assert closed == pytest.approx(y @ W[:, 0] / len(y), rel=1e-12)
    assert closed == pytest.approx(np.exp(best.x), rel=1e-6)  # Brent's x tolerance on log c


def test_loo_residuals_and_variances_equal_refits_without_each_point():
    """Closed-form LOO (R&W §5.4.2) against n refits on the other n − 1 points: residual
    y_i − k_iᵀ(K₋ᵢ + λI)⁻¹y₋ᵢ and predictive variance of y_i, K_ii − k_iᵀ(K₋ᵢ + λI)⁻¹k_i + λ
    (σ_f² = 1); the LOO amplitude maximises Σ_i log N(r_i; 0, σ_f² v_i) (numeric, Brent)."""
    _, K, y = _rbf_points(n=25)
    eig = eigensystem(K)
    residuals, variances = loo_predictive(eig, y, LAM)
    for i in range(len(y)):
        rest = np.delete(np.arange(len(y)), i)
        A = K[np.ix_(rest, rest)] + LAM * np.eye(len(rest))
        k = K[rest, i]
        assert residuals[i] == pytest.approx(y[i] - k @ np.linalg.solve(A, y[rest]), rel=1e-9, abs=1e-12)
        assert variances[i] == pytest.approx(K[i, i] - k @ np.linalg.solve(A, k) + LAM, rel=1e-9)
    best = scipy.optimize.minimize_scalar(
        lambda s: -np.sum(scipy.stats.norm.logpdf(residuals, scale=np.sqrt(np.exp(s) * variances))), bracket=(-3, 3), tol=1e-10
    )
    W = np.linalg.solve(K + LAM * np.eye(len(y)), y)[:, None]
    assert eigen_amplitude("loo", eig, W, LAM)[0] == pytest.approx(np.exp(best.x), rel=1e-6)


def test_regressor_std_of_y_and_f_use_the_fitted_amplitude():
    """std_f² = σ_j² σ_f,j² (k** − k*ᵀA⁻¹k*), std_y² = std_f² + σ_j² σ_f,j² λ, per target j,
    with σ_f² from loo_predictive / the ML formula on the standardised targets; Cholesky gives
    the same amplitudes and stds as the eigendecomposition."""
    p = rbf_problem()
    sigma = p["Y"].std(axis=0)
    Z = (p["Y"] - p["Y"].mean(0)) / sigma
    eig = eigensystem(p["K"])
    A_inv_k = np.linalg.solve(p["K"] + LAM * np.eye(len(Z)), p["K_test"].T)
    latent = p["k_diag"] - np.einsum("ij,ji->i", p["K_test"], A_inv_k)
    residuals, variances = loo_predictive(eig, Z, LAM)
    expected = {"loo": np.mean(residuals**2 / variances[:, None], axis=0),
                "ml": np.sum(Z * np.linalg.solve(p["K"] + LAM * np.eye(len(Z)), Z), axis=0) / len(Z)}
    for amplitude, amp in expected.items():
        for solver in ("eigh", "cholesky"):
            model = KernelRegressor("nngp", reg=LAM, amplitude=amplitude, solver=solver).fit(p["K"], p["Y"])
            np.testing.assert_allclose(model.amplitude_, amp, rtol=1e-9)
            _, std_f = model.predict(p["K_test"], p["k_diag"], return_std=True, std_of="f")
            _, std_y = model.predict(p["K_test"], p["k_diag"], return_std=True)
            np.testing.assert_allclose(std_f, np.sqrt(latent[:, None] * amp) * sigma, rtol=1e-7)
            np.testing.assert_allclose(std_y**2 - std_f**2, np.broadcast_to(LAM * amp * sigma**2, std_y.shape), rtol=1e-7)


def test_ntk_std_is_the_posterior_of_its_own_kernel():
    """variance="gp" with method="ntk" is the same GP posterior as method="nngp" on the same
    kernel (the mean is kernel ridge on Θ either way)."""
    p = rbf_problem()
    ntk = KernelRegressor("ntk", reg=LAM).fit(p["K"], p["Y"]).predict(p["K_test"], p["k_diag"], return_std=True)
    nngp = KernelRegressor("nngp", reg=LAM).fit(p["K"], p["Y"]).predict(p["K_test"], p["k_diag"], return_std=True)
    for a, b in zip(ntk, nngp):
        np.testing.assert_allclose(a, b, rtol=1e-12)


def test_draws_from_a_known_gp_are_covered_as_a_gaussian_says():
    """y ~ GP(0, 9 · RBF) + N(0, 9 λ) on 200 training and 300 test points; fitted with the
    true λ (standardize=False), both amplitudes recover 9 and the test errors fall within 1σ
    and 2σ of y's std about 68 % and 95 % of the time. Tolerances: the ML estimate of σ_f²
    has relative std √(2/n) = 0.1 (0.3 allowed); a fraction of 300 has std ≤ 0.027 (0.08 allowed)."""
    rng = np.random.default_rng(7)
    X = rng.uniform(-3, 3, size=(500, 2))
    K = np.exp(-0.5 * ((X[:, None] - X[None]) ** 2).sum(-1))
    lam = 0.01
    y = np.linalg.cholesky(9.0 * (K + lam * np.eye(500))) @ rng.normal(size=500)
    train, test = slice(0, 200), slice(200, 500)
    for amplitude in ("loo", "ml"):
        model = KernelRegressor("nngp", reg=lam, standardize=False, amplitude=amplitude).fit(K[train, train], y[train])
        assert model.amplitude_[0] == pytest.approx(9.0, rel=0.3)
        mean, std = model.predict(K[test, train], np.ones(300), return_std=True)
        z = np.abs(y[test] - mean) / std
        assert np.mean(z <= 1) == pytest.approx(0.683, abs=0.08)
        assert np.mean(z <= 2) == pytest.approx(0.954, abs=0.08)


def test_amplitude_settings_are_checked():
    p = rbf_problem()
    with pytest.raises(InputError) as err:
        KernelRegressor("nngp", reg=LAM, amplitude="mle").fit(p["K"], p["Y"])
    assert err.value.source == "amplitude"
    with pytest.raises(InputError) as err:
        KernelRegressor("nngp", reg=LAM, variance="ntk-gp").fit(p["K"], p["Y"])
    assert err.value.source == "variance"
    finite = KernelRegressor("ntk", reg=LAM, t=3.0).fit(p["K"], p["Y"])
    with pytest.raises(InputError, match="t = inf") as err:
        finite.predict(p["K_test"], p["k_diag"], return_std=True)
    assert err.value.source == "amplitude"
    model = KernelRegressor("nngp", reg=LAM).fit(p["K"], p["Y"])
    with pytest.raises(InputError) as err:
        model.predict(p["K_test"], p["k_diag"], return_std=True, std_of="z")
    assert err.value.source == "std_of"


def test_whole_model_loo_refits_the_baseline_and_the_standardisation():
    """refit_loo_amplitude against brute force: for each i, the dressed-atom model and the
    standardised kernel ridge refitted on the other points predict y_i; the residuals agree
    and σ_f² = (1/n) Σ r_i² d_i / σ² with d_i = [(K + λI)⁻¹]_ii."""
    from molntk.regression import DressedAtomModel

    rng = np.random.default_rng(5)
    _, K, noise = _rbf_points(n=20)
    counts = rng.integers(0, 6, size=(20, 3)).astype(float)
    y = counts @ [-1000.0, -400.0, -250.0] + 30.0 * noise
    dressed = DressedAtomModel().fit(counts, y)
    base = dressed.predict(counts)
    model = KernelRegressor("nngp", reg=LAM).fit(K, y - base)
    residuals = model.refit_loo_amplitude(base[None] - dressed.leave_one_out_predictions(counts, y), reference=np.abs(y).max())
    for i in range(len(y)):
        rest = np.delete(np.arange(len(y)), i)
        refit = DressedAtomModel().fit(counts[rest], y[rest])
        ridge = KernelRegressor("nngp", reg=LAM).fit(K[np.ix_(rest, rest)], y[rest] - refit.predict(counts[rest]))
        predicted = refit.predict(counts[i : i + 1])[0] + ridge.predict(K[i : i + 1, rest])[0]
        assert residuals[i] == pytest.approx(y[i] - predicted, rel=1e-8)
    d = np.diag(np.linalg.inv(K + LAM * np.eye(len(y))))
    assert model.amplitude_[0] == pytest.approx(np.mean(residuals**2 * d) / model.target_scale_[0] ** 2, rel=1e-10)


def test_whole_model_loo_without_information_gives_an_infinite_std():
    """Copies of one point with one target: every LOO residual is 0, so no error scale is
    measured; the std is inf (unknown), with a warning, not a confident 0."""
    from molntk.regression.calibration import UncalibratedWarning

    model = KernelRegressor("nngp", reg=LAM).fit(np.ones((6, 6)), np.full(6, -7.0e4))
    with pytest.warns(UncalibratedWarning):
        model.refit_loo_amplitude(np.zeros((6, 6)), reference=7.0e4)
    _, std = model.predict(np.full((2, 6), 0.5), np.ones(2), return_std=True)
    assert np.all(np.isinf(std))
