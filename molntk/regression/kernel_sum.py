"""``KernelSumRegressor``: kernel ridge on a weighted sum of kernels, the weights chosen by CV.

For kernels K_1, …, K_k of the same training points (NTKs of k networks, or any PSD
kernels), the regressor fits a :class:`~molntk.regression.KernelRegressor` on

    K_c = Σ_i c_i K_i / τ_i,   τ_i = mean(diag K_i(train, train)),   c_1 = 1,

with (c_2, …, c_k) from ``weights``: a grid of each c_i (1-d; its product ``weights``^(k−1)
is searched) or the points (c_2, …, c_k) themselves (2-d). For each point a
clone of ``regressor`` is fitted (its own λ search when ``reg="cv"``), and the point of
lowest CV error at its best λ is kept. Dividing by τ_i makes the weights scale-free (an
NTK's scale grows with σ_w and depth; a kernel ridge fit is unchanged by a common scale
once λ is relative). K_c is the NTK of the k networks' outputs added, f = Σ_i (c_i/τ_i)^{1/2} f_i
with independent parameters, so a sum of NTKs is itself an infinite-width network kernel.

``predict`` takes the test kernels of the same k kernels (and their test self-kernels for a
std) and combines them with the chosen weights and the training τ_i. One point
fixes the weights (a refit at a larger N with the weights chosen at a smaller one; a
regressor with a numeric ``reg`` allows only that). Fitted attributes: ``weights_``
((c_1, …, c_k), c_1 = 1), ``scales_`` (τ_i), ``search_`` (the grid's (weights, CV error)
pairs, in the regressor's standardised units; empty for one point) and ``regressor_`` (the
fitted regressor on K_c), whose fitted attributes (``reg_relative_``, ``cv_result_``,
``amplitude_``, …) this regressor also answers for. ``fitted_arrays`` / ``load_fitted_arrays``
store and restore the fit as plain arrays (model files), ``refit_loo_amplitude`` calibrates the
std as the plain regressor's does.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from sklearn.base import BaseEstimator, RegressorMixin, clone

from molntk.errors import InputError
from molntk.regression import validation
from molntk.regression.estimator import KernelRegressor

#: The default grid of each weight c_2, …, c_k: the term left out, then 1 % to 3 × the first kernel's trace.
DEFAULT_WEIGHTS = (0.0, 0.01, 0.03, 0.1, 0.3, 1.0, 3.0)


@dataclass(eq=False, repr=False)
class KernelSumRegressor(RegressorMixin, BaseEstimator):
    """Kernel ridge on Σ_i c_i K_i / τ_i with the weights and λ chosen on the training data
    (module docstring). ``regressor``: the kernel ridge fitted on each sum (cloned);
    ``weights``: the grid of each of c_2, …, c_k, or a list of points (c_2, …, c_k) (each
    c ≥ 0; every point is one fit)."""

    regressor: KernelRegressor = field(default_factory=KernelRegressor)
    weights: Sequence[float] = DEFAULT_WEIGHTS

    def points(self, k: int) -> list[tuple[float, ...]]:
        """The weight points (1, c_2, …, c_k) searched for k kernels; InputError naming
        ``weights`` or ``regressor``."""
        try:
            grid = np.asarray(self.weights, dtype=float)
        except (TypeError, ValueError):
            raise InputError("weights", f"must be a list of numbers or of points (c_2, …), got {self.weights!r}") from None
        if grid.ndim not in (1, 2) or grid.size == 0:
            raise InputError("weights", f"must be a non-empty list of numbers or of points (c_2, …), got {self.weights!r}")
        if not np.all(np.isfinite(grid)) or np.any(grid < 0):
            raise InputError("weights", f"must be finite and ≥ 0, got {grid.tolist()}")
        if grid.ndim == 2 and grid.shape[1] != k - 1:
            raise InputError("weights", f"points must give the {k - 1} weights c_2, … of {k} kernels, got {grid.shape[1]}")
        if not isinstance(self.regressor, KernelRegressor):
            raise InputError("regressor", f"must be a KernelRegressor, got {type(self.regressor).__name__}")
        rest = itertools.product(grid.tolist(), repeat=k - 1) if grid.ndim == 1 else grid.tolist()
        points = [(1.0, *r) for r in rest]
        if len(points) > 1 and self.regressor.reg != "cv":
            raise InputError("weights", "several weight points are chosen by cross-validation: they need a regressor with reg='cv'")
        return points

    def fit(self, kernels: Sequence[object], Y: object) -> KernelSumRegressor:
        """Fit on the training kernels ``kernels`` (k ≥ 2 arrays (n, n) of the same points) and
        targets Y ((n,) or (n, k)); the weights of lowest CV error win."""
        Ks = _kernel_list(kernels, "kernels")
        points = self.points(len(Ks))
        n = Ks[0].shape[0]
        for i, K in enumerate(Ks):
            if K.shape != (n, n):
                raise InputError("kernels", f"kernel {i} must be {n} x {n} like kernel 0, got shape {K.shape}")
        scales = np.array([float(np.mean(np.diagonal(K))) for K in Ks])
        if not np.all(scales > 0):
            raise InputError("kernels", f"every kernel needs a positive mean diagonal, got {list(scales)}")
        best, search = None, []
        for point in points:
            model = clone(self.regressor).fit(_combined(Ks, point, scales), Y)
            error = None if model.cv_result_ is None else float(model.cv_result_.best_error)
            search.append((point, error))
            if best is None or (error is not None and error < best[1]):
                best = (point, error, model)
        self.weights_, self.scales_, self.regressor_ = best[0], scales, best[2]
        self.search_ = search if len(points) > 1 else []
        return self

    def combined(self, kernels: Sequence[object]) -> np.ndarray:
        """Σ_i c_i K_i / τ_i of ``kernels`` (test kernels (m, n), or self-kernel vectors (m,))
        with the fitted weights and training scales."""
        Ks = _kernel_list(kernels, "kernels", count=len(self.scales_))
        return _combined(Ks, self.weights_, self.scales_)

    def predict(self, kernels: Sequence[object], k_test_diag: Sequence[object] | None = None, **kwargs: object) -> object:
        """The fitted regressor's ``predict`` on the combined test kernel (and, with
        ``k_test_diag``, the combined test self-kernels); keywords as :meth:`KernelRegressor.predict`."""
        diag = None if k_test_diag is None else self.combined(k_test_diag)
        return self.regressor_.predict(self.combined(kernels), diag, **kwargs)

    def refit_loo_amplitude(self, baseline_shifts: object, reference: float) -> np.ndarray:
        """:meth:`KernelRegressor.refit_loo_amplitude` of the regressor on the chosen sum."""
        return self._fitted_regressor("refit_loo_amplitude").refit_loo_amplitude(baseline_shifts, reference)

    def fitted_arrays(self) -> dict[str, np.ndarray]:
        """The fitted state as plain arrays (model files): the chosen regressor's
        (:meth:`KernelRegressor.fitted_arrays`) and ``sum_weights`` (c_1, …, c_k),
        ``sum_scales`` (τ_1, …, τ_k)."""
        arrays = self._fitted_regressor("fitted_arrays").fitted_arrays()
        return arrays | {"sum_weights": np.asarray(self.weights_, dtype=np.float64), "sum_scales": np.asarray(self.scales_)}

    def load_fitted_arrays(self, arrays: dict[str, np.ndarray]) -> KernelSumRegressor:
        """Restore the state written by :meth:`fitted_arrays` (``search_`` is empty: the
        search is not stored); InputError naming ``sum_weights`` or ``sum_scales`` when they
        are missing or do not describe one sum (c_1 = 1, every τ_i > 0, k ≥ 2 of each)."""
        rest = dict(arrays)
        try:
            weights = np.asarray(rest.pop("sum_weights"), dtype=np.float64).reshape(-1)
            scales = np.asarray(rest.pop("sum_scales"), dtype=np.float64).reshape(-1)
        except KeyError as err:
            raise InputError(str(err.args[0]), "missing: not the state of a sum of kernels") from None
        if weights.size < 2 or weights[0] != 1.0 or not np.all(np.isfinite(weights)) or np.any(weights < 0):
            raise InputError("sum_weights", f"must be (1, c_2, …) with every c ≥ 0, got {weights.tolist()}")
        if scales.shape != weights.shape or not np.all(scales > 0):
            raise InputError("sum_scales", f"must be {weights.size} positive traces, got {scales.tolist()}")
        self.regressor_ = clone(self.regressor).load_fitted_arrays(rest)
        self.weights_, self.scales_, self.search_ = tuple(weights.tolist()), scales, []
        return self

    def _fitted_regressor(self, caller: str) -> KernelRegressor:
        """The regressor on the chosen sum; InputError naming ``caller`` before fit."""
        if "regressor_" not in self.__dict__:
            raise InputError("KernelSumRegressor", f"{caller} called before fit")
        return self.__dict__["regressor_"]

    def __getattr__(self, name: str) -> object:
        """The fitted attributes of the regressor on the chosen sum (``reg_relative_``, …)."""
        if name.endswith("_") and not name.startswith("_") and "regressor_" in self.__dict__:
            return getattr(self.__dict__["regressor_"], name)
        raise AttributeError(name)


def _kernel_list(kernels: Sequence[object], name: str, count: int | None = None) -> list[np.ndarray]:
    """The kernels as float64 arrays; InputError naming ``name`` unless k ≥ 2 (or = count)."""
    if isinstance(kernels, np.ndarray) or not isinstance(kernels, Sequence):
        raise InputError(name, f"must be a list of kernel arrays, one per summed kernel, got {type(kernels).__name__}")
    if count is None and len(kernels) < 2:
        raise InputError(name, f"a sum needs at least 2 kernels, got {len(kernels)}")
    if count is not None and len(kernels) != count:
        raise InputError(name, f"must hold {count} kernels (as fitted), got {len(kernels)}")
    return [validation.as_float64(K, f"{name}[{i}]") for i, K in enumerate(kernels)]


def _combined(Ks: list[np.ndarray], weights: Sequence[float], scales: np.ndarray) -> np.ndarray:
    """Σ_i w_i K_i / τ_i (a new array; terms of weight 0 are skipped)."""
    out = np.zeros(Ks[0].shape)
    for K, w, tau in zip(Ks, weights, scales):
        if w:
            out += (w / tau) * K
    return out
