"""KernelRegressor with the large-N solvers: ``solver="cholesky"`` and ``solver="pcg"``.

Both solve (K + λI) W = Z for the standardised targets Z; they are checked against the
eigendecomposition (``solver="eigh"``) and scikit-learn's KernelRidge to tolerances derived
from cond(K + λI) and ``pcg_tol`` (:func:`mean_tolerance`), on kernels held in memory and
in ``np.memmap`` files.
"""

from __future__ import annotations

import math
import tracemalloc
import warnings

import numpy as np
import pytest
from sklearn.kernel_ridge import KernelRidge

from molntk.errors import InputError
from molntk.regression import IllConditionedWarning, KernelRegressor, PCGConvergenceWarning, eigensystem
from molntk.regression import estimator

EPS = np.finfo(np.float64).eps
#: (solver, preconditioner) pairs of the large-N regressor.
LARGE_N = [("cholesky", "pivoted-cholesky"), ("pcg", "pivoted-cholesky"), ("pcg", "jacobi")]
PCG_TOL = 1e-10

# ----------------------------------------------------------------------------- helpers


def psd_problem(n: int = 300, m: int = 50, d: int = 4, seed: int = 0) -> dict[str, np.ndarray]:
    """Linear plus Gaussian kernel K(x, x') = x·x'/d + exp(-‖x - x'‖²/2), positive definite,
    on n training and m test points in d dimensions (the default has s_min ≈ 1.3e-5 and
    s_max ≈ 95, so cond(K + λI) ≈ 3e6 at λ = 1e-5 mean(diag K)); two targets of different
    scales and offsets (so that standardisation matters)."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n + m, d))
    G = X @ X.T / d + np.exp(-((X[:, None, :] - X[None, :, :]) ** 2).sum(-1) / 2)
    x = X[:n]
    Y = np.stack([np.sin(x[:, 0]) + x[:, 1], x[:, 2] * x[:, 3]], axis=1) * [3.0, 0.5] + [10.0, -2.0]
    return {"K": G[:n, :n], "K_test": G[n:, :n], "k_diag": np.diag(G)[n:].copy(), "Y": Y}


PROBLEM = psd_problem()


def reg_of(p: dict[str, np.ndarray], relative: float) -> float:
    return relative * float(np.mean(np.diag(p["K"])))


def regressor(solver: str, preconditioner: str = "pivoted-cholesky", **kwargs: object) -> KernelRegressor:
    return KernelRegressor(solver=solver, preconditioner=preconditioner, pcg_tol=PCG_TOL, **kwargs)


def mean_tolerance(p: dict[str, np.ndarray], reg: float, Z: np.ndarray, pcg_tol: float) -> np.ndarray:
    """Bound, per target j, on ‖K_*(W - W')_j‖₂ (standardised units) between two computed
    solutions W, W' of (K + λI) W = Z, each a direct solve or PCG.

    With residuals r = Z - (K + λI) W, W - W' = (K + λI)⁻¹ (r' - r), so the gap is at most
    G (‖r_j‖ + ‖r'_j‖) with G = ‖K_* (K + λI)⁻¹‖₂ (the conditioning that matters here,
    ≤ ‖K_*‖₂ / (s_min + λ)). A backward-stable direct solve (eigh, Cholesky, scikit-learn's
    Cholesky-based solve) has ‖r_j‖ ≤ c n ε ‖K + λI‖₂ ‖w_j‖ (c = 1 taken); PCG's stopping
    rule gives ‖r_j‖ ≤ pcg_tol ‖z_j‖, plus a drift of its updated residual from the true one of
    the same n ε ‖K + λI‖ ‖w_j‖ order. Both products K_* W round by ≤ n ε ‖K_*‖₂ ‖w_j‖ each.
    w_j is taken from the exact eigensystem solve; ``pcg_tol`` = 0 for two direct solves.
    """
    eig = eigensystem(p["K"])
    n = eig.n
    W = eig.from_basis(eig.to_basis(Z) / (eig.values + reg)[:, None])
    w_norm = np.linalg.norm(W, axis=0)
    gain = np.linalg.norm((p["K_test"] @ eig.vectors) / (eig.values + reg), 2)
    residuals = pcg_tol * np.linalg.norm(Z, axis=0) + 2 * n * EPS * (eig.values[-1] + reg) * w_norm
    return gain * residuals + 2 * n * EPS * np.linalg.norm(p["K_test"], 2) * w_norm


def standardised(p: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Z = (Y - m) / σ (ddof 0, as KernelRegressor), m and σ."""
    mean, scale = p["Y"].mean(0), p["Y"].std(0)
    return (p["Y"] - mean) / scale, mean, scale


def assert_means_agree(pred: np.ndarray, reference: np.ndarray, scale: np.ndarray, tolerance: np.ndarray) -> None:
    """‖(pred - reference)_j‖₂ / σ_j ≤ tolerance_j for every target j."""
    gap = np.linalg.norm((pred - reference) / scale, axis=0)
    assert np.all(gap <= tolerance), (gap, tolerance)


# ----------------------------------------------------------------------------- predictions


@pytest.mark.parametrize(
    ("solver", "preconditioner", "relative"),
    [
        ("cholesky", "pivoted-cholesky", 1e-5),  # cond(K + λI) ≈ 3e6
        ("cholesky", "pivoted-cholesky", 1e-2),  # ≈ 5e3
        ("pcg", "pivoted-cholesky", 1e-5),
        ("pcg", "pivoted-cholesky", 1e-2),
        # Jacobi-PCG stalls above pcg_tol within 1000 iterations for cond ≳ 1e5 on this kernel
        ("pcg", "jacobi", 1e-3),  # ≈ 5e4, ~600 iterations
        ("pcg", "jacobi", 1e-2),
    ],
)
def test_large_n_solvers_equal_eigh_and_kernel_ridge(solver, preconditioner, relative):
    p = PROBLEM
    reg = reg_of(p, relative)
    Z, m, sigma = standardised(p)
    tolerance = mean_tolerance(p, reg, Z, PCG_TOL if solver == "pcg" else 0.0)
    model = regressor(solver, preconditioner, reg=reg).fit(p["K"], p["Y"])
    pred = model.predict(p["K_test"])
    assert pred.shape == (50, 2)
    eigh = KernelRegressor("ntk", reg=reg).fit(p["K"], p["Y"]).predict(p["K_test"])
    assert_means_agree(pred, eigh, sigma, tolerance)
    ridge = KernelRidge(kernel="precomputed", alpha=reg).fit(p["K"], Z).predict(p["K_test"])
    assert_means_agree(pred, m + sigma * ridge, sigma, tolerance)
    # the bound is not vacuous: below 1e-7 of the predictions' size here
    assert np.all(tolerance < 1e-7 * np.linalg.norm(ridge, axis=0))


@pytest.mark.parametrize(("solver", "preconditioner"), LARGE_N)
def test_one_target_given_1d_comes_back_1d(solver, preconditioner):
    p = PROBLEM
    reg = reg_of(p, 1e-2)
    one = regressor(solver, preconditioner, reg=reg).fit(p["K"], p["Y"][:, 1]).predict(p["K_test"])
    both = regressor(solver, preconditioner, reg=reg).fit(p["K"], p["Y"]).predict(p["K_test"])
    assert one.shape == (50,)
    Z, _, sigma = standardised(p)
    assert_means_agree(one[:, None], both[:, [1]], sigma[[1]], mean_tolerance(p, reg, Z, PCG_TOL)[[1]])


def test_nngp_std_with_cholesky_equals_eigh():
    """Var = k** - q, q = k_xᵀ A⁻¹ k_x (A = K + λI), by ‖L⁻¹ k_x‖² vs the eigenvectors. A
    backward-stable evaluation computes q for A + E with ‖E‖ ≤ c n ε ‖A‖ (c ≤ 2 for the
    factor L Lᵀ); since d(kᵀA⁻¹k) = -kᵀA⁻¹ E A⁻¹k, each q is off by at most
    2 n ε ‖A‖₂ ‖A⁻¹k_x‖², plus n ε k** for the sums and the subtraction: twice that (both
    sides) in standardised variance units."""
    p = PROBLEM
    reg = reg_of(p, 1e-3)
    cholesky = KernelRegressor("nngp", reg=reg, solver="cholesky").fit(p["K"], p["Y"])
    mean_c, std_c = cholesky.predict(p["K_test"], p["k_diag"], return_std=True)
    eigh = KernelRegressor("nngp", reg=reg).fit(p["K"], p["Y"])
    std_e = eigh.predict(p["K_test"], p["k_diag"], return_std=True)[1]
    _, _, sigma = standardised(p)
    eig = eigensystem(p["K"])
    solved = eig.from_basis(eig.to_basis(p["K_test"].T) / (eig.values + reg)[:, None])  # A⁻¹ k_x, (n, m)
    n, top = eig.n, eig.values[-1] + reg
    tolerance = 2 * n * EPS * (2 * top * np.sum(solved**2, axis=0) + p["k_diag"])
    gap = np.abs((std_c / sigma) ** 2 - (std_e / sigma) ** 2)
    assert np.all(gap <= tolerance[:, None]), (gap.max(), tolerance.min())
    assert std_c.shape == mean_c.shape == (50, 2)
    assert np.all(std_c > 0)


# ----------------------------------------------------------------------------- memmaps


def _memmap(tmp_path, name: str, array: np.ndarray) -> np.memmap:
    """``array`` written to an .npy file and opened read-only as an ``np.memmap``."""
    path = tmp_path / f"{name}.npy"
    np.save(path, array)
    mapped = np.load(path, mmap_mode="r")
    assert isinstance(mapped, np.memmap)
    return mapped


@pytest.mark.parametrize("preconditioner", ["pivoted-cholesky", "jacobi"])
def test_pcg_on_a_memmap_equals_pcg_in_memory(tmp_path, preconditioner, monkeypatch):
    """The memmap holds the same float64 numbers and PCG runs the same operations on them,
    so the results agree to rounding (in practice bit for bit); read-only maps prove K and
    the test kernel are only read."""
    p = PROBLEM
    reg = reg_of(p, 1e-3)
    K_map, test_map = _memmap(tmp_path, "K", p["K"]), _memmap(tmp_path, "K_test", p["K_test"])
    in_memory = regressor("pcg", preconditioner, reg=reg).fit(p["K"], p["Y"])
    mapped = regressor("pcg", preconditioner, reg=reg).fit(K_map, p["Y"])
    weights = in_memory.fitted_arrays()["weights"]
    np.testing.assert_allclose(mapped.fitted_arrays()["weights"], weights, rtol=1e-13, atol=0)
    assert mapped.n_iter_ == in_memory.n_iter_
    expected = in_memory.predict(p["K_test"])
    np.testing.assert_allclose(mapped.predict(test_map), expected, rtol=1e-13, atol=0)
    # a test kernel read 3 rows at a time gives the same predictions
    monkeypatch.setattr(estimator, "BLOCK_ENTRIES", 3 * p["K"].shape[0])
    np.testing.assert_allclose(mapped.predict(test_map), expected, rtol=1e-13, atol=0)


def test_pcg_does_not_copy_a_memmap_kernel(tmp_path, monkeypatch):
    """With the Jacobi preconditioner PCG allocates a few (n, k) arrays and the NaN scan of K
    one block of 10 rows at a time; a copy of K would allocate 8 n² bytes (numpy reports its
    allocations to tracemalloc)."""
    p = PROBLEM
    monkeypatch.setattr(estimator, "BLOCK_ENTRIES", 10 * p["K"].shape[0])
    K_map = _memmap(tmp_path, "K", p["K"])
    model = regressor("pcg", "jacobi", reg=reg_of(p, 1e-2))
    tracemalloc.start()
    try:
        model.fit(K_map, p["Y"])
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < p["K"].nbytes / 10, peak


def test_cholesky_std_on_a_memmap_test_kernel_read_in_blocks(tmp_path, monkeypatch):
    p = PROBLEM
    model = KernelRegressor("nngp", reg=reg_of(p, 1e-2), solver="cholesky").fit(_memmap(tmp_path, "K", p["K"]), p["Y"])
    mean, std = model.predict(p["K_test"], p["k_diag"], return_std=True)
    monkeypatch.setattr(estimator, "BLOCK_ENTRIES", 7 * p["K"].shape[0])
    mean_b, std_b = model.predict(_memmap(tmp_path, "K_test", p["K_test"]), p["k_diag"], return_std=True)
    np.testing.assert_allclose(mean_b, mean, rtol=1e-13)
    np.testing.assert_allclose(std_b, std, rtol=1e-12)


# ----------------------------------------------------------------------------- fitted attributes, warnings


def fitted_attributes(model: object) -> set[str]:
    """The public fitted attributes (scikit-learn's trailing underscore) of ``model``."""
    return {name for name in vars(model) if name.endswith("_") and not name.startswith("_")}


def test_fitted_attributes_of_the_large_n_solvers():
    p = PROBLEM
    reg = reg_of(p, 1e-3)
    eigh = KernelRegressor("ntk", reg=reg).fit(p["K"], p["Y"])
    cholesky = KernelRegressor("ntk", reg=reg, solver="cholesky").fit(p["K"], p["Y"])
    pcg = regressor("pcg", reg=reg).fit(p["K"], p["Y"])
    assert eigh.solver_ == "eigh" and cholesky.solver_ == "cholesky" and pcg.solver_ == "pcg"
    for model in (cholesky, pcg):
        assert fitted_attributes(eigh) <= fitted_attributes(model)
        assert model.cv_result_ is None and model.eigenvalues_clipped_ is None and model.min_eigenvalue_ is None
        assert model.reg_ == reg and math.isclose(model.reg_relative_, 1e-3, rel_tol=1e-14)
        assert model.t == math.inf and model.n_train_ == 300 and model.n_targets_ == 2
        assert model.target_mean_.tolist() == eigh.target_mean_.tolist()
        assert model.target_scale_.tolist() == eigh.target_scale_.tolist()
    # LAPACK's cond₁ estimate: cond₂ ≤ cond₁ ≤ n cond₂, the estimate of ‖A⁻¹‖₁ is within ~3 below
    assert eigh.condition_number_ / 3 <= cholesky.condition_number_ <= 300 * eigh.condition_number_
    assert pcg.condition_number_ is None
    assert 0 < pcg.n_iter_ < 300 and pcg.pcg_residual_ <= PCG_TOL


@pytest.mark.parametrize("preconditioner", ["pivoted-cholesky", "jacobi"])
def test_non_converging_pcg_warns_with_the_residual_reached(preconditioner):
    p = PROBLEM
    model = regressor("pcg", preconditioner, reg=reg_of(p, 1e-4), pcg_max_iter=2)
    with pytest.warns(PCGConvergenceWarning, match=r"relative residual \d") as record:
        model.fit(p["K"], p["Y"])
    assert model.n_iter_ == 2 and model.pcg_residual_ > PCG_TOL
    assert f"{model.pcg_residual_:.3g}" in str(record[0].message)


def test_converged_pcg_does_not_warn():
    p = PROBLEM
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        regressor("pcg", reg=reg_of(p, 1e-2)).fit(p["K"], p["Y"])


def test_nearly_singular_cholesky_warns():
    rng = np.random.default_rng(2)
    phi = rng.normal(size=(40, 5))
    with pytest.warns(IllConditionedWarning, match="estimated condition number"):
        KernelRegressor("ntk", reg=1e-11, solver="cholesky").fit(phi @ phi.T, np.arange(40.0))  # cond ≈ 10¹³


# ----------------------------------------------------------------------------- fitted arrays


@pytest.mark.parametrize("method", ["ntk", "nngp"])
@pytest.mark.parametrize("solver", ["eigh", "cholesky", "pcg"])
def test_fitted_arrays_round_trip_through_npz(tmp_path, method, solver):
    """The arrays go through np.savez / np.load(allow_pickle=False) (as SO3NTKRegressor's model
    files) into a default regressor: the saved state says which solver predicts."""
    p = PROBLEM
    model = regressor(solver, method=method, reg=reg_of(p, 1e-2)).fit(p["K"], p["Y"])
    arrays = model.fitted_arrays()
    assert ("solver" in arrays) == (solver != "eigh")
    assert ("cholesky_factor" in arrays) == (solver == "cholesky" and method == "nngp")
    np.savez(tmp_path / "state.npz", **arrays)
    with np.load(tmp_path / "state.npz", allow_pickle=False) as archive:
        loaded = KernelRegressor(method).load_fitted_arrays({key: archive[key] for key in archive.files})
    np.testing.assert_array_equal(loaded.predict(p["K_test"]), model.predict(p["K_test"]))
    if method == "nngp" and solver != "pcg":
        std = model.predict(p["K_test"], p["k_diag"], return_std=True)[1]
        np.testing.assert_array_equal(loaded.predict(p["K_test"], p["k_diag"], return_std=True)[1], std)


def test_eigh_fitted_arrays_keep_their_format():
    p = PROBLEM
    arrays = KernelRegressor("ntk", reg=0.1, variance="ntk-gp").fit(p["K"], p["Y"], K_nngp_train=p["K"]).fitted_arrays()
    assert list(arrays) == [
        "weights", "eig_values", "eig_vectors", "eig_mean_diag",
        "target_mean", "target_scale", "reg", "was_1d", "nngp_rotated", "amplitude",
    ]
    assert all(a.dtype == np.float64 for a in arrays.values())


# ----------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("kwargs", "source", "message"),
    [
        ({"solver": "lu"}, "solver", "one of"),
        ({"solver": "pcg", "reg": "cv"}, "reg", "subset"),
        ({"solver": "cholesky", "reg": "cv"}, "reg", "subset"),
        ({"solver": "pcg", "reg": 0.0}, "reg", "> 0"),
        ({"solver": "cholesky", "reg": 0.1, "t": 2.0}, "t", "finite t"),
        ({"solver": "pcg", "reg": 0.1, "t": 2.0}, "t", "finite t"),
        ({"solver": "pcg", "reg": 0.1, "pcg_tol": 0.0}, "pcg_tol", "> 0"),
        ({"solver": "pcg", "reg": 0.1, "pcg_max_iter": 0}, "pcg_max_iter", "at least 1"),
        ({"solver": "pcg", "reg": 0.1, "preconditioner": "ilu"}, "preconditioner", "one of"),
        ({"solver": "pcg", "reg": 0.1, "preconditioner_rank": 0}, "preconditioner_rank", "at least 1"),
    ],
)
def test_bad_large_n_settings_name_the_argument(kwargs, source, message):
    model = KernelRegressor(**kwargs)  # parameters are stored as given (scikit-learn) and checked by fit
    with pytest.raises(InputError, match=message) as err:
        model.fit(PROBLEM["K"], PROBLEM["Y"])
    assert err.value.source == source


def test_variances_the_large_n_solvers_do_not_give_name_the_solver():
    p = PROBLEM
    cases = [
        KernelRegressor("nngp", reg=0.1, solver="pcg"),
        KernelRegressor("ntk", reg=0.1, solver="pcg"),
        KernelRegressor("ntk", reg=0.1, solver="cholesky"),
    ]
    for model in cases:
        model.fit(p["K"], p["Y"])
        with pytest.raises(InputError) as err:
            model.predict(p["K_test"], p["k_diag"], return_std=True, K_nngp_test_train=p["K_test"])
        assert err.value.source == "solver", model.solver
    with pytest.raises(InputError) as err:
        KernelRegressor("ntk", reg=0.1, solver="cholesky").fit(p["K"], p["Y"], K_nngp_train=p["K"])
    assert err.value.source == "K_nngp_train"
    nngp = KernelRegressor("nngp", reg=0.1, solver="cholesky").fit(p["K"], p["Y"])
    for args, source in [((p["K_test"], None, True), "k_test_diag"), ((p["K_test"][:, :5],), "K_test_train")]:
        with pytest.raises(InputError) as err:
            nngp.predict(*args)
        assert err.value.source == source


@pytest.mark.parametrize("solver", ["cholesky", "pcg"])
def test_bad_kernels_name_k_train(solver):
    p = PROBLEM
    K = p["K"].copy()
    K[3, 3] = np.nan
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(InputError, match="non-finite|positive definite") as err:
            KernelRegressor(reg=0.1, solver=solver).fit(K, p["Y"])
    assert err.value.source == "K_train"
    with pytest.raises(InputError) as err:
        KernelRegressor(reg=0.1, solver=solver).fit(p["K"][:, :299], p["Y"])
    assert err.value.source == "K_train"
    with pytest.raises(InputError) as err:
        KernelRegressor(reg=0.1, solver=solver).fit(p["K"], p["Y"][:299])
    assert err.value.source == "Y"
