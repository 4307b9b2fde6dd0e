"""``KernelRegressor``: NTK or NNGP regression on precomputed kernels, with λ chosen by CV.

``fit`` sees only training data: the train kernel (n, n) and targets Y ((n,) or (n, k)). It
standardises Y (optional), eigendecomposes the train kernel once, chooses λ on the training
data when ``reg="cv"`` (:func:`~molntk.regression.selection.select_regularizer`), and stores
the dual weights W = M_t Z of the standardised targets Z, so that ``predict`` is one product
K(x, X) W (O(m n k)).

``method="ntk"``: K_train is the NTK Θ(X, X); the mean is μ_t (:mod:`molntk.regression.ntk`).
Standard deviations (``return_std``) are the NTK-GP Σ_t(x, x)^{1/2}, which also need the
NNGP kernels: ``K_nngp_train`` at ``fit``, ``K_nngp_test_train`` and the NNGP test
self-kernel diagonal ``k_test_diag`` at ``predict``.
``method="nngp"``: K_train is the NNGP kernel; mean and standard deviation are the GP
posterior with noise λ (:mod:`molntk.regression.gp`), which needs ``k_test_diag`` for the std.

Outputs are numpy float64 arrays in the units of Y, shaped like Y ((m,) or (m, k)).
Standard deviations are scaled per target by the standardisation σ_j.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from molntk.errors import InputError
from molntk.regression import _inputs
from molntk.regression.gp import nngp_variance
from molntk.regression.ntk import ntk_gp_variance, ntk_weights
from molntk.regression.scaling import TargetScaler
from molntk.regression.selection import CRITERIA, select_regularizer
from molntk.regression.spectral import PSD_RTOL, Eigensystem, eigensystem, warn_if_ill_conditioned

METHODS = ("ntk", "nngp")


class KernelRegressor:
    """Kernel regression on a precomputed NTK or NNGP kernel.

    ``method``: ``"ntk"`` (mean μ_t of the trained infinite network) or ``"nngp"`` (GP
    posterior). ``t``, ``lr``: training time and learning rate of the NTK gradient flow
    (``t = inf``: converged; NTK only). ``reg``: λ ≥ 0, or ``"cv"`` to choose it on the
    training data by ``cv`` ∈ {"loo", "kfold", "gcv"} over ``relative_grid`` (× mean(diag
    K_train); default 1e-10 … 1), with ``n_folds`` folds dealt by ``seed`` for k-fold.
    ``standardize``: fit on (Y - mean) / std per target. ``psd_rtol``: eigenvalue clipping
    tolerance (:mod:`molntk.regression.spectral`).

    After ``fit``, ``info`` holds: ``reg`` (λ used), ``reg_relative``, ``cv`` (the curve,
    :meth:`CVResult.to_dict`, or None), ``condition_number`` of K_train + λI,
    ``eigenvalues_clipped``, ``min_eigenvalue`` (before clipping), ``target_mean``,
    ``target_scale``, ``n_train``, ``n_targets``, ``fit_seconds``.
    """

    def __init__(
        self,
        method: str = "ntk",
        *,
        t: float = math.inf,
        lr: float = 1.0,
        reg: float | str = "cv",
        cv: str = "loo",
        standardize: bool = True,
        relative_grid: Sequence[float] | None = None,
        n_folds: int = 5,
        seed: int = 0,
        psd_rtol: float = PSD_RTOL,
    ) -> None:
        self.method = _inputs.choice(method, "method", METHODS)
        self.t = _inputs.nonnegative(t, "t", allow_inf=True)
        if self.method == "nngp" and not math.isinf(self.t):
            raise InputError("t", "a training time applies to method='ntk' only; the NNGP posterior has none")
        self.lr = _inputs.positive(lr, "lr")
        self.reg = reg if reg == "cv" else _inputs.nonnegative(reg, "reg")
        self.cv = _inputs.choice(cv, "cv", CRITERIA)
        if reg == "cv" and self.cv == "loo" and not math.isinf(self.t):
            raise InputError("cv", "the closed-form LOO is exact only at t = inf; use 'kfold' or 'gcv' at finite t")
        self.standardize = bool(standardize)
        self.relative_grid = relative_grid
        self.n_folds = _inputs.integer(n_folds, "n_folds", minimum=2)
        self.seed = _inputs.integer(seed, "seed", minimum=0)
        self.psd_rtol = _inputs.positive(psd_rtol, "psd_rtol")
        self.info: dict[str, object] = {}
        self._fitted: _Fitted | None = None

    def fit(self, K_train: object, Y: object, *, K_nngp_train: object | None = None) -> KernelRegressor:
        """Fit on the train kernel K_train (n, n) and targets Y ((n,) or (n, k)).

        ``K_nngp_train`` (n, n): the NNGP train kernel, needed by ``method="ntk"`` for
        ``predict(..., return_std=True)``.
        """
        start = time.perf_counter()
        eig = eigensystem(K_train, "K_train", psd_rtol=self.psd_rtol)
        Y2, was_1d = _inputs.targets(Y, "Y", rows=eig.n)
        scaler = TargetScaler.fit(Y2, enabled=self.standardize)
        Z = scaler.transform(Y2)
        t = self.t if self.method == "ntk" else math.inf
        cv_result = None
        if self.reg == "cv":
            cv_result = select_regularizer(
                eig,
                Z,
                criterion=self.cv,
                relative_grid=self.relative_grid,
                n_folds=self.n_folds,
                seed=self.seed,
                t=t,
                lr=self.lr,
                K_train=K_train,
                psd_rtol=self.psd_rtol,
            )
            reg = cv_result.best_reg
        else:
            reg = float(self.reg)
        cond = warn_if_ill_conditioned(eig, reg)
        nngp_rotated = None
        if self.method == "ntk" and K_nngp_train is not None:
            nngp_train = _inputs.symmetric_kernel(K_nngp_train, "K_nngp_train")
            if nngp_train.shape != (eig.n, eig.n):
                raise InputError("K_nngp_train", f"must be {eig.n} x {eig.n} like K_train, got shape {nngp_train.shape}")
            nngp_rotated = eig.rotate(nngp_train)
        self._fitted = _Fitted(
            eig=eig,
            weights=ntk_weights(eig, Z, t=t, lr=self.lr, reg=reg),
            scaler=scaler,
            reg=reg,
            was_1d=was_1d,
            nngp_rotated=nngp_rotated,
        )
        self.info = {
            "method": self.method,
            "t": t,
            "lr": self.lr,
            "reg": reg,
            "reg_relative": reg / eig.mean_diag if eig.mean_diag > 0 else math.nan,
            "cv": None if cv_result is None else cv_result.to_dict(),
            "condition_number": cond,
            "eigenvalues_clipped": eig.n_clipped,
            "min_eigenvalue": eig.min_raw,
            "target_mean": scaler.mean.tolist(),
            "target_scale": scaler.scale.tolist(),
            "n_train": eig.n,
            "n_targets": int(Y2.shape[1]),
            "fit_seconds": time.perf_counter() - start,
        }
        return self

    def fitted_arrays(self) -> dict[str, np.ndarray]:
        """The fitted state as plain float64 arrays (for model files that must not unpickle code):
        ``weights``, ``eig_values``, ``eig_vectors``, ``target_mean``, ``target_scale``,
        ``reg`` and ``was_1d`` (0-d), and ``nngp_rotated`` when NTK-GP variances were prepared."""
        fitted = self._fitted
        if fitted is None:
            raise InputError("KernelRegressor", "fitted_arrays called before fit")
        arrays = {
            "weights": fitted.weights,
            "eig_values": fitted.eig.values,
            "eig_vectors": fitted.eig.vectors,
            "eig_mean_diag": np.asarray(fitted.eig.mean_diag),
            "target_mean": fitted.scaler.mean,
            "target_scale": fitted.scaler.scale,
            "reg": np.asarray(fitted.reg),
            "was_1d": np.asarray(float(fitted.was_1d)),
        }
        if fitted.nngp_rotated is not None:
            arrays["nngp_rotated"] = fitted.nngp_rotated
        return arrays

    def load_fitted_arrays(self, arrays: dict[str, np.ndarray]) -> KernelRegressor:
        """Restore the state written by :meth:`fitted_arrays` (this regressor's settings are kept)."""
        eig = Eigensystem(
            values=np.asarray(arrays["eig_values"], dtype=np.float64),
            vectors=np.asarray(arrays["eig_vectors"], dtype=np.float64),
            mean_diag=float(arrays["eig_mean_diag"]),
            n_clipped=0,
            min_raw=float(np.min(arrays["eig_values"])),
        )
        self._fitted = _Fitted(
            eig=eig,
            weights=np.asarray(arrays["weights"], dtype=np.float64),
            scaler=TargetScaler(np.asarray(arrays["target_mean"]), np.asarray(arrays["target_scale"])),
            reg=float(arrays["reg"]),
            was_1d=bool(float(arrays["was_1d"])),
            nngp_rotated=np.asarray(arrays["nngp_rotated"]) if "nngp_rotated" in arrays else None,
        )
        return self

    def predict(
        self,
        K_test_train: object,
        k_test_diag: object | None = None,
        return_std: bool = False,
        *,
        K_nngp_test_train: object | None = None,
    ) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
        """Mean prediction for the m test points of K_test_train (m, n) (the kernel of
        ``method``); with ``return_std`` also the predictive standard deviation.

        ``k_test_diag`` (m,): NNGP self-kernel K(x, x) of the test points (needed for the
        std). ``K_nngp_test_train`` (m, n): NNGP test-train kernel (std of ``method="ntk"``).
        """
        fitted = self._fitted
        if fitted is None:
            raise InputError("KernelRegressor", "predict called before fit")
        cross = _inputs.matrix(K_test_train, "K_test_train", cols=fitted.eig.n)
        mean = _inputs.restore(fitted.scaler.inverse_transform(cross @ fitted.weights), fitted.was_1d)
        if not return_std:
            return mean
        if k_test_diag is None:
            raise InputError("k_test_diag", "the NNGP test self-kernel diagonal K(x, x) is needed for return_std")
        prior = _inputs.vector(k_test_diag, "k_test_diag", length=cross.shape[0])
        if self.method == "nngp":
            variance = nngp_variance(fitted.eig, cross, prior, reg=fitted.reg)
        else:
            if fitted.nngp_rotated is None:
                raise InputError("K_nngp_train", "method='ntk' needs fit(..., K_nngp_train=...) for return_std")
            if K_nngp_test_train is None:
                raise InputError("K_nngp_test_train", "method='ntk' needs the NNGP test-train kernel for return_std")
            nngp_cross = _inputs.matrix(K_nngp_test_train, "K_nngp_test_train", rows=cross.shape[0], cols=fitted.eig.n)
            variance = ntk_gp_variance(
                fitted.eig,
                fitted.nngp_rotated,
                cross,
                nngp_cross,
                prior,
                t=self.t,
                lr=self.lr,
                reg=fitted.reg,
            )
        std = np.sqrt(fitted.scaler.inverse_transform_variance(variance))
        return mean, _inputs.restore(std, fitted.was_1d)


@dataclass(frozen=True, eq=False)
class _Fitted:
    """State of a fitted :class:`KernelRegressor`: eigensystem, dual weights W, scaler, λ,
    whether Y was 1-d, and Vᵀ K_nngp V for NTK-GP variances (or None)."""

    eig: Eigensystem
    weights: np.ndarray
    scaler: TargetScaler
    reg: float
    was_1d: bool
    nngp_rotated: np.ndarray | None
