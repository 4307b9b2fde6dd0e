"""Choice of the regulariser λ from training data only, on a log grid, from one eigendecomposition.

Kernel ridge (the NTK mean at t = ∞, the NNGP posterior mean) with A = K + λI and
K = V diag(s) Vᵀ, so that A⁻¹ = V diag(1/(s + λ)) Vᵀ costs O(n²) per λ:

- ``loo``: exact leave-one-out residuals  r_i(λ) = [A⁻¹Y]_i / [A⁻¹]_ii, with
  [A⁻¹]_ii = Σ_j V_ij² / (s_j + λ);
- ``kfold``: exact k-fold residuals. For a held-out fold F (training on the rest R) the
  block-inverse (Schur complement) identity gives
  y_F - K_FR (K_RR + λI)⁻¹ y_R = ([A⁻¹]_FF)⁻¹ [A⁻¹Y]_F,
  so all folds come from the same A⁻¹ (only its diagonal blocks are formed);
- ``gcv``: generalised cross-validation for the smoother ŷ = H Y,
  GCV(λ) = (1/n) ‖(I - H) y‖² / (1 - tr H / n)²,  H = V diag(h) Vᵀ.

The score of a λ is the mean loss of the residuals per target, averaged over targets (one
λ is shared by all targets); the grid point with the smallest score wins. The loss is
``squared`` (r², the default: the mean squared error) or ``absolute`` (|r|: the mean
absolute error, for targets reported by their MAE whose errors have heavy tails, where a few
molecules dominate r²; leave-one-out and k-fold only, GCV is a squared-error formula).

At a finite NTK training time t the predictor is the spectral filter
μ_t(X) = V diag(s g_t(s + λ)) Vᵀ Y (see :mod:`molntk.regression.ntk`). GCV then uses
h = s g_t(s + λ), exactly. k-fold CV refits each fold with its own eigendecomposition of
K_RR (one per fold, reused across the grid), which is exact. The closed-form LOO holds for
ridge only, so it is refused at finite t.

Folds are deterministic: ``fold_ids`` permutes 0..n-1 with ``numpy.random.default_rng(seed)``
and deals the permutation round-robin, so fold sizes differ by at most one.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from molntk.errors import InputError
from molntk.regression import validation
from molntk.regression.ntk import ntk_filter
from molntk.regression.spectral import PSD_RTOL, Eigensystem, eigensystem
from molntk.utils.checks import integer

CRITERIA = ("loo", "kfold", "gcv")
#: Losses of the cross-validation residuals (module docstring).
LOSSES = ("squared", "absolute")
#: Default λ grid relative to mean(diag K): 1e-10 … 1, two points per decade.
DEFAULT_RELATIVE_GRID = np.logspace(-10.0, 0.0, 21)


def checked_relative_grid(relative_grid: object) -> np.ndarray:
    """``relative_grid`` (None: :data:`DEFAULT_RELATIVE_GRID`) as a sorted float64 array;
    InputError naming ``relative_grid`` unless a non-empty 1-d list of values > 0."""
    relative = np.sort(
        validation.as_float64(DEFAULT_RELATIVE_GRID if relative_grid is None else relative_grid, "relative_grid")
    )
    if relative.ndim != 1 or relative.size == 0 or relative[0] <= 0:
        raise InputError("relative_grid", f"must be a non-empty 1-d list of values > 0, got {relative.tolist()}")
    return relative


def relative_grid_from(floor: float) -> np.ndarray:
    """:data:`DEFAULT_RELATIVE_GRID` without the values below ``floor`` (relative λ ≥ floor):
    for kernels accurate only to ``floor`` relative (quadratures), a smaller λ fits their error."""
    grid = DEFAULT_RELATIVE_GRID[DEFAULT_RELATIVE_GRID >= floor * (1 - 1e-9)]
    if grid.size == 0:
        raise InputError("floor", f"must be ≤ 1 (the largest relative λ of the grid), got {floor}")
    return grid


def lambda_grid(psd_rtol: float, quadrature: bool) -> np.ndarray | None:
    """The relative λ grid (λ / mean(diag K)) of a kernel: for a quadrature (accurate to about
    ``psd_rtol`` relative) ``relative_grid_from(psd_rtol)``, λ/mean(diag K) ≥ psd_rtol, since a
    smaller λ fits the quadrature error; for an exact kernel ``None`` (the regressors' default
    grid, :data:`DEFAULT_RELATIVE_GRID`)."""
    return relative_grid_from(psd_rtol) if quadrature else None


@dataclass(frozen=True, eq=False)
class CVResult:
    """A cross-validation curve over the λ grid and its minimum.

    ``grid`` holds absolute λ (ascending), ``relative_grid`` the same divided by
    mean(diag K); ``scores_per_target`` (G, k) are the mean ``loss`` of the residuals
    (squared or absolute) in the units of the targets given (standardised ones in
    :class:`~molntk.regression.KernelRegressor`).
    """

    criterion: str
    grid: np.ndarray
    relative_grid: np.ndarray
    scores_per_target: np.ndarray
    loss: str = "squared"

    @property
    def scores(self) -> np.ndarray:
        """Score per λ, averaged over targets, shape (G,)."""
        return self.scores_per_target.mean(axis=1)

    @property
    def best_index(self) -> int:
        return int(np.argmin(self.scores))

    @property
    def best_reg(self) -> float:
        return float(self.grid[self.best_index])

    @property
    def best_error(self) -> float:
        """The cross-validation error at the chosen λ, in the units of the targets scored:
        the RMSE (√ of the score) for the squared loss, the MAE for the absolute one."""
        score = float(self.scores[self.best_index])
        return math.sqrt(score) if self.loss == "squared" else score

    @property
    def at_grid_edge(self) -> bool:
        """The minimum is at the smallest or largest λ that was scored: the grid may be too
        narrow. λ's not scored (score inf: the solve did not factor there) do not count as
        grid, so a minimum at the smallest λ that factored is at the edge."""
        scored = np.flatnonzero(np.isfinite(self.scores))
        return scored.size == 0 or self.best_index in (scored[0], scored[-1])


def fold_ids(n: int, n_folds: int, seed: int = 0) -> np.ndarray:
    """Fold index (0..n_folds-1) of each of n points: ``ids[perm[i]] = i mod n_folds``."""
    n = integer(n, "n", minimum=1)
    n_folds = integer(n_folds, "n_folds", minimum=2)
    seed = integer(seed, "seed", minimum=0)
    if n_folds > n:
        raise InputError("n_folds", f"{n_folds} folds need at least {n_folds} training points, got {n}")
    ids = np.empty(n, dtype=np.int64)
    ids[np.random.default_rng(seed).permutation(n)] = np.arange(n) % n_folds
    return ids


def residual_loss(residuals: np.ndarray, loss: str) -> np.ndarray:
    """Mean ``loss`` of (n, k) residuals per target, (k,): mean r² or mean |r|."""
    return np.mean(residuals**2 if loss == "squared" else np.abs(residuals), axis=0)


def check_loss(loss: object, criterion: str, name: str = "cv_loss") -> str:
    """``loss`` if it is one of :data:`LOSSES` and ``criterion`` can score it, else an
    :class:`InputError` naming ``name`` (GCV is a squared-error formula)."""
    loss = validation.choice(loss, name, LOSSES)
    if loss == "absolute" and criterion == "gcv":
        raise InputError(name, "GCV scores squared residuals only; use 'loo' or 'kfold' for the absolute loss")
    return loss


def _loo(eig: Eigensystem, coeffs: np.ndarray, squares: np.ndarray, reg: float) -> np.ndarray:
    """LOO residuals from Vᵀ Y (``coeffs``) and V ⊙ V (``squares``)."""
    g = ntk_filter(eig.values + reg)
    return eig.from_basis(g[:, None] * coeffs) / (squares @ g)[:, None]


def _kfold(eig: Eigensystem, coeffs: np.ndarray, folds: list[np.ndarray], reg: float) -> np.ndarray:
    """k-fold residuals ([A⁻¹]_FF)⁻¹ [A⁻¹Y]_F from Vᵀ Y (``coeffs``)."""
    g = ntk_filter(eig.values + reg)
    dual = eig.from_basis(g[:, None] * coeffs)
    residuals = np.empty_like(dual)
    for fold in folds:
        rows = eig.vectors[fold]
        residuals[fold] = np.linalg.solve((rows * g) @ rows.T, dual[fold])
    return residuals


def _gcv(eig: Eigensystem, coeffs: np.ndarray, reg: float, t: float, lr: float) -> np.ndarray:
    """Per-target GCV from Vᵀ Y (``coeffs``), with hat eigenvalues h = s g_t(s + λ)."""
    h = eig.values * ntk_filter(eig.values + reg, t=t, lr=lr)
    residual = (((1.0 - h)[:, None] * coeffs) ** 2).sum(axis=0) / eig.n
    denominator = (1.0 - h.sum() / eig.n) ** 2
    return residual / denominator if denominator > 0 else np.full(residual.shape, math.inf)


def loo_residuals(eig: Eigensystem, Y: object, reg: float) -> np.ndarray:
    """Exact leave-one-out residuals y_i - ŷ_{-i}(x_i) of kernel ridge, shape of ``Y``."""
    reg = validation.nonnegative(reg, "reg")
    Y2, was_1d = validation.targets(Y, "Y", rows=eig.n)
    return validation.restore(_loo(eig, eig.to_basis(Y2), eig.vectors**2, reg), was_1d)


def kfold_residuals(eig: Eigensystem, Y: object, reg: float, folds: np.ndarray) -> np.ndarray:
    """Exact k-fold residuals of kernel ridge (each point predicted by the model trained
    without its fold), shape of ``Y``. ``folds`` (n,) holds fold indices (:func:`fold_ids`)."""
    reg = validation.nonnegative(reg, "reg")
    Y2, was_1d = validation.targets(Y, "Y", rows=eig.n)
    groups = _fold_groups(folds, eig.n)
    return validation.restore(_kfold(eig, eig.to_basis(Y2), groups, reg), was_1d)


def gcv_score(eig: Eigensystem, Y: object, reg: float, *, t: float = math.inf, lr: float = 1.0) -> np.ndarray:
    """GCV(λ) per target, (k,) (a 0-d array for 1-d ``Y``), for the NTK mean at time t."""
    reg = validation.nonnegative(reg, "reg")
    Y2, was_1d = validation.targets(Y, "Y", rows=eig.n)
    score = _gcv(eig, eig.to_basis(Y2), reg, t, lr)
    return score[0] if was_1d else score


def _fold_groups(folds: object, n: int) -> list[np.ndarray]:
    ids = np.asarray(folds)
    if ids.shape != (n,) or ids.dtype.kind not in "iu":
        raise InputError("folds", f"must be {n} integer fold indices, got shape {ids.shape}, dtype {ids.dtype}")
    groups = [np.flatnonzero(ids == value) for value in np.unique(ids)]
    if len(groups) < 2:
        raise InputError("folds", "needs at least 2 distinct folds")
    return groups


class _TimeFolds:
    """k-fold CV of the NTK mean at finite t: one eigendecomposition of K_RR per fold."""

    def __init__(self, K: np.ndarray, Y: np.ndarray, groups: list[np.ndarray], psd_rtol: float) -> None:
        self.Y = Y
        self.parts: list[tuple[np.ndarray, Eigensystem, np.ndarray, np.ndarray]] = []
        for held in groups:
            keep = np.setdiff1d(np.arange(K.shape[0]), held)
            eig = eigensystem(K[np.ix_(keep, keep)], "K_train (fold)", psd_rtol=psd_rtol)
            self.parts.append((held, eig, K[np.ix_(held, keep)] @ eig.vectors, eig.to_basis(Y[keep])))

    def residuals(self, reg: float, t: float, lr: float) -> np.ndarray:
        residuals = np.empty_like(self.Y)
        for held, eig, cross, coeffs in self.parts:
            g = ntk_filter(eig.values + reg, t=t, lr=lr)
            residuals[held] = self.Y[held] - cross @ (g[:, None] * coeffs)
        return residuals


def select_regularizer(
    eig: Eigensystem,
    Y: object,
    *,
    criterion: str = "loo",
    relative_grid: Sequence[float] | np.ndarray | None = None,
    n_folds: int = 5,
    seed: int = 0,
    t: float = math.inf,
    lr: float = 1.0,
    K_train: object | None = None,
    psd_rtol: float = PSD_RTOL,
    loss: str = "squared",
) -> CVResult:
    """Score every λ = r · mean(diag K) (r in ``relative_grid``, default
    :data:`DEFAULT_RELATIVE_GRID`) by ``criterion`` and return the curve.

    ``eig`` is the eigensystem of the train kernel K and ``Y`` the (n,) or (n, k) training
    targets: nothing else is seen. ``n_folds`` and ``seed`` set the k-fold folds. ``t``, ``lr``
    give the NTK training time (``inf``: ridge). k-fold CV at finite t also needs the train
    kernel itself, ``K_train``, for its per-fold eigendecompositions. ``loss``: the loss of
    the residuals (:data:`LOSSES`; ``absolute`` with leave-one-out or k-fold only).
    """
    criterion = validation.choice(criterion, "criterion", CRITERIA)
    loss = check_loss(loss, criterion, "loss")
    t = validation.nonnegative(t, "t", allow_inf=True)
    lr = validation.positive(lr, "lr")
    Y2, _ = validation.targets(Y, "Y", rows=eig.n)
    relative = checked_relative_grid(relative_grid)
    if eig.mean_diag <= 0:
        raise InputError("K_train", f"mean of the diagonal is {eig.mean_diag:.3g}; cannot scale the λ grid")
    grid = relative * eig.mean_diag
    coeffs = eig.to_basis(Y2)

    if criterion == "gcv":
        scores = [_gcv(eig, coeffs, reg, t, lr) for reg in grid]
    elif criterion == "loo":
        if not math.isinf(t):
            raise InputError("criterion", "the closed-form LOO is exact only at t = inf; use 'kfold' or 'gcv' at finite t")
        squares = eig.vectors**2
        scores = [residual_loss(_loo(eig, coeffs, squares, reg), loss) for reg in grid]
    elif math.isinf(t):
        groups = _fold_groups(fold_ids(eig.n, n_folds, seed), eig.n)
        scores = [residual_loss(_kfold(eig, coeffs, groups, reg), loss) for reg in grid]
    else:
        if K_train is None:
            raise InputError("K_train", "k-fold CV at finite t refits each fold and needs the train kernel")
        K = validation.symmetric_kernel(K_train, "K_train")
        if K.shape[0] != eig.n:
            raise InputError("K_train", f"must be {eig.n} x {eig.n} like the eigensystem, got shape {K.shape}")
        time_folds = _TimeFolds(K, Y2, _fold_groups(fold_ids(eig.n, n_folds, seed), eig.n), psd_rtol)
        scores = [residual_loss(time_folds.residuals(reg, t, lr), loss) for reg in grid]
    return CVResult(
        criterion=criterion,
        grid=grid,
        relative_grid=relative,
        scores_per_target=np.array(scores),
        loss=loss,
    )
