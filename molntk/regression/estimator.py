"""``KernelRegressor``: NTK or NNGP regression on precomputed kernels, with λ chosen by CV.

A scikit-learn estimator in the manner of ``KernelRidge(kernel="precomputed")``: ``fit``
takes the train kernel K_train (n, n) and targets Y ((n,) or (n, k)), ``predict`` the
test-train kernel (m, n), and the estimator is tagged ``pairwise``, so that
:class:`~sklearn.model_selection.GridSearchCV` slices a precomputed kernel by rows and
columns. ``fit`` sees only training data: it standardises Y (optional) to Z and stores dual
weights W, so that ``predict`` is one product K(x, X) W (O(m n k)). How W is computed is the
``solver``:

- ``"eigh"`` (default): K_train is eigendecomposed once; λ is chosen on the training data
  when ``reg="cv"`` (:func:`~molntk.regression.selection.select_regularizer`), W = M_t Z at
  any training time t, and NTK-GP / NNGP variances come from the same eigenvectors.
- ``"cholesky"``: W = (K + λI)⁻¹ Z by the Cholesky factor of K + λI
  (:func:`~molntk.regression.solvers.cholesky_factor`): the exact solve for large n, n³/3
  flops (an order of magnitude fewer than an eigendecomposition) and one n² factor;
  NNGP variances from the factor.
- ``"pcg"``: W = (K + λI)⁻¹ Z by preconditioned conjugate gradients
  (:func:`~molntk.regression.solvers.pcg_solve`), O(n² k) per iteration and no n² memory
  besides K_train, which may be an ``np.memmap`` read in place; no variances.

The large-N solvers take a numeric λ > 0 (chosen by CV with ``"eigh"`` where it fits, e.g. on
a subset) and t = ∞ only. They scan K_train for NaN and inf (one pass, in row blocks) but
take its symmetry on trust: comparing K with Kᵀ block by block would read a kernel on disk
column-wise, many times over.

``method="ntk"``: K_train is the NTK Θ(X, X); the mean is μ_t (:mod:`molntk.regression.ntk`).
``method="nngp"``: K_train is the NNGP kernel; the mean is the GP posterior mean with noise λ.

Standard deviations (``return_std``) come in two ``variance`` kinds:

- ``"gp"`` (default): the GP whose posterior mean the prediction is (t = ∞): prior σ_f² K
  for the kernel K of K_train (Θ for ``"ntk"``: the NTK-GP posterior of He et al. 2020,
  "Bayesian deep ensembles via the NTK"), noise σ_f² λ; Var[f(x)] = σ_f² (k** − k*ᵀ(K + λI)⁻¹k*)
  with ``k_test_diag`` = k** the test self-kernel diagonal of K_train's kernel
  (``"eigh"``; ``"cholesky"`` for ``method="nngp"``);
- ``"ntk-gp"`` (``method="ntk"``, ``"eigh"``): σ_f² Σ_t(x, x), the variance of the trained
  network over random initialisations (Lee et al. 2019), which also needs the NNGP kernels:
  ``K_nngp_train`` at ``fit``, ``K_nngp_test_train`` and the NNGP ``k_test_diag`` at ``predict``.

The amplitude σ_f² is fitted on the training data (``amplitude``: leave-one-out predictive
likelihood or marginal likelihood, closed forms at t = ∞, :mod:`molntk.regression.calibration`;
``"none"``: σ_f² = 1). ``predict(..., std_of="y")`` gives the std of an observation y
(Var[f] + σ_f² λ; what test errors are compared with), ``std_of="f"`` that of the latent f.

Outputs are numpy float64 arrays in the units of Y, shaped like Y ((m,) or (m, k)).
Standard deviations are scaled per target by the standardisation σ_j.
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import KW_ONLY, dataclass, replace

import numpy as np
import scipy.linalg
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.utils import Tags

from molntk.errors import InputError
from molntk.regression import validation
from molntk.regression.calibration import (
    AMPLITUDES,
    ROUNDING,
    UncalibratedWarning,
    cholesky_inverse_diagonal,
    eig_targets,
    eigen_amplitude,
    fit_amplitude,
    inverse_diagonal,
    refit_loo_residuals,
)
from molntk.regression.gp import nngp_variance
from molntk.regression.ntk import ntk_gp_variance, ntk_weights
from molntk.regression.scaling import TargetScaler
from molntk.regression.selection import CRITERIA, CVResult, check_loss, select_regularizer
from molntk.regression.solvers import PRECONDITIONERS, Solution, cholesky_factor, pcg_solve, square_kernel
from molntk.regression.spectral import (
    ILL_CONDITIONED,
    PSD_RTOL,
    Eigensystem,
    IllConditionedWarning,
    eigensystem,
    warn_if_ill_conditioned,
)
from molntk.utils.checks import integer

METHODS = ("ntk", "nngp")
SOLVERS = ("eigh", "cholesky", "pcg")
#: Kinds of predictive variance (module docstring) and of standard deviation (of y or of f).
VARIANCES = ("gp", "ntk-gp")
STD_OF = ("y", "f")
#: Kernel entries (rows × n) that the large-N solvers convert and check at once: 64 MiB of
#: float64, so that a test kernel on disk (``np.memmap``) is never held in memory whole.
BLOCK_ENTRIES = 1 << 23


class PCGConvergenceWarning(UserWarning):
    """PCG stopped at ``pcg_max_iter`` above ``pcg_tol``: W solves (K + λI) W = Z only to the
    relative residual reached, and is accurate to about cond(K + λI) times it."""


@dataclass(eq=False, repr=False)
class KernelRegressor(RegressorMixin, BaseEstimator):
    """Kernel regression on a precomputed NTK or NNGP kernel (a scikit-learn estimator).

    ``method``: ``"ntk"`` (mean μ_t of the trained infinite network) or ``"nngp"`` (GP
    posterior). ``t``, ``lr``: training time and learning rate of the NTK gradient flow
    (``t = inf``: converged; NTK only). ``reg``: λ ≥ 0, or ``"cv"`` to choose it on the
    training data by ``cv`` ∈ {"loo", "kfold", "gcv"} over ``relative_grid`` (× mean(diag
    K_train); default 1e-10 … 1), with ``n_folds`` folds dealt by ``seed`` for k-fold,
    scoring the residuals by ``cv_loss`` ("squared": mean r², "absolute": mean |r|, for LOO
    and k-fold; :mod:`molntk.regression.selection`).
    ``standardize``: fit on (Y - mean) / std per target. ``psd_rtol``: eigenvalue clipping
    tolerance (:mod:`molntk.regression.spectral`). ``variance``: ``"gp"`` or ``"ntk-gp"``,
    ``amplitude``: ``"loo"``, ``"ml"`` or ``"none"`` (module docstring).

    ``solver`` computes the dual weights W of the standardised targets Z (module docstring):

    - ``"eigh"``: K = V diag(s) Vᵀ, W = V diag((1 - e^{-η (s+λ) t}) / (s + λ)) Vᵀ Z;
    - ``"cholesky"``: K + λI = L Lᵀ, W = L⁻ᵀ L⁻¹ Z; for ``method="nngp"`` the variance
      k(x, x) - ‖L⁻¹ k_x‖² = k(x, x) - k_xᵀ (K + λI)⁻¹ k_x;
    - ``"pcg"``: W with ‖Z_j - (K + λI) W_j‖ ≤ ``pcg_tol`` ‖Z_j‖ for every target j, by
      conjugate gradients preconditioned with ``preconditioner`` (``"pivoted-cholesky"``:
      M = L_r L_rᵀ + λI of rank r = ``preconditioner_rank``; ``"jacobi"``: M = diag K + λI),
      at most ``pcg_max_iter`` iterations (:class:`PCGConvergenceWarning` if not reached).

    ``"cholesky"`` and ``"pcg"`` need a numeric λ > 0 and t = ∞; K_train may be an
    ``np.memmap`` of float64, which ``"pcg"`` reads in place (``"cholesky"`` copies it into
    its factor).

    The parameters are stored as given; :meth:`check_params` (called first by ``fit``)
    raises :class:`InputError` naming the first one out of range.

    Fitted attributes: ``solver_`` (the solver of the fitted state), ``reg_`` (λ used),
    ``reg_relative_`` (λ / mean(diag K_train)), ``cv_result_`` (the
    :class:`~molntk.regression.selection.CVResult` curve, or None), ``condition_number_`` of
    K_train + λI (``"eigh"``: cond₂ from the eigenvalues; ``"cholesky"``: LAPACK's estimate
    of cond₁, which lies between cond₂ and n · cond₂; ``"pcg"``: None),
    ``eigenvalues_clipped_`` and ``min_eigenvalue_`` (before clipping; None unless
    ``"eigh"``), ``amplitude_`` (σ_f² of the standardised targets, (k,); None at finite t,
    where no closed form holds, and for ``"pcg"`` and NTK ``"cholesky"`` fits, which have no
    variance), ``target_mean_``, ``target_scale_`` ((k,) arrays), ``n_train_``,
    ``n_targets_``, ``fit_seconds_``, and ``n_iter_`` and ``pcg_residual_`` (largest final
    relative residual; None unless ``"pcg"``). :meth:`load_fitted_arrays` sets ``solver_``,
    ``reg_``, ``amplitude_``, ``target_mean_``, ``target_scale_``, ``n_train_`` and ``n_targets_``.
    """

    method: str = "ntk"
    _: KW_ONLY
    t: float = math.inf
    lr: float = 1.0
    reg: float | str = "cv"
    cv: str = "loo"
    cv_loss: str = "squared"
    standardize: bool = True
    relative_grid: Sequence[float] | None = None
    n_folds: int = 5
    seed: int = 0
    psd_rtol: float = PSD_RTOL
    solver: str = "eigh"
    pcg_tol: float = 1e-10
    pcg_max_iter: int = 1000
    preconditioner: str = "pivoted-cholesky"
    preconditioner_rank: int = 200
    variance: str = "gp"
    amplitude: str = "loo"

    def __sklearn_tags__(self) -> Tags:
        """scikit-learn's tags with ``input_tags.pairwise``: X is a kernel matrix (its columns
        are training points too) and multi-output targets (n, k) are accepted."""
        tags = super().__sklearn_tags__()
        tags.input_tags.pairwise = True
        tags.target_tags.multi_output = True
        return tags

    def check_params(self) -> None:
        """Raise :class:`InputError` naming the first parameter out of range."""
        validation.choice(self.method, "method", METHODS)
        t = validation.nonnegative(self.t, "t", allow_inf=True)
        if self.method == "nngp" and not math.isinf(t):
            raise InputError("t", "a training time applies to method='ntk' only; the NNGP posterior has none")
        validation.positive(self.lr, "lr")
        if self.reg != "cv":
            validation.nonnegative(self.reg, "reg")
        if validation.choice(self.solver, "solver", SOLVERS) != "eigh":
            self._check_large_n_settings()
        check_loss(self.cv_loss, validation.choice(self.cv, "cv", CRITERIA))
        if self.reg == "cv" and self.cv == "loo" and not math.isinf(t):
            raise InputError("cv", "the closed-form LOO is exact only at t = inf; use 'kfold' or 'gcv' at finite t")
        integer(self.n_folds, "n_folds", minimum=2)
        integer(self.seed, "seed", minimum=0)
        validation.positive(self.psd_rtol, "psd_rtol")
        validation.positive(self.pcg_tol, "pcg_tol")
        integer(self.pcg_max_iter, "pcg_max_iter", minimum=1)
        validation.choice(self.preconditioner, "preconditioner", PRECONDITIONERS)
        integer(self.preconditioner_rank, "preconditioner_rank", minimum=1)
        validation.choice(self.amplitude, "amplitude", AMPLITUDES)
        if validation.choice(self.variance, "variance", VARIANCES) == "ntk-gp" and self.method != "ntk":
            raise InputError("variance", "'ntk-gp' is the variance of a trained network's NTK; it needs method='ntk'")

    def _check_large_n_settings(self) -> None:
        """``"cholesky"`` and ``"pcg"`` compute (K + λI)⁻¹ Z for one given λ > 0 only."""
        if self.reg == "cv":
            raise InputError(
                "reg",
                f"solver={self.solver!r} needs a numeric λ > 0: choose λ by cross-validation with "
                "solver='eigh' at a size where the eigendecomposition fits (e.g. on a subset of the "
                "training data) and pass it as reg",
            )
        if self.reg == 0:
            raise InputError("reg", f"solver={self.solver!r} needs λ > 0, got 0")
        if not math.isinf(self.t):
            raise InputError(
                "t", f"solver={self.solver!r} gives the converged weights (t = inf) only; a finite t needs solver='eigh'"
            )

    def fit(self, K_train: object, Y: object, *, K_nngp_train: object | None = None) -> KernelRegressor:
        """Fit on the train kernel K_train (n, n) and targets Y ((n,) or (n, k)).

        ``K_nngp_train`` (n, n): the NNGP train kernel, needed by ``variance="ntk-gp"`` for
        ``predict(..., return_std=True)`` (``solver="eigh"`` only).
        """
        self.check_params()
        if self.solver == "eigh":
            return self._fit_eigh(K_train, Y, K_nngp_train)
        return self._fit_large_n(K_train, Y, K_nngp_train)

    def _fit_eigh(self, K_train: object, Y: object, K_nngp_train: object | None) -> KernelRegressor:
        """``fit`` for ``"eigh"``: W = M_t Z from the eigendecomposition, λ by CV if asked."""
        start = time.perf_counter()
        eig = eigensystem(K_train, "K_train", psd_rtol=self.psd_rtol)
        Y2, was_1d = validation.targets(Y, "Y", rows=eig.n)
        scaler = TargetScaler.fit(Y2, enabled=bool(self.standardize))
        Z = scaler.transform(Y2)
        t, lr = float(self.t), float(self.lr)
        cv_result = None
        if self.reg == "cv":
            cv_result = select_regularizer(
                eig, Z, criterion=self.cv, relative_grid=self.relative_grid, n_folds=self.n_folds, seed=self.seed,
                t=t, lr=lr, K_train=K_train, psd_rtol=self.psd_rtol, loss=self.cv_loss,
            )
            reg = cv_result.best_reg
        else:
            reg = float(self.reg)
        cond = warn_if_ill_conditioned(eig, reg)
        nngp_rotated = None
        if K_nngp_train is not None:
            if self.variance != "ntk-gp":
                raise InputError("K_nngp_train", f"is used by variance='ntk-gp' only (this regressor has variance={self.variance!r})")
            nngp_train = validation.symmetric_kernel(K_nngp_train, "K_nngp_train")
            if nngp_train.shape != (eig.n, eig.n):
                raise InputError("K_nngp_train", f"must be {eig.n} x {eig.n} like K_train, got shape {nngp_train.shape}")
            nngp_rotated = eig.rotate(nngp_train)
        weights = ntk_weights(eig, Z, t=t, lr=lr, reg=reg)
        amplitude = eigen_amplitude(self.amplitude, eig, weights, reg) if math.isinf(t) else None
        self._set_state(_Fitted("eigh", weights, scaler, reg, was_1d, eig=eig, nngp_rotated=nngp_rotated,
                                amplitude=amplitude))
        self._set_fit_results(eig.mean_diag, cv_result, cond, eig.n_clipped, eig.min_raw, start)
        return self

    def _fit_large_n(self, K_train: object, Y: object, K_nngp_train: object | None) -> KernelRegressor:
        """``fit`` for ``"cholesky"`` and ``"pcg"``: W = (K + λI)⁻¹ Z for the given λ; K_train is
        only read (``"pcg"`` uses a float64 ndarray or ``np.memmap`` in place, without a copy)."""
        start = time.perf_counter()
        if K_nngp_train is not None:
            raise InputError("K_nngp_train", f"NTK-GP variances need solver='eigh'; solver={self.solver!r} has none")
        K = square_kernel(K_train, "K_train")
        _check_finite(K, "K_train")
        Y2, was_1d = validation.targets(Y, "Y", rows=K.shape[0])
        scaler = TargetScaler.fit(Y2, enabled=bool(self.standardize))
        Z = scaler.transform(Y2)
        reg = float(self.reg)
        if self.solver == "cholesky":
            weights, factor, cond = self._solve_cholesky(K, Z, reg)
            amplitude = None
            if factor is not None:
                diagonal = cholesky_inverse_diagonal(factor) if self.amplitude == "loo" else np.ones(K.shape[0])
                amplitude = fit_amplitude(self.amplitude, weights, Z, diagonal)
            self._set_state(_Fitted("cholesky", weights, scaler, reg, was_1d, cholesky=factor, amplitude=amplitude))
        else:
            solution = self._solve_pcg(K, Z, reg)
            self._set_state(_Fitted("pcg", solution.x, scaler, reg, was_1d))
            self.n_iter_, self.pcg_residual_ = solution.iterations, solution.residual
            cond = None
        self._set_fit_results(float(np.mean(np.diag(K))), None, cond, None, None, start)
        return self

    def _set_state(self, fitted: _Fitted) -> None:
        """Keep ``fitted`` for ``predict`` and set the attributes it determines: ``solver_``,
        ``reg_``, ``target_mean_``, ``target_scale_``, ``n_train_``, ``n_targets_``; the
        PCG attributes ``n_iter_`` and ``pcg_residual_`` start as None."""
        self._fitted = fitted
        self.solver_, self.reg_, self.amplitude_ = fitted.solver, fitted.reg, fitted.amplitude
        self.target_mean_, self.target_scale_ = fitted.scaler.mean, fitted.scaler.scale
        self.n_train_, self.n_targets_ = fitted.weights.shape
        self.n_iter_ = self.pcg_residual_ = None

    def _set_fit_results(
        self,
        mean_diag: float,
        cv_result: CVResult | None,
        condition_number: float | None,
        eigenvalues_clipped: int | None,
        min_eigenvalue: float | None,
        start: float,
    ) -> None:
        """The fitted attributes that only ``fit`` knows: ``reg_relative_`` = λ / mean(diag
        K_train) (NaN when that mean is ≤ 0), ``cv_result_``, ``condition_number_``,
        ``eigenvalues_clipped_``, ``min_eigenvalue_``, ``fit_seconds_`` (since ``start``)."""
        self.reg_relative_ = self.reg_ / mean_diag if mean_diag > 0 else math.nan
        self.cv_result_ = cv_result
        self.condition_number_ = condition_number
        self.eigenvalues_clipped_ = eigenvalues_clipped
        self.min_eigenvalue_ = min_eigenvalue
        self.fit_seconds_ = time.perf_counter() - start

    def _solve_cholesky(self, K: np.ndarray, Z: np.ndarray, reg: float) -> tuple[np.ndarray, np.ndarray | None, float]:
        """W = L⁻ᵀ L⁻¹ Z with K + λI = L Lᵀ; the factor L, kept for ``method="nngp"`` only;
        and LAPACK's estimate of cond₁(K + λI) (warned about above
        :data:`~molntk.regression.spectral.ILL_CONDITIONED`).

        The NNGP variance k(x, x) - ‖L⁻¹ k_x‖² needs L at ``predict``, which gets no K_train to
        refactor (and refactoring would cost n³/3 per call), so L is kept, n² memory the fit
        needed anyway. The NTK has no variance without an eigendecomposition, so L is dropped.
        """
        factor = cholesky_factor(K, reg)
        weights = scipy.linalg.cho_solve((factor, True), Z, check_finite=False)
        cond = _cholesky_condition(K, factor, reg)
        if cond > ILL_CONDITIONED:
            warnings.warn(
                f"K_train + λI is nearly singular (λ = {reg:.3g}, estimated condition number {cond:.3g} > "
                f"{ILL_CONDITIONED:.0e}); use a larger regulariser",
                IllConditionedWarning,
                stacklevel=4,
            )
        return weights, factor if self.method == "nngp" else None, cond

    def _solve_pcg(self, K: np.ndarray, Z: np.ndarray, reg: float) -> Solution:
        """W from :func:`~molntk.regression.solvers.pcg_solve` (with its iterations and final
        residual); warns with :class:`PCGConvergenceWarning` when the residual stays above
        ``pcg_tol``."""
        solution = pcg_solve(
            K, Z, reg, preconditioner=self.preconditioner, rank=self.preconditioner_rank, tol=self.pcg_tol,
            max_iter=self.pcg_max_iter,
        )
        if solution.residual > self.pcg_tol:
            warnings.warn(
                f"PCG ({self.preconditioner} preconditioner) stopped after {solution.iterations} iterations "
                f"(pcg_max_iter) at relative residual {solution.residual:.3g} > pcg_tol = {self.pcg_tol:g}; "
                "W is accurate only to about cond(K + λI) times that residual: raise pcg_max_iter or "
                "preconditioner_rank, or use a larger reg",
                PCGConvergenceWarning,
                stacklevel=4,
            )
        return solution

    def refit_loo_amplitude(self, baseline_shifts: object, reference: float) -> np.ndarray:
        """Refit ``amplitude_`` by leave-one-out over the whole model when the targets Y given to
        ``fit`` were y − b with a baseline b fitted on the same points (a dressed-atom model):
        ``baseline_shifts`` (n, n) or (n, n, k), row i = b̂ − b^(i), the change of the baseline at
        every training point when it is refitted without point i. With the standardisation mean
        refitted too, Z^(i) = (Y + Δ_i − m^(i)) / σ and r_i = [A⁻¹ Z^(i)]_i / d_i
        (:func:`~molntk.regression.calibration.refit_loo_residuals`); σ_f² = (1/n) Σ_i r_i² d_i.

        ``reference``: the magnitude of y (e.g. max |y|); when every LOO residual is below
        1e-9 of it (rounding: nothing in the data measures an error, e.g. copies of one
        molecule) σ_f² = inf with an :class:`UncalibratedWarning`. Returns the LOO residuals in
        the units of Y, shaped like Y. ``"eigh"`` at t = ∞ with ``amplitude="loo"`` only.
        """
        fitted = getattr(self, "_fitted", None)
        if fitted is None or fitted.eig is None or fitted.amplitude is None or self.amplitude != "loo":
            raise InputError("refit_loo_amplitude", "needs a solver='eigh' fit at t = inf with amplitude='loo'")
        n, k = fitted.weights.shape
        shifts = validation.as_float64(baseline_shifts, "baseline_shifts").reshape(n, n, -1)
        if shifts.shape != (n, n, k):
            raise InputError("baseline_shifts", f"must be ({n}, {n}) or ({n}, {n}, {k}), got {np.shape(baseline_shifts)}")
        mean, scale = fitted.scaler.mean, fitted.scaler.scale
        Z = eig_targets(fitted.eig, fitted.weights, fitted.reg)
        if n > 1 and np.any(mean != 0):  # the standardisation mean refitted without point i
            Y = mean + scale * Z
            left_out_means = (n * mean - Y + shifts.sum(axis=1) - np.einsum("iik->ik", shifts)) / (n - 1)
            shifts = shifts - (left_out_means - mean)[:, None, :]
        residuals = refit_loo_residuals(fitted.eig, fitted.reg, fitted.weights, shifts / scale) * scale
        if np.all(np.abs(residuals) <= ROUNDING * abs(float(reference))):
            warnings.warn(
                "every leave-one-out residual of the training data is 0 to rounding (e.g. copies of one molecule): "
                "the data determine no error scale, so standard deviations are inf (unknown)",
                UncalibratedWarning,
                stacklevel=2,
            )
            amplitude = np.full(k, math.inf)
        else:
            d = inverse_diagonal(fitted.eig, fitted.reg)
            amplitude = np.mean((residuals / scale) ** 2 * d[:, None], axis=0)
        self._set_state(replace(fitted, amplitude=amplitude))
        return validation.restore(residuals, fitted.was_1d)

    def fitted_arrays(self) -> dict[str, np.ndarray]:
        """The fitted state as plain arrays (for model files that must not unpickle code).

        ``"eigh"`` (the original format, unchanged): float64 ``weights``, ``eig_values``,
        ``eig_vectors``, ``eig_mean_diag``, ``target_mean``, ``target_scale``, ``reg`` and
        ``was_1d`` (0-d), and ``nngp_rotated`` when NTK-GP variances were prepared.
        ``"cholesky"`` / ``"pcg"``: ``solver`` (a 0-d unicode string array, which
        ``np.load(allow_pickle=False)`` reads), ``weights``, ``target_mean``,
        ``target_scale``, ``reg``, ``was_1d``, and ``cholesky_factor`` (n, n; L in its lower
        triangle) when NNGP variances were kept. No ``solver`` key means ``"eigh"``. Both add
        ``amplitude`` ((k,) σ_f²) when fitted; files without it (older ones) get it recomputed
        from the eigensystem (``"eigh"``) or σ_f² = 1 (``"cholesky"``).
        """
        fitted = getattr(self, "_fitted", None)
        if fitted is None:
            raise InputError("KernelRegressor", "fitted_arrays called before fit")
        arrays = {"weights": fitted.weights}
        if fitted.eig is not None:
            arrays |= {
                "eig_values": fitted.eig.values,
                "eig_vectors": fitted.eig.vectors,
                "eig_mean_diag": np.asarray(fitted.eig.mean_diag),
            }
        arrays |= {
            "target_mean": fitted.scaler.mean,
            "target_scale": fitted.scaler.scale,
            "reg": np.asarray(fitted.reg),
            "was_1d": np.asarray(float(fitted.was_1d)),
        }
        if fitted.nngp_rotated is not None:
            arrays["nngp_rotated"] = fitted.nngp_rotated
        if fitted.solver != "eigh":
            arrays["solver"] = np.asarray(fitted.solver)
        if fitted.cholesky is not None:
            arrays["cholesky_factor"] = fitted.cholesky
        if fitted.amplitude is not None:
            arrays["amplitude"] = fitted.amplitude
        return arrays

    def load_fitted_arrays(self, arrays: dict[str, np.ndarray]) -> KernelRegressor:
        """Restore the state written by :meth:`fitted_arrays` (this regressor's settings are
        kept; ``predict`` follows the solver the arrays were fitted with)."""
        solver = validation.choice(str(arrays["solver"]) if "solver" in arrays else "eigh", "solver", SOLVERS)
        weights = np.asarray(arrays["weights"], dtype=np.float64)
        scaler = TargetScaler(np.asarray(arrays["target_mean"]), np.asarray(arrays["target_scale"]))
        state = _Fitted(solver, weights, scaler, float(arrays["reg"]), bool(float(arrays["was_1d"])))
        stored = arrays.get("amplitude")
        amplitude = None if stored is None else np.asarray(stored, dtype=np.float64).reshape(weights.shape[1])
        if solver != "eigh":
            factor = arrays.get("cholesky_factor")
            if factor is not None and amplitude is None:
                amplitude = np.ones(weights.shape[1])
            cholesky = None if factor is None else np.asarray(factor, dtype=np.float64)
            self._set_state(replace(state, cholesky=cholesky, amplitude=amplitude))
            return self
        eig = Eigensystem(
            values=np.asarray(arrays["eig_values"], dtype=np.float64),
            vectors=np.asarray(arrays["eig_vectors"], dtype=np.float64),
            mean_diag=float(arrays["eig_mean_diag"]),
            n_clipped=0,
            min_raw=float(np.min(arrays["eig_values"])),
        )
        nngp_rotated = np.asarray(arrays["nngp_rotated"]) if "nngp_rotated" in arrays else None
        if amplitude is None and math.isinf(self.t):
            amplitude = eigen_amplitude(self.amplitude, eig, weights, state.reg)
        self._set_state(replace(state, eig=eig, nngp_rotated=nngp_rotated, amplitude=amplitude))
        return self

    def predict(
        self,
        K_test_train: object,
        k_test_diag: object | None = None,
        return_std: bool = False,
        *,
        K_nngp_test_train: object | None = None,
        std_of: str = "y",
    ) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
        """Mean prediction for the m test points of K_test_train (m, n) (the kernel of
        ``method``); with ``return_std`` also the predictive standard deviation of an
        observation y (``std_of="y"``) or of the latent f (``"f"``) (module docstring).

        ``k_test_diag`` (m,): the test self-kernel k(x, x) (needed for the std): of K_train's
        kernel for ``variance="gp"``, of the NNGP for ``"ntk-gp"``. ``K_nngp_test_train``
        (m, n): NNGP test-train kernel (``"ntk-gp"`` only). For ``"cholesky"`` and ``"pcg"``
        K_test_train may be an ``np.memmap``: it is read in row blocks of
        :data:`BLOCK_ENTRIES` entries.
        """
        fitted = getattr(self, "_fitted", None)
        if fitted is None:
            raise InputError("KernelRegressor", "predict called before fit")
        if return_std:
            validation.choice(std_of, "std_of", STD_OF)
        if fitted.solver != "eigh":
            return self._predict_large_n(fitted, K_test_train, k_test_diag, return_std, std_of)
        cross = validation.matrix(K_test_train, "K_test_train", cols=fitted.eig.n)
        mean = validation.restore(fitted.scaler.inverse_transform(cross @ fitted.weights), fitted.was_1d)
        if not return_std:
            return mean
        amplitude = self._checked_amplitude(fitted)
        if k_test_diag is None:
            raise InputError("k_test_diag", "the test self-kernel diagonal k(x, x) is needed for return_std")
        prior = validation.vector(k_test_diag, "k_test_diag", length=cross.shape[0])
        if self.variance == "gp":
            variance = nngp_variance(fitted.eig, cross, prior, reg=fitted.reg)
        else:
            if fitted.nngp_rotated is None:
                raise InputError("K_nngp_train", "variance='ntk-gp' needs fit(..., K_nngp_train=...) for return_std")
            if K_nngp_test_train is None:
                raise InputError("K_nngp_test_train", "variance='ntk-gp' needs the NNGP test-train kernel for return_std")
            nngp_cross = validation.matrix(K_nngp_test_train, "K_nngp_test_train", rows=cross.shape[0], cols=fitted.eig.n)
            variance = ntk_gp_variance(
                fitted.eig,
                fitted.nngp_rotated,
                cross,
                nngp_cross,
                prior,
                t=float(self.t),
                lr=float(self.lr),
                reg=fitted.reg,
            )
        return mean, _scaled_std(fitted, variance, amplitude, std_of)

    def _checked_amplitude(self, fitted: _Fitted) -> np.ndarray:
        """σ_f² per target for ``return_std``; InputError naming ``amplitude`` at finite t,
        where neither closed form holds, unless ``amplitude="none"`` (σ_f² = 1)."""
        if fitted.amplitude is not None:
            return fitted.amplitude
        if self.amplitude == "none":
            return np.ones(fitted.weights.shape[1])
        raise InputError(
            "amplitude",
            f"amplitude={self.amplitude!r} is fitted in closed form at t = inf only; "
            "use amplitude='none' (σ_f² = 1) for a std at finite t",
        )

    def _predict_large_n(
        self, fitted: _Fitted, K_test_train: object, k_test_diag: object | None, return_std: bool, std_of: str
    ) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
        """``predict`` for ``"cholesky"`` / ``"pcg"``: mean K(x, X) W and, for the Cholesky
        factor kept by ``method="nngp"``, the NNGP std, one block of test rows at a time."""
        cross = _test_kernel(K_test_train, fitted.n)
        prior = self._large_n_prior(fitted, k_test_diag, cross.shape[0]) if return_std else None
        means, variances = [], []
        for rows in _row_blocks(cross.shape[0], fitted.n):
            block = validation.matrix(cross[rows], "K_test_train", cols=fitted.n)
            means.append(block @ fitted.weights)
            if prior is not None:
                variances.append(_cholesky_variance(fitted.cholesky, block, prior[rows]))
        mean = validation.restore(fitted.scaler.inverse_transform(np.concatenate(means)), fitted.was_1d)
        if prior is None:
            return mean
        return mean, _scaled_std(fitted, np.concatenate(variances), self._checked_amplitude(fitted), std_of)

    def _large_n_prior(self, fitted: _Fitted, k_test_diag: object | None, m: int) -> np.ndarray:
        """k(x, x) for the std of a ``"cholesky"`` / ``"pcg"`` fit; InputError naming ``solver``
        where that fit has no variance (NTK-GP: an eigendecomposition; PCG: n solves per point)."""
        if fitted.solver == "pcg":
            raise InputError(
                "solver",
                "solver='pcg' gives no variance (k_xᵀ (K + λI)⁻¹ k_x needs one more PCG solve per test "
                "point); use solver='cholesky' with method='nngp', or solver='eigh'",
            )
        if self.method == "ntk":
            raise InputError(
                "solver",
                "the NTK's variance needs the eigendecomposition of solver='eigh'; solver='cholesky' "
                "gives the NNGP variance only (method='nngp')",
            )
        if fitted.cholesky is None:
            raise InputError(
                "solver", "this solver='cholesky' fit kept no Cholesky factor (it was fitted with method='ntk')"
            )
        if k_test_diag is None:
            raise InputError("k_test_diag", "the test self-kernel diagonal k(x, x) is needed for return_std")
        return validation.vector(k_test_diag, "k_test_diag", length=m)


@dataclass(frozen=True, eq=False)
class _Fitted:
    """State of a fitted :class:`KernelRegressor`: ``solver``, dual weights W (n, k), scaler, λ,
    whether Y was 1-d; for ``"eigh"`` the eigensystem and Vᵀ K_nngp V for NTK-GP variances
    (or None); for ``"cholesky"`` with ``method="nngp"`` the factor L of K + λI (else None);
    the amplitude σ_f² per target (None where no variance or no closed form)."""

    solver: str
    weights: np.ndarray
    scaler: TargetScaler
    reg: float
    was_1d: bool
    eig: Eigensystem | None = None
    nngp_rotated: np.ndarray | None = None
    cholesky: np.ndarray | None = None
    amplitude: np.ndarray | None = None

    @property
    def n(self) -> int:
        return int(self.weights.shape[0])


def _scaled_std(fitted: _Fitted, variance: np.ndarray, amplitude: np.ndarray, std_of: str) -> np.ndarray:
    """Std in the units of Y from the latent variance v (m,) at σ_f² = 1 in standardised units:
    σ_j (σ_f,j² (v + λ [std_of = "y"]))^{1/2} per target j, shaped like Y."""
    noise = fitted.reg if std_of == "y" else 0.0
    scaled = (variance[:, None] + noise) * amplitude[None, :]
    return validation.restore(np.sqrt(fitted.scaler.inverse_transform_variance(scaled)), fitted.was_1d)


def _row_blocks(m: int, n: int) -> Iterator[slice]:
    """Consecutive row slices of an (m, n) matrix with at most max(n, :data:`BLOCK_ENTRIES`)
    entries each; one empty slice when m = 0."""
    return iter(validation.row_slices(m, max(1, BLOCK_ENTRIES // max(n, 1))))


def _test_kernel(value: object, n: int) -> np.ndarray:
    """K_test_train as an (m, n) array: a numpy array (``np.memmap`` included) as it is, its
    entries converted and checked block by block later; anything else converted whole."""
    array = value if isinstance(value, np.ndarray) else validation.matrix(value, "K_test_train", cols=n)
    if array.ndim != 2 or array.shape[1] != n:
        raise InputError(
            "K_test_train", f"must be an (m, {n}) matrix (one column per training point), got shape {array.shape}"
        )
    return array


def _check_finite(K: np.ndarray, name: str) -> None:
    """InputError naming ``name`` at the first NaN or inf of K, scanned in row blocks (one
    read of K, as one PCG iteration; no n² temporary)."""
    for rows in _row_blocks(K.shape[0], K.shape[1]):
        finite = np.isfinite(K[rows])
        if not finite.all():
            i, j = (int(v) for v in np.argwhere(~finite)[0])
            index = (rows.start + i, j)
            raise InputError(name, f"contains a non-finite value ({K[index]}) at index {index}")


def _one_norm(K: np.ndarray, reg: float) -> float:
    """‖K + λI‖₁ = max_i Σ_j |(K + λI)_ij| (K symmetric: row sums), read in row blocks
    without an n² temporary: row i sums |K_ij| with |K_ii| replaced by |K_ii + λ|."""
    diag = np.diag(K)
    sums = np.concatenate([np.abs(K[rows]).sum(axis=1) for rows in _row_blocks(K.shape[0], K.shape[0])])
    return float(np.max(sums - np.abs(diag) + np.abs(diag + reg)))


def _cholesky_condition(K: np.ndarray, factor: np.ndarray, reg: float) -> float:
    """LAPACK's (dpocon) estimate of cond₁(K + λI) = ‖K + λI‖₁ ‖(K + λI)⁻¹‖₁ from the factor
    L, O(n²). For symmetric K + λI, cond₂ ≤ cond₁ ≤ n cond₂; the estimate of ‖(K + λI)⁻¹‖₁
    is a lower bound, in practice within a factor 3 of it. ``inf`` when rcond is 0."""
    rcond, _ = scipy.linalg.lapack.dpocon(factor, _one_norm(K, reg), uplo="L")
    return 1.0 / rcond if rcond > 0 else math.inf


def _cholesky_variance(factor: np.ndarray, cross: np.ndarray, prior: np.ndarray) -> np.ndarray:
    """k(x, x) - ‖L⁻¹ k_x‖² = k(x, x) - k_xᵀ (K + λI)⁻¹ k_x for the rows k_xᵀ of ``cross`` (b, n),
    with K + λI = L Lᵀ; rounding below 0 is clipped to 0."""
    solved = scipy.linalg.solve_triangular(factor, cross.T, lower=True, check_finite=False)
    return np.maximum(prior - np.einsum("ij,ij->j", solved, solved), 0.0)
