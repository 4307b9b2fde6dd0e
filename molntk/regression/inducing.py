"""The fitted state of a model that predicts from inducing weights, shared by the sparse
(Nyström SVD) and Falkon regressors.

Both fit inducing weights W (m, k) on standardised targets Z and predict K_tm W,
un-standardised, from the kernel K_tm of test points against the m inducing points. This
mixin keeps (W, scaler, whether Y was 1-d), sets the common fitted attributes (``solver_``,
``reg_``, ``n_inducing_``, ``n_targets_``, ``target_mean_``, ``target_scale_``), writes and
reads them as plain arrays (``solver``, ``weights``, ``target_mean``, ``target_scale``,
``reg``, ``was_1d``; no pickling), and predicts.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from molntk.errors import InputError
from molntk.regression import validation
from molntk.regression.scaling import TargetScaler


class InducingWeights:
    """Fitted state and prediction of an inducing-weights regressor (module docstring).
    ``SOLVER`` names the solver in ``solver_`` and in the arrays; ``KIND`` names the model in
    the error that refuses another model's arrays."""

    SOLVER: ClassVar[str]
    KIND: ClassVar[str]

    def _keep(self, weights: np.ndarray, scaler: TargetScaler, was_1d: bool, reg: float) -> None:
        """Keep W (m, k), the scaler and the target shape for ``predict``; set ``solver_``,
        ``reg_``, ``n_inducing_``, ``n_targets_``, ``target_mean_``, ``target_scale_``."""
        self._fitted = (weights, scaler, was_1d)
        self.solver_, self.reg_ = self.SOLVER, reg
        self.n_inducing_, self.n_targets_ = weights.shape
        self.target_mean_, self.target_scale_ = scaler.mean, scaler.scale

    def _state(self, message: str) -> tuple[np.ndarray, TargetScaler, bool]:
        """(W, scaler, whether Y was 1-d); InputError with ``message`` before ``fit``."""
        fitted = getattr(self, "_fitted", None)
        if fitted is None:
            raise InputError(type(self).__name__, message)
        return fitted

    def _state_arrays(self) -> dict[str, np.ndarray]:
        """``solver`` (0-d unicode), float64 ``weights`` (m, k), ``target_mean``, ``target_scale``
        (k,), 0-d ``reg`` and ``was_1d``."""
        weights, scaler, was_1d = self._state("fitted_arrays called before fit")
        return {
            "solver": np.asarray(self.SOLVER),
            "weights": weights,
            "target_mean": scaler.mean,
            "target_scale": scaler.scale,
            "reg": np.asarray(float(self.reg_)),
            "was_1d": np.asarray(float(was_1d)),
        }

    def _restore(self, arrays: dict[str, np.ndarray]) -> None:
        """Keep the state of :meth:`_state_arrays`; InputError naming ``solver`` for another
        model's arrays and ``weights`` when they do not fit the target scaling."""
        solver = str(arrays.get("solver", "missing"))
        if solver != self.SOLVER:
            raise InputError("solver", f"the arrays are not a {self.KIND}'s state (solver {solver!r})")
        weights = np.asarray(arrays["weights"], dtype=np.float64)
        scaler = TargetScaler(
            np.asarray(arrays["target_mean"], dtype=np.float64), np.asarray(arrays["target_scale"], dtype=np.float64)
        )
        if weights.ndim != 2 or scaler.mean.shape != (weights.shape[1],) or scaler.scale.shape != (weights.shape[1],):
            raise InputError("weights", f"shape {weights.shape} does not fit the {scaler.mean.shape} target scaling")
        self._keep(weights, scaler, bool(float(arrays["was_1d"])), float(arrays["reg"]))

    @property
    def inducing_weights(self) -> np.ndarray:
        """W of the standardised targets Z, (m,) or (m, k) like Y."""
        weights, _, was_1d = self._state("inducing_weights asked for before fit")
        return validation.restore(weights, was_1d)

    def predict(self, K_tm: object, *, return_std: bool = False) -> np.ndarray:
        """Mean prediction K_tm W, un-standardised, for the t test points of K_tm (t, m), the
        kernel of the test points against the inducing points; (t,) or (t, k) like Y. There is
        no predictive variance: ``return_std=True`` is an InputError saying so."""
        if return_std:
            raise InputError("return_std", f"{type(self).__name__} has no predictive variance; use the exact KernelRegressor")
        weights, scaler, was_1d = self._state("predict called before fit")
        cross = validation.matrix(K_tm, "K_tm")
        if cross.shape[1] != weights.shape[0]:
            raise InputError(
                "K_tm", f"must have {weights.shape[0]} columns (one per inducing point), got shape {cross.shape}"
            )
        return validation.restore(scaler.inverse_transform(cross @ weights), was_1d)
