"""``SparseKernelRegressor``: kernel ridge on the Nyström kernel of m inducing points, λ by closed-form LOO.

This is the subset-of-regressors model (the "sparse GPR" of GAP). ``fit(K_nm, K_mm, Y)`` takes K_mm (m, m), the
kernel among the inducing points (symmetric PSD up to quadrature error), K_nm (n, m), the kernel
of the n training points against them, and targets Y ((n,) or (n, k)), standardised per target
to Z = (Y − mean) / std (:class:`~molntk.regression.scaling.TargetScaler`, ``standardize``).

- K_mm, symmetrised as (K_mm + K_mmᵀ)/2, is U diag(s) Uᵀ. Eigenvalues s ≤ ``rank_rtol`` · s_max
  (rank deficiency, rounding, negative quadrature error) are dropped (``eigenvalues_clipped``),
  r are kept: root = U_r diag(s_r^{-1/2}) (m, r), B = K_nm root (n, r), and the Nyström kernel
  is K̃ = K_nm K_mm⁺ K_mn = B Bᵀ.
- Thin SVD B = Q diag(σ) Wᵀ. Kernel ridge with K̃ and λ > 0 has fitted values and hat diagonal

      F = Q diag(σ²/(σ² + λ)) QᵀZ,     h_i = Σ_k Q_ik² σ_k²/(σ_k² + λ),

  and its exact leave-one-out residuals are (Z − F)_i / (1 − h_i): K̃ is the same kernel when a
  training point is left out, since the inducing set does not depend on it. 1 − h_i is
  computed as (1 − ‖Q_i‖²) + Σ_k Q_ik² λ/(σ_k² + λ), without cancellation at small λ. ``cv="gcv"``:
  GCV(λ) = mean((Z − F)²) / (1 − tr H / n)², tr H = Σ_k σ_k²/(σ_k² + λ).
- ``reg="cv"``: λ on ``relative_grid`` (default :data:`~molntk.regression.selection.DEFAULT_RELATIVE_GRID`)
  × mean(diag K̃), mean(diag K̃) = mean_i ‖B_i‖² = Σ_k σ_k² / n, with the lowest score averaged
  over targets (:class:`~molntk.regression.selection.CVResult`).
- Inducing weights W_S = root W diag(σ/(σ² + λ)) QᵀZ (m, k) (= root Bᵀ (K̃ + λI)⁻¹ Z, as
  :func:`~molntk.regression.solvers.nystrom_solve`); a prediction is K_tm W_S, un-standardised:
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
from dataclasses import dataclass

import numpy as np

from molntk.errors import InputError
from molntk.regression import validation
from molntk.regression.scaling import TargetScaler
from molntk.regression.selection import DEFAULT_RELATIVE_GRID, CVResult
from molntk.regression.spectral import ILL_CONDITIONED, IllConditionedWarning

SPARSE_CRITERIA = ("loo", "gcv")
#: Eigenvalues of K_mm at or below RANK_RTOL · s_max are dropped from its pseudo-inverse.
RANK_RTOL = 1e-12


@dataclass(frozen=True, eq=False)
class NystromFactors:
    """root = U_r diag(s_r^{-1/2}) (m, r), the thin SVD B = Q diag(σ) Wᵀ of B = K_nm root (``Wt``
    is Wᵀ), the number of K_mm eigenvalues dropped and its smallest raw eigenvalue."""

    root: np.ndarray
    Q: np.ndarray
    sigma: np.ndarray
    Wt: np.ndarray
    n_dropped: int
    min_raw: float

    @property
    def mean_diag(self) -> float:
        """mean(diag K̃) = Σ_k σ_k² / n."""
        return float(np.sum(self.sigma**2) / self.Q.shape[0])

    def condition_number(self, reg: float) -> float:
        """cond₂(K̃ + λI) = (σ_max² + λ) / (σ_min² + λ); ``inf`` when singular."""
        low = (0.0 if self.Q.shape[0] > self.root.shape[1] else float(self.sigma[-1]) ** 2) + reg
        return (float(self.sigma[0]) ** 2 + reg) / low if low > 0 else math.inf

    def residuals(self, Z: np.ndarray, coeffs: np.ndarray, reg: float) -> tuple[np.ndarray, np.ndarray]:
        """Z − F (n, k) and 1 − h (n,) from QᵀZ (``coeffs``) for λ > 0."""
        shrink, squares = reg / (self.sigma**2 + reg), self.Q**2
        outside = np.maximum(1.0 - squares.sum(axis=1), 0.0)  # 1 − ‖Q_i‖², ≥ 0 up to rounding
        return Z - self.Q @ ((1.0 - shrink)[:, None] * coeffs), outside + squares @ shrink

    def weights(self, coeffs: np.ndarray, reg: float) -> np.ndarray:
        """W_S = root W diag(σ/(σ² + λ)) QᵀZ (m, k)."""
        return self.root @ (self.Wt.T @ ((self.sigma / (self.sigma**2 + reg))[:, None] * coeffs))


def nystrom_factors(K_nm: object, K_mm: object, rank_rtol: float) -> NystromFactors:
    """Validate K_nm, K_mm and factor them (module docstring; also the factors of
    :func:`~molntk.regression.solvers.nystrom_solve`); K_nm is only read."""
    K_mm = validation.symmetric_kernel(K_mm, "K_mm")
    m = K_mm.shape[0]
    K_nm = validation.matrix(K_nm, "K_nm")
    if K_nm.shape[1] != m or K_nm.shape[0] == 0:
        raise InputError("K_nm", f"must be (n, {m}) with n ≥ 1 (one column per inducing point), got shape {K_nm.shape}")
    s, U = np.linalg.eigh(K_mm)
    if s[-1] <= 0:
        raise InputError(
            "K_mm", f"has no positive eigenvalue (largest {s[-1]:.3g}): the inducing points carry no kernel"
        )
    keep = s > rank_rtol * float(s[-1])
    root = U[:, keep] / np.sqrt(s[keep])
    Q, sigma, Wt = np.linalg.svd(K_nm @ root, full_matrices=False)
    return NystromFactors(root, Q, sigma, Wt, n_dropped=int(m - keep.sum()), min_raw=float(s[0]))


def sparse_loo_residuals(
    K_nm: object, K_mm: object, Y: object, reg: float, *, rank_rtol: float = RANK_RTOL
) -> np.ndarray:
    """Exact leave-one-out residuals y_i − ŷ_{-i}(x_i) of kernel ridge on K̃ with λ > 0, in the
    units of ``Y`` (no standardisation) and shaped like it."""
    nys = nystrom_factors(K_nm, K_mm, validation.positive(rank_rtol, "rank_rtol"))
    Y2, was_1d = validation.targets(Y, "Y", rows=nys.Q.shape[0])
    residual, complement = nys.residuals(Y2, nys.Q.T @ Y2, validation.positive(reg, "reg"))
    return validation.restore(residual / complement[:, None], was_1d)


class SparseKernelRegressor:
    """Kernel ridge on the Nyström kernel K̃ = K_nm K_mm⁺ K_mn of m inducing points (module docstring).

    ``reg``: λ ≥ 0 (> 0 unless K̃ is nonsingular), or ``"cv"`` to choose it on the training data
    by ``cv`` ∈ {"loo", "gcv"} over ``relative_grid`` (× mean(diag K̃); default 1e-10 … 1).
    ``standardize``: fit on (Y − mean) / std per target. ``rank_rtol``: K_mm eigenvalues at or
    below ``rank_rtol`` · s_max are dropped.

    After ``fit``, ``info`` holds: ``method`` ("ntk"), ``solver`` ("sparse"), ``t`` (inf),
    ``reg`` (λ used), ``reg_relative`` (λ / mean(diag K̃)), ``cv`` (the curve,
    :meth:`CVResult.to_dict`, or None), ``condition_number`` of K̃ + λI, ``eigenvalues_clipped``
    (K_mm eigenvalues dropped), ``min_eigenvalue`` (smallest raw eigenvalue of K_mm), ``rank``
    (r), ``n_inducing`` (m), ``target_mean``, ``target_scale``, ``n_train``, ``n_targets``,
    ``fit_seconds``.
    """

    def __init__(
        self,
        *,
        reg: float | str = "cv",
        cv: str = "loo",
        standardize: bool = True,
        relative_grid: Sequence[float] | None = None,
        rank_rtol: float = RANK_RTOL,
    ) -> None:
        self.reg = reg if reg == "cv" else validation.nonnegative(reg, "reg")
        self.cv = validation.choice(cv, "cv", SPARSE_CRITERIA)
        self.standardize = bool(standardize)
        grid = validation.as_float64(DEFAULT_RELATIVE_GRID if relative_grid is None else relative_grid, "relative_grid")
        if grid.ndim != 1 or grid.size == 0 or np.min(grid) <= 0:
            raise InputError("relative_grid", f"must be a non-empty 1-d list of values > 0, got {grid.tolist()}")
        self.relative_grid = np.sort(grid)
        self.rank_rtol = validation.positive(rank_rtol, "rank_rtol")
        self.info: dict[str, object] = {}
        self._fitted: tuple[np.ndarray, TargetScaler, bool] | None = None

    def fit(self, K_nm: object, K_mm: object, Y: object) -> SparseKernelRegressor:
        """Fit on K_nm (n, m), K_mm (m, m) and targets Y ((n,) or (n, k))."""
        start = time.perf_counter()
        nys = nystrom_factors(K_nm, K_mm, self.rank_rtol)
        n, r = nys.Q.shape
        Y2, was_1d = validation.targets(Y, "Y", rows=n)
        scaler = TargetScaler.fit(Y2, enabled=self.standardize)
        Z = scaler.transform(Y2)
        coeffs = nys.Q.T @ Z
        cv_result = self._select(nys, Z, coeffs) if self.reg == "cv" else None
        reg = float(self.reg) if cv_result is None else cv_result.best_reg
        cond = nys.condition_number(reg)
        if math.isinf(cond):
            raise InputError(
                "reg", f"λ = 0 needs a nonsingular K̃ = K_nm K_mm⁺ K_mn; this one (n = {n}, rank ≤ {r}) is singular"
            )
        if cond > ILL_CONDITIONED:
            warnings.warn(
                f"K̃ + λI is nearly singular (λ = {reg:.3g}, condition number {cond:.3g} > {ILL_CONDITIONED:.0e}); "
                "use a larger regulariser",
                IllConditionedWarning,
                stacklevel=2,
            )
        self._fitted = (nys.weights(coeffs, reg), scaler, was_1d)
        self.info = {
            "method": "ntk",
            "solver": "sparse",
            "t": math.inf,
            "reg": reg,
            "reg_relative": reg / nys.mean_diag if nys.mean_diag > 0 else math.nan,
            "cv": None if cv_result is None else cv_result.to_dict(),
            "condition_number": cond,
            "eigenvalues_clipped": nys.n_dropped,
            "min_eigenvalue": nys.min_raw,
            "rank": int(nys.root.shape[1]),
            "n_inducing": int(nys.root.shape[0]),
            "target_mean": scaler.mean.tolist(),
            "target_scale": scaler.scale.tolist(),
            "n_train": int(n),
            "n_targets": int(Y2.shape[1]),
            "fit_seconds": time.perf_counter() - start,
        }
        return self

    def _select(self, nys: NystromFactors, Z: np.ndarray, coeffs: np.ndarray) -> CVResult:
        """Score every λ of the grid by ``cv`` (non-finite scores count as inf)."""
        if nys.mean_diag <= 0:
            raise InputError("K_nm", "K̃ = K_nm K_mm⁺ K_mn has a zero diagonal; cannot scale the λ grid")
        grid = self.relative_grid * nys.mean_diag
        scores = []
        with np.errstate(divide="ignore", invalid="ignore"):
            for reg in grid:
                residual, complement = nys.residuals(Z, coeffs, reg)
                if self.cv == "loo":
                    score = np.mean((residual / complement[:, None]) ** 2, axis=0)
                else:
                    trace = float(np.sum(nys.sigma**2 / (nys.sigma**2 + reg)))
                    score = np.mean(residual**2, axis=0) / (1.0 - trace / Z.shape[0]) ** 2
                scores.append(np.where(np.isfinite(score), score, np.inf))
        return CVResult(self.cv, grid, self.relative_grid.copy(), np.array(scores))

    def fitted_arrays(self) -> dict[str, np.ndarray]:
        """The fitted state as plain arrays (for model files that must not unpickle code):
        ``solver`` (0-d unicode "sparse"), float64 ``weights`` (W_S, (m, k)), ``target_mean``,
        ``target_scale`` (k,), and 0-d ``reg``, ``rank``, ``was_1d``: all that ``predict`` needs."""
        if self._fitted is None:
            raise InputError("SparseKernelRegressor", "fitted_arrays called before fit")
        weights, scaler, was_1d = self._fitted
        return {
            "solver": np.asarray("sparse"),
            "weights": weights,
            "target_mean": scaler.mean,
            "target_scale": scaler.scale,
            "reg": np.asarray(float(self.info.get("reg", math.nan))),
            "rank": np.asarray(int(self.info.get("rank", weights.shape[0])), dtype=np.int64),
            "was_1d": np.asarray(float(was_1d)),
        }

    def load_fitted_arrays(self, arrays: dict[str, np.ndarray]) -> SparseKernelRegressor:
        """Restore the state written by :meth:`fitted_arrays` (this regressor's settings are
        kept); ``info`` is reduced to what the arrays hold (``method``, ``solver``, ``t``,
        ``reg``, ``rank``, ``n_inducing``, ``target_mean``, ``target_scale``, ``n_targets``)."""
        solver = str(arrays.get("solver", "missing"))
        if solver != "sparse":
            raise InputError("solver", f"the arrays are not a sparse regressor's state (solver {solver!r})")
        weights = np.asarray(arrays["weights"], dtype=np.float64)
        scaler = TargetScaler(np.asarray(arrays["target_mean"], dtype=np.float64), np.asarray(arrays["target_scale"], dtype=np.float64))
        if weights.ndim != 2 or scaler.mean.shape != (weights.shape[1],) or scaler.scale.shape != (weights.shape[1],):
            raise InputError("weights", f"shape {weights.shape} does not fit the {scaler.mean.shape} target scaling")
        self._fitted = (weights, scaler, bool(float(arrays["was_1d"])))
        self.info = {
            "method": "ntk",
            "solver": "sparse",
            "t": math.inf,
            "reg": float(arrays["reg"]),
            "rank": int(arrays["rank"]),
            "n_inducing": int(weights.shape[0]),
            "target_mean": scaler.mean.tolist(),
            "target_scale": scaler.scale.tolist(),
            "n_targets": int(weights.shape[1]),
        }
        return self

    @property
    def inducing_weights(self) -> np.ndarray:
        """W_S of the standardised targets Z, (m,) or (m, k) like Y."""
        if self._fitted is None:
            raise InputError("SparseKernelRegressor", "inducing_weights asked for before fit")
        return validation.restore(self._fitted[0], self._fitted[2])

    def predict(self, K_tm: object) -> np.ndarray:
        """Mean prediction K_tm W_S, un-standardised, for the t test points of K_tm (t, m), the
        kernel of the test points against the inducing points; (t,) or (t, k) like Y."""
        if self._fitted is None:
            raise InputError("SparseKernelRegressor", "predict called before fit")
        weights, scaler, was_1d = self._fitted
        cross = validation.matrix(K_tm, "K_tm")
        if cross.shape[1] != weights.shape[0]:
            raise InputError(
                "K_tm", f"must have {weights.shape[0]} columns (one per inducing point), got shape {cross.shape}"
            )
        return validation.restore(scaler.inverse_transform(cross @ weights), was_1d)
