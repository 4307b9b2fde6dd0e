"""Kernel regression on precomputed NTK / NNGP kernels.

- :mod:`~molntk.regression.spectral`: one eigendecomposition of the train kernel, condition
  numbers, eigenvalue clipping;
- :mod:`~molntk.regression.ntk`: NTK mean μ_t at training time t (and t = ∞) and the NTK-GP
  variance Σ_t;
- :mod:`~molntk.regression.gp`: NNGP posterior mean and variance;
- :mod:`~molntk.regression.selection`: λ by closed-form LOO, exact k-fold, or GCV;
- :mod:`~molntk.regression.scaling`: per-target standardisation;
- :mod:`~molntk.regression.solvers`: Cholesky, preconditioned CG and Nyström solves of
  (K + λI) X = Y for large N;
- :mod:`~molntk.regression.estimator`: :class:`KernelRegressor` (fit / predict / info), by
  eigendecomposition (λ by CV, finite t, variances) or, for large N, Cholesky or PCG;
- :mod:`~molntk.regression.dressed_atom`: per-element linear baseline;
- :mod:`~molntk.regression.metrics`: MAE, RMSE, R².
"""

from molntk.regression.dressed_atom import DressedAtomModel, element_counts
from molntk.regression.estimator import KernelRegressor, PCGConvergenceWarning
from molntk.regression.gp import nngp_posterior, nngp_variance
from molntk.regression.metrics import mae, r2, regression_metrics, rmse
from molntk.regression.ntk import ntk_filter, ntk_gp_variance, ntk_mean, ntk_weights
from molntk.regression.scaling import TargetScaler
from molntk.regression.selection import (
    CVResult,
    fold_ids,
    gcv_score,
    kfold_residuals,
    loo_residuals,
    select_regularizer,
)
from molntk.regression.spectral import Eigensystem, IllConditionedWarning, eigensystem

__all__ = [
    "CVResult",
    "DressedAtomModel",
    "Eigensystem",
    "IllConditionedWarning",
    "KernelRegressor",
    "PCGConvergenceWarning",
    "TargetScaler",
    "eigensystem",
    "element_counts",
    "fold_ids",
    "gcv_score",
    "kfold_residuals",
    "loo_residuals",
    "mae",
    "nngp_posterior",
    "nngp_variance",
    "ntk_filter",
    "ntk_gp_variance",
    "ntk_mean",
    "ntk_weights",
    "r2",
    "regression_metrics",
    "rmse",
    "select_regularizer",
]
