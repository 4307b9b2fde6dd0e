"""``SO3ForceFieldRegressor(inducing_frames=m)``: the GDML form on m inducing configurations,
fitted to the energies and forces of every training configuration, and the choice of those
configurations (:func:`molntk.features.inducing.inducing_molecules`). Ethanol frames of the
committed GFN2-xTB MD sample (eV, eV/Å) and the small model of test_force_field.py (Lebedev
grid of band limit 2, psd_rtol 1e-4).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from threadpoolctl import threadpool_limits

from molntk.errors import InputError, ModelFileError
from molntk.features.inducing import inducing_molecules
from molntk.models import force_field
from molntk.models.force_field import SO3ForceFieldRegressor
from molntk.regression.noise_search import RATIO_GRID, usable_scales
from molntk.regression.sparse_joint import sparse_joint_host_bytes
from molntk.molecular.derivative_kernels import derivative_rows
from tests.helpers.forces import assert_same_energies_and_forces, with_array

pytestmark = pytest.mark.usefixtures("one_thread", "one_blas_thread")

PARAMS = dict(elements=(1, 6, 8), grid_band_limit=2, psd_rtol=1e-4,
              radial={"kind": "gaussian", "n": 4, "r_min": 0.5, "r_cut": 3.0})
TRAIN = list(range(0, 48, 4))  # 12 frames
LAMBDAS = dict(reg_energy=1e-3, reg_force=1e-2)


def _fit(model: SO3ForceFieldRegressor, sample, train=TRAIN) -> SO3ForceFieldRegressor:
    mols, e, f = sample
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # module fixtures are not covered by the function-scoped one_thread
    try:
        with threadpool_limits(1):
            return model.fit([mols[i] for i in train], e[train], [f[i] for i in train])
    finally:
        torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def five_of_twelve(sample) -> SO3ForceFieldRegressor:
    """5 inducing frames of 12 training frames, fixed λ's."""
    return _fit(SO3ForceFieldRegressor(inducing_frames=5, **LAMBDAS, **PARAMS), sample)


def _joint_rows(kernel, query, references) -> np.ndarray:
    """[Θ, −∂Θ/∂r'; −∂Θ/∂r, ∂²Θ/∂r∂r'] of one query molecule against the references, from
    :func:`derivative_rows` (one unsymmetric call, not the joint kernel's assembly)."""
    rows = derivative_rows(kernel, query, references)
    return np.vstack([np.concatenate([rows.theta, -rows.d_ref]), np.hstack([-rows.d_query, rows.mixed])])


def _system(kernel, molecules, references) -> np.ndarray:
    """The joint covariance rows of ``molecules`` (energies first, then forces) against the
    functions of ``references`` (energies first, then forces)."""
    blocks = [_joint_rows(kernel, m, references) for m in molecules]
    return np.vstack([b[:1] for b in blocks] + [b[1:] for b in blocks])


def test_the_fit_is_the_projected_process_solve_of_brute_force_covariances(five_of_twelve, sample):
    """The covariances of the 12 training frames with the 5 inducing frames' functions
    (m + 3Σn = 140 columns) and among the latter built frame by frame from
    :func:`derivative_rows`, and the projected-process weights solved here by numpy:
    w = R (Bᵀ Λ⁻¹ B + I)⁻¹ Bᵀ Λ⁻¹ y with B = K_nm R, R = U_r s_r^{-1/2} from K_mm's
    eigendecomposition (the normal equations, which the estimator never forms; it takes QR and
    SVD factors). K_mm is singular by translation invariance: Σ_a ∂Θ/∂r'_a = 0, so each
    inducing frame's three rigid shifts are null directions, 15 here, at ≲ 1e-18 of s_max
    against ≥ 1e-7 for the others; both solves drop them (the cut 1e-10 · s_max). The same
    weights and the same energies and forces of unseen frames, to 1e-8 relative (the
    condition of Bᵀ Λ⁻¹ B + I with λ ≈ 1e-5 of the diagonal is ≲ 1e6)."""
    model = five_of_twelve
    mols, e, f = sample
    train = [mols[i] for i in TRAIN]
    inducing = [train[i] for i in model.inducing_frame_rows_]
    K_nm = _system(model.kernel_, train, inducing)
    K_mm = _system(model.kernel_, inducing, inducing)
    s, U = np.linalg.eigh(0.5 * (K_mm + K_mm.T))
    keep = s > 1e-10 * s[-1]
    assert K_mm.shape == (140, 140) and model.n_inducing_ == 140
    assert (~keep).sum() == 15 == 140 - model.rank_ and np.abs(s[~keep]).max() < 1e-15 * s[-1] < s[keep].min() * 1e-7
    y = np.concatenate([e[TRAIN] - e[TRAIN].mean(), np.concatenate([f[i].reshape(-1) for i in TRAIN])])
    lam = np.where(np.arange(len(y)) < len(TRAIN), LAMBDAS["reg_energy"], LAMBDAS["reg_force"])
    R = U[:, keep] / np.sqrt(s[keep])
    B = K_nm @ R
    w = R @ np.linalg.solve(B.T @ (B / lam[:, None]) + np.eye(B.shape[1]), B.T @ (y / lam))
    fitted = np.concatenate([model.energy_coef_, model.force_coef_])
    np.testing.assert_allclose(fitted, w, rtol=0, atol=1e-8 * np.abs(w).max())
    tests = [mols[i] for i in (50, 61, 77)]
    expected = _system(model.kernel_, tests, inducing) @ w
    energies, forces = model.predict_forces(tests, return_energy=True)
    predicted = np.concatenate([energies - e[TRAIN].mean(), np.concatenate([g.reshape(-1) for g in forces])])
    np.testing.assert_allclose(predicted, expected, rtol=0, atol=1e-8 * np.abs(expected).max())
    np.testing.assert_allclose(model.predict(tests), energies, rtol=0, atol=1e-10)


def test_with_every_frame_inducing_it_is_the_exact_model(sample):
    """m = N: the projected-process solve of the joint kernel is kernel ridge on it, so the
    coefficients are the exact model's α (to the rank cut and the solvers' rounding: the
    exact model's Cholesky and the sparse SVD differ by cond·ε, cond ≲ 1e6 here), and with
    λ's chosen by grouped leave-one-out both choose the same λ's (the same hat matrix, the
    same grid and the same mean diagonals); the local search over ratios chooses them too."""
    train = TRAIN[:8]
    exact = _fit(SO3ForceFieldRegressor(**LAMBDAS, **PARAMS), sample, train)
    frames = _fit(SO3ForceFieldRegressor(inducing_frames=8, **LAMBDAS, **PARAMS), sample, train)
    assert frames.inducing_frame_rows_.tolist() == list(range(8)) and exact.inducing_frame_rows_ is None
    for a, b in ((exact.energy_coef_, frames.energy_coef_), (exact.force_coef_, frames.force_coef_)):
        np.testing.assert_allclose(b, a, rtol=0, atol=1e-6 * np.abs(a).max())
    exact_cv = _fit(SO3ForceFieldRegressor(**PARAMS), sample, train)
    frames_cv = _fit(SO3ForceFieldRegressor(inducing_frames=8, **PARAMS), sample, train)
    assert frames_cv.reg_energy_ == pytest.approx(exact_cv.reg_energy_, rel=1e-6)
    assert frames_cv.reg_force_ == pytest.approx(exact_cv.reg_force_, rel=1e-6)
    assert frames_cv.cv_score_ == pytest.approx(exact_cv.cv_score_, rel=1e-4)
    # the ratio climb (noise_search="local") ends at the same grid point here, from the middle ratio
    local_cv = _fit(SO3ForceFieldRegressor(inducing_frames=8, noise_search="local", **PARAMS), sample, train)
    assert (local_cv.reg_energy_, local_cv.reg_force_, local_cv.cv_score_) == \
        (frames_cv.reg_energy_, frames_cv.reg_force_, frames_cv.cv_score_)
    # one factorisation per ratio with a ρ above the floor: all of them for the grid, fewer for
    # the climb; none with λ's given
    scored = sum(bool(usable_scales(q, PARAMS["psd_rtol"])) for q in RATIO_GRID)
    assert frames_cv.noise_factorisations_ == exact_cv.noise_factorisations_ == scored > local_cv.noise_factorisations_ >= 3
    assert frames.noise_factorisations_ is None


def test_frames_are_the_farthest_points_of_the_summed_amplitudes(sample):
    """The choice done by hand in numpy: per molecule and element (H, C, O), the rotation-
    invariant amplitudes ‖f̂^l_c‖ of its atoms' feature maps summed; farthest-point sampling
    from the largest norm by the squared Euclidean distance to the nearest chosen. A rotated
    and atom-permuted copy of the frames is chosen alike; ``random`` is a seeded sample;
    m ≥ n takes every molecule."""
    mols = sample[0][:30]
    model = SO3ForceFieldRegressor(**PARAMS)
    feats = model.recipe().environments(mols)
    coeffs = feats.coeffs.numpy()
    L = feats.config.band_limit
    amplitudes = np.stack([np.sqrt((coeffs[..., l * l:(l + 1) ** 2] ** 2).sum(-1)) for l in range(L)], -1).reshape(len(coeffs), -1)
    numbers, owner = feats.centre_numbers.numpy(), feats.molecule_index.numpy()
    d = np.stack([np.concatenate([amplitudes[(owner == i) & (numbers == z)].sum(0) for z in (1, 6, 8)]) for i in range(30)])
    chosen = [int(np.argmax((d**2).sum(1)))]
    nearest = ((d - d[chosen[0]]) ** 2).sum(1)
    for _ in range(6):
        nearest[chosen] = -1
        chosen.append(int(np.argmax(nearest)))
        nearest = np.minimum(nearest, ((d - d[chosen[-1]]) ** 2).sum(1))
    assert inducing_molecules(feats, 7).tolist() == sorted(chosen)

    rotation = np.linalg.qr(np.random.default_rng(3).normal(size=(3, 3)))[0]
    moved = [type(m)(m.numbers[::-1].copy(), (m.positions @ rotation.T)[::-1].copy()) for m in mols]
    assert inducing_molecules(model.recipe().environments(moved), 7).tolist() == sorted(chosen)

    random = inducing_molecules(feats, 7, method="random", seed=4)
    assert random.tolist() == sorted(np.random.default_rng(4).choice(30, 7, replace=False).tolist())
    assert inducing_molecules(feats, 50).tolist() == list(range(30))
    with pytest.raises(InputError, match="inducing_frames"):
        inducing_molecules(feats, 0)
    with pytest.raises(InputError, match="inducing_selection"):
        inducing_molecules(feats, 3, method="kmeans")


def test_a_saved_frames_model_loads_and_predicts_the_same(five_of_twelve, sample, tmp_path):
    model = five_of_twelve
    tests = [sample[0][i] for i in (2, 90)]
    path = model.save(tmp_path / "frames.molntk.npz")
    loaded = SO3ForceFieldRegressor.load(path)
    assert loaded.get_params() == model.get_params() and not loaded.sparse_
    assert np.array_equal(loaded.inducing_frame_rows_, model.inducing_frame_rows_)
    assert (loaded.rank_, loaded.n_inducing_) == (model.rank_, model.n_inducing_)
    assert loaded.noise_factorisations_ == model.noise_factorisations_
    assert_same_energies_and_forces(model, loaded, tests)
    moved = with_array(path, tmp_path / "moved.npz", "inducing_frame_rows", lambda rows: rows + 12)
    with pytest.raises(ModelFileError, match="moved.npz.*inducing_frame_rows"):
        SO3ForceFieldRegressor.load(moved)


def test_a_frames_fit_reads_its_kernel_cache(five_of_twelve, sample, tmp_path, monkeypatch):
    """With ``kernel_cache`` the frames fit stores K_nm's rows; a second fit of the same frames
    computes no row and gives the same model (within rounding of the BLAS: the cached rows are the
    stored float64 values, the first fit's may differ by an ulp from a fit without the cache)."""
    from molntk.molecular import derivative_kernels

    mols, e, f = sample
    args = ([mols[i] for i in TRAIN], e[TRAIN], [f[i] for i in TRAIN])
    first = SO3ForceFieldRegressor(inducing_frames=5, **LAMBDAS, **PARAMS).fit(*args, kernel_cache=tmp_path)
    assert list(tmp_path.glob("*/*.npz"))
    np.testing.assert_allclose(first.force_coef_, five_of_twelve.force_coef_, rtol=1e-8,
                               atol=1e-8 * np.abs(five_of_twelve.force_coef_).max())
    monkeypatch.setattr(derivative_kernels, "closed_form_rows", lambda *a, **k: pytest.fail("row computed"))
    again = SO3ForceFieldRegressor(inducing_frames=5, **LAMBDAS, **PARAMS).fit(*args, kernel_cache=tmp_path)
    assert np.array_equal(again.energy_coef_, first.energy_coef_) and np.array_equal(again.force_coef_, first.force_coef_)


def test_bad_frame_settings_name_the_argument(sample, monkeypatch):
    mols, e, f = sample
    args = (mols[:4], e[:4], f[:4])
    for bad in (0, 2.5, True):
        with pytest.raises(InputError, match="inducing_frames"):
            SO3ForceFieldRegressor(inducing_frames=bad, **PARAMS).fit(*args)
    with pytest.raises(InputError, match="inducing_frames.*not both"):
        SO3ForceFieldRegressor(inducing_frames=2, inducing=10, **PARAMS).fit(*args)
    with pytest.raises(InputError, match="inducing_selection"):
        SO3ForceFieldRegressor(inducing_frames=2, inducing_selection="kmeans", **PARAMS).fit(*args)
    # memory: 1,000 aspirin frames (64,000 rows; 500 scored by the LOO: 32,000) against 250
    # (16,000 functions): the search's QR factors alone (64,000 × 16,000) are 7.6 GiB
    need = sparse_joint_host_bytes(64_000, 16_000, 1_000, 32_000)
    assert need > 64_000 * 16_000 * 8
    with pytest.raises(InputError, match=f"inducing_frames.*64,000 joint rows.*16,000 inducing functions.*{need / 2**30:.1f} GiB"):
        force_field.check_frames_memory(64_000, 16_000, 1_000, 32_000, available=16 * 2**30)
    monkeypatch.setattr(force_field, "available_ram_bytes", lambda: 10**5)
    monkeypatch.setattr(force_field, "joint_kernel", lambda *a, **k: pytest.fail("kernel computed"))
    with pytest.raises(InputError, match="inducing_frames.*112 joint rows against 56"):  # 4 × 28 rows, 2 × 28
        SO3ForceFieldRegressor(inducing_frames=2, **PARAMS).fit(*args)


def test_a_local_search_started_at_a_previous_choice_makes_fewer_factorisations(sample):
    """``noise_ratio_start`` = a fitted model's λ_F/λ_E starts the ratio climb at that grid ratio:
    a refit (here on the same frames, so the same criterion) scores it and its two neighbours
    only, 3 factorisations, and keeps the same λ's and criterion; started from the grid's middle
    it needed more."""
    first = _fit(SO3ForceFieldRegressor(inducing_frames=8, noise_search="local", **PARAMS), sample, TRAIN[:8])
    again = _fit(SO3ForceFieldRegressor(inducing_frames=8, noise_search="local",
                                        noise_ratio_start=first.reg_force_ / first.reg_energy_, **PARAMS), sample, TRAIN[:8])
    assert (again.reg_energy_, again.reg_force_, again.cv_score_) == (first.reg_energy_, first.reg_force_, first.cv_score_)
    assert again.noise_factorisations_ == 3 < first.noise_factorisations_


@pytest.mark.parametrize("value, other, message", [
    (0.0, {}, "ratio"), (-1.0, {}, "ratio"), (float("nan"), {}, "ratio"), (True, {}, "ratio"), ("10", {}, "ratio"),
    (10.0, {"noise_search": "grid"}, "local search"), (10.0, {"inducing_frames": None}, "exact model"),
])
def test_noise_ratio_start_is_checked(sample, value, other, message):
    settings = {"inducing_frames": 8, "noise_search": "local", **other}
    with pytest.raises(InputError, match="noise_ratio_start") as err:
        _fit(SO3ForceFieldRegressor(noise_ratio_start=value, **settings, **PARAMS), sample, TRAIN[:8])
    assert message in str(err.value)
