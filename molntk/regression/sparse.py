"""``SparseKernelRegressor``: kernel ridge on the Nyström kernel of m inducing points, λ by closed-form LOO.

This is the subset-of-regressors model (the "sparse GPR" of GAP). ``fit(K_nm, K_mm, Y)`` takes K_mm (m, m), the
kernel among the inducing points (symmetric PSD up to quadrature error), K_nm (n, m), the kernel
of the n training points against them, and targets Y ((n,) or (n, k)), standardised per target
to Z = (Y − mean) / std (:class:`~molntk.regression.scaling.TargetScaler`, ``standardize``).

- K_mm = U diag(s) Uᵀ with the eigenvalues s ≤ ``rank_rtol`` · s_max dropped
  (``eigenvalues_clipped_``), r kept: root = U_r diag(s_r^{-1/2}), B = K_nm root (n, r),
  K̃ = K_nm K_mm⁺ K_mn = B Bᵀ = Q diag(σ²) Qᵀ: the thin SVD B = Q diag(σ) Wᵀ for n > r, the
  eigendecomposition of the n × n K̃ for n ≤ r (:mod:`molntk.regression.nystrom`).
  ``fit`` also takes the factor itself (:func:`~molntk.regression.nystrom.factor_inducing`), so that
  fits against the same inducing points (a learning curve, several targets) factor K_mm once.
- Kernel ridge with K̃ and λ > 0 has fitted values F = Q diag(σ²/(σ² + λ)) QᵀZ and hat
  diagonal h_i = Σ_k Q_ik² σ_k²/(σ_k² + λ), and its exact leave-one-out residuals are
  (Z − F)_i / (1 − h_i): K̃ is the same kernel when a training point is left out, since the
  inducing set does not depend on it. ``cv="gcv"``:
  GCV(λ) = mean((Z − F)²) / (1 − tr H / n)², tr H = Σ_k σ_k²/(σ_k² + λ).
- ``reg="cv"``: λ on ``relative_grid`` (default :data:`~molntk.regression.selection.DEFAULT_RELATIVE_GRID`)
  × mean(diag K̃), mean(diag K̃) = mean_i ‖B_i‖² = Σ_k σ_k² / n, with the lowest score averaged
  over targets (:class:`~molntk.regression.selection.CVResult`).
- Inducing weights W_S = root W diag(σ/(σ² + λ)) QᵀZ (m, k) (= root Bᵀ (K̃ + λI)⁻¹ Z, the
  same factors as :func:`~molntk.regression.solvers.nystrom_solve`); a prediction is K_tm W_S, un-standardised:
  only the kernel of the test points against the inducing points is needed.
- cond(K̃ + λI) = (σ_max² + λ) / (σ_min² + λ), σ_min = 0 when n > r (K̃ has rank ≤ r): λ = 0
  only where K̃ is nonsingular.

Model files: :meth:`SparseKernelRegressor.fitted_arrays` / ``load_fitted_arrays`` save and
restore W_S, the target scaling and λ as plain arrays (no pickling).

Cost: O(m³) for K_mm, O(n m r) for B, O(n r²) for the SVD and O(n r k) per λ of the grid;
memory n·r besides K_nm, which is only read (a read-only ``np.memmap`` works).
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Sequence
from dataclasses import KW_ONLY, dataclass
from typing import ClassVar

import numpy as np
from sklearn.base import BaseEstimator, RegressorMixin

from molntk.errors import InputError
from molntk.regression import validation
from molntk.regression.inducing import InducingWeights
from molntk.regression.nystrom import RANK_RTOL, ROOT_METHODS, InducingRoot, NystromFactors, factor_inducing, nystrom_factors
from molntk.regression.scaling import TargetScaler
from molntk.regression.selection import CVResult, check_loss, checked_relative_grid, residual_loss
from molntk.regression.spectral import ILL_CONDITIONED, IllConditionedWarning

SPARSE_CRITERIA = ("loo", "gcv")


def sparse_loo_residuals(
    K_nm: object, K_mm: object, Y: object, reg: float, *, rank_rtol: float = RANK_RTOL
) -> np.ndarray:
    """Exact leave-one-out residuals y_i − ŷ_{-i}(x_i) of kernel ridge on K̃ with λ > 0, in the
    units of ``Y`` (no standardisation) and shaped like it."""
    nys = nystrom_factors(K_nm, factor_inducing(K_mm, rank_rtol))
    Y2, was_1d = validation.targets(Y, "Y", rows=nys.Q.shape[0])
    residual, complement = nys.residuals(Y2, nys.Q.T @ Y2, validation.positive(reg, "reg"))
    return validation.restore(residual / complement[:, None], was_1d)


@dataclass(eq=False, repr=False)
class SparseKernelRegressor(InducingWeights, RegressorMixin, BaseEstimator):
    """Kernel ridge on the Nyström kernel K̃ = K_nm K_mm⁺ K_mn of m inducing points (module
    docstring), a scikit-learn estimator: ``fit(K_nm, K_mm, Y)``, ``predict(K_tm)``.

    ``reg``: λ ≥ 0 (> 0 unless K̃ is nonsingular), or ``"cv"`` to choose it on the training data
    by ``cv`` ∈ {"loo", "gcv"} over ``relative_grid`` (× mean(diag K̃); default 1e-10 … 1),
    scoring the leave-one-out residuals by ``cv_loss`` ("squared" or "absolute",
    :mod:`molntk.regression.selection`; GCV is squared only).
    ``standardize``: fit on (Y − mean) / std per target. ``rank_rtol``: K_mm eigenvalues at or
    below ``rank_rtol`` · s_max are dropped. ``factorisation``: ``"eigh"`` (that cut) or
    ``"cholesky"``: root T⁻¹ of K_mm + j·mean(diag K_mm)·I (TᵀT, applied by triangular solves),
    j from ``rank_rtol`` up by factors of 10 until the factorisation succeeds: m³/3 flops
    against ≈ 9m³
    (:mod:`molntk.regression.nystrom`). The parameters are stored as given;
    :meth:`check_params` (called first by ``fit``) raises :class:`InputError` naming the
    first one out of range.

    The model is the NTK mean of the converged network: ``method`` = "ntk" and ``t`` = ∞
    (class constants, as the parameters of :class:`~molntk.regression.KernelRegressor`).

    Fitted attributes: ``solver_`` ("sparse"), ``reg_`` (λ used), ``reg_relative_``
    (λ / mean(diag K̃)), ``cv_result_`` (the :class:`~molntk.regression.selection.CVResult`
    curve, or None), ``condition_number_`` of K̃ + λI, ``eigenvalues_clipped_`` (K_mm
    eigenvalues dropped), ``min_eigenvalue_`` (smallest raw eigenvalue of K_mm; NaN for
    ``"cholesky"``), ``jitter_`` (j / mean(diag K_mm); 0 for ``"eigh"``), ``rank_``
    (r), ``n_inducing_`` (m), ``target_mean_``, ``target_scale_`` ((k,) arrays),
    ``n_train_``, ``n_targets_``, ``fit_seconds_``. :meth:`load_fitted_arrays` sets
    ``solver_``, ``reg_``, ``rank_``, ``n_inducing_``, ``target_mean_``, ``target_scale_``
    and ``n_targets_``.
    """

    method: ClassVar[str] = "ntk"
    t: ClassVar[float] = math.inf
    SOLVER: ClassVar[str] = "sparse"
    KIND: ClassVar[str] = "sparse regressor"

    _: KW_ONLY
    reg: float | str = "cv"
    cv: str = "loo"
    cv_loss: str = "squared"
    standardize: bool = True
    relative_grid: Sequence[float] | None = None
    rank_rtol: float = RANK_RTOL
    factorisation: str = "eigh"

    def check_params(self) -> None:
        """Raise :class:`InputError` naming the first parameter out of range."""
        if self.reg != "cv":
            validation.nonnegative(self.reg, "reg")
        check_loss(self.cv_loss, validation.choice(self.cv, "cv", SPARSE_CRITERIA))
        checked_relative_grid(self.relative_grid)
        validation.positive(self.rank_rtol, "rank_rtol")
        validation.choice(self.factorisation, "factorisation", ROOT_METHODS)

    def fit(self, K_nm: object, K_mm: object | InducingRoot, Y: object) -> SparseKernelRegressor:
        """Fit on K_nm (n, m), K_mm (m, m) and targets Y ((n,) or (n, k)). ``K_mm`` may be its
        factor from :func:`~molntk.regression.nystrom.factor_inducing` with this regressor's
        ``rank_rtol`` and ``factorisation``, made once for fits against the same inducing
        points (a learning curve, several targets); ``fit_seconds_`` then leaves it out."""
        self.check_params()
        start = time.perf_counter()
        nys = nystrom_factors(K_nm, self._root(K_mm))
        n = nys.Q.shape[0]
        Y2, was_1d = validation.targets(Y, "Y", rows=n)
        scaler = TargetScaler.fit(Y2, enabled=bool(self.standardize))
        Z = scaler.transform(Y2)
        coeffs = nys.Q.T @ Z
        cv_result = self._select(nys, Z, coeffs) if self.reg == "cv" else None
        reg = float(self.reg) if cv_result is None else cv_result.best_reg
        cond = nys.condition_number(reg)
        if math.isinf(cond):
            raise InputError(
                "reg",
                f"λ = 0 needs a nonsingular K̃ = K_nm K_mm⁺ K_mn; this one (n = {n}, rank ≤ {nys.rank}) is singular",
            )
        if cond > ILL_CONDITIONED:
            warnings.warn(
                f"K̃ + λI is nearly singular (λ = {reg:.3g}, condition number {cond:.3g} > {ILL_CONDITIONED:.0e}); "
                "use a larger regulariser",
                IllConditionedWarning,
                stacklevel=2,
            )
        self._set_state(nys.weights(coeffs, reg), scaler, was_1d, reg, nys.rank)
        self.n_train_ = int(n)
        self.reg_relative_ = reg / nys.mean_diag if nys.mean_diag > 0 else math.nan
        self.cv_result_ = cv_result
        self.condition_number_ = cond
        self.eigenvalues_clipped_ = nys.root.n_dropped
        self.min_eigenvalue_ = nys.root.min_raw
        self.jitter_ = nys.root.jitter
        self.fit_seconds_ = time.perf_counter() - start
        return self

    def _root(self, K_mm: object | InducingRoot) -> InducingRoot:
        """K_mm factored with this regressor's settings, or its given factor when it was made
        with them (InputError naming ``K_mm`` otherwise)."""
        if not isinstance(K_mm, InducingRoot):
            return factor_inducing(K_mm, self.rank_rtol, self.factorisation)
        if (K_mm.method, K_mm.rank_rtol) != (self.factorisation, self.rank_rtol):
            raise InputError(
                "K_mm",
                f"was factored with method {K_mm.method!r} and rank_rtol {K_mm.rank_rtol:g}; this regressor has "
                f"factorisation {self.factorisation!r} and rank_rtol {self.rank_rtol:g}",
            )
        return K_mm

    def _set_state(self, weights: np.ndarray, scaler: TargetScaler, was_1d: bool, reg: float, rank: int) -> None:
        """Keep the fitted state (:class:`~molntk.regression.inducing.InducingWeights`) and ``rank_``."""
        self._keep(weights, scaler, was_1d, reg)
        self.rank_ = rank

    def _select(self, nys: NystromFactors, Z: np.ndarray, coeffs: np.ndarray) -> CVResult:
        """Score every λ of the grid by ``cv`` (non-finite scores count as inf)."""
        if nys.mean_diag <= 0:
            raise InputError("K_nm", "K̃ = K_nm K_mm⁺ K_mn has a zero diagonal; cannot scale the λ grid")
        relative = checked_relative_grid(self.relative_grid)
        grid = relative * nys.mean_diag
        scores = []
        with np.errstate(divide="ignore", invalid="ignore"):
            for reg in grid:
                residual, complement = nys.residuals(Z, coeffs, reg)
                if self.cv == "loo":
                    score = residual_loss(residual / complement[:, None], self.cv_loss)
                else:
                    trace = float(np.sum(nys.sigma**2 / (nys.sigma**2 + reg)))
                    score = np.mean(residual**2, axis=0) / (1.0 - trace / Z.shape[0]) ** 2
                scores.append(np.where(np.isfinite(score), score, np.inf))
        return CVResult(self.cv, grid, relative, np.array(scores), self.cv_loss)

    def fitted_arrays(self) -> dict[str, np.ndarray]:
        """The fitted state as plain arrays (for model files that must not unpickle code):
        ``solver`` (0-d unicode "sparse"), float64 ``weights`` (W_S, (m, k)), ``target_mean``,
        ``target_scale`` (k,), and 0-d ``reg``, ``rank``, ``was_1d``: all that ``predict`` needs."""
        return {**self._state_arrays(), "rank": np.asarray(int(self.rank_), dtype=np.int64)}

    def load_fitted_arrays(self, arrays: dict[str, np.ndarray]) -> SparseKernelRegressor:
        """Restore the state written by :meth:`fitted_arrays` (this regressor's settings are
        kept), with the fitted attributes the arrays hold (class docstring)."""
        self._restore(arrays)
        self.rank_ = int(arrays["rank"])
        return self
