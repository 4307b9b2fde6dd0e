"""Kernel regression on precomputed NTK / NNGP kernels, as scikit-learn estimators.

The regressors (:class:`KernelRegressor`, :class:`SparseKernelRegressor`,
:class:`FalkonRegressor`, :class:`DressedAtomModel`) are ``BaseEstimator`` + ``RegressorMixin``: ``__init__`` stores
the parameters as given, ``fit`` checks them (:class:`~molntk.errors.InputError` naming the
parameter) and sets fitted attributes with a trailing underscore (``reg_``, ``cv_result_``,
...), so ``clone``, ``GridSearchCV`` and ``cross_val_score`` apply. ``KernelRegressor``
works like ``KernelRidge(kernel="precomputed")``: ``fit(K_train, y)``, ``predict(K_test)``.

- :mod:`~molntk.regression.spectral`: one eigendecomposition of the train kernel, condition
  numbers, eigenvalue clipping;
- :mod:`~molntk.regression.ntk`: NTK mean μ_t at training time t (and t = ∞, or after s
  gradient-descent steps) and the NTK-GP variance Σ_t;
- :mod:`~molntk.regression.dynamics`: :class:`NTKDynamics`, μ_t and Σ_t at many times from the
  kernel matrices of any library kernel (one entry point);
- :mod:`~molntk.regression.gp`: NNGP posterior mean and variance;
- :mod:`~molntk.regression.selection`: λ by closed-form LOO, exact k-fold, or GCV;
- :mod:`~molntk.regression.scaling`: per-target standardisation;
- :mod:`~molntk.regression.nystrom`: the Nyström factorisation of m inducing points;
- :mod:`~molntk.regression.solvers`: Cholesky, preconditioned CG and Nyström solves of
  (K + λI) X = Y for large N;
- :mod:`~molntk.regression.estimator`: :class:`KernelRegressor`, by eigendecomposition
  (λ by CV, finite t, variances) or, for large N, Cholesky or PCG;
- :mod:`~molntk.regression.kernel_sum`: :class:`KernelSumRegressor`, kernel ridge on a
  weighted sum of kernels (the NTK of networks side by side), weights and λ by CV;
- :mod:`~molntk.regression.sparse`: :class:`SparseKernelRegressor`, kernel ridge on the
  Nyström kernel, λ by closed-form LOO or GCV;
- :mod:`~molntk.regression.falkon`: :class:`FalkonRegressor`, the same model by Falkon's
  preconditioned conjugate gradients (no n × m factorisation; CPU or CUDA), λ on a hold-out split;
- :mod:`~molntk.regression.inducing`: their shared fitted state (inducing weights, target
  scaling, plain-array model state) and prediction K_tm W;
- :mod:`~molntk.regression.validation`: conversion and checks of the arrays and numbers taken;
- :mod:`~molntk.regression.dressed_atom`: per-element linear baseline;
- :mod:`~molntk.regression.calibration`: the GP amplitude σ_f² of the predictive variances,
  fitted by leave-one-out or marginal likelihood;
- :mod:`~molntk.regression.metrics`: MAE, RMSE, R², coverage of predictive stds, bootstrap
  intervals of test MAEs and of paired MAE differences.
"""

from molntk.regression.calibration import UncalibratedWarning
from molntk.regression.dressed_atom import DressedAtomModel, element_counts
from molntk.regression.dynamics import NTKDynamics, kernel_matrices
from molntk.regression.estimator import KernelRegressor, PCGConvergenceWarning
from molntk.regression.falkon import FalkonConvergenceWarning, FalkonRegressor
from molntk.regression.gp import nngp_posterior, nngp_variance
from molntk.regression.kernel_sum import KernelSumRegressor
from molntk.regression.metrics import (calibration_metrics, coverage_curve, mae, mae_interval, mean_error_interval,
                                      paired_error_difference, paired_mae_difference, r2, regression_metrics, rmse)
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
from molntk.regression.sparse import SparseKernelRegressor
from molntk.regression.spectral import Eigensystem, IllConditionedWarning, eigensystem

__all__ = [
    "CVResult",
    "DressedAtomModel",
    "Eigensystem",
    "FalkonConvergenceWarning",
    "FalkonRegressor",
    "IllConditionedWarning",
    "KernelRegressor",
    "KernelSumRegressor",
    "NTKDynamics",
    "PCGConvergenceWarning",
    "SparseKernelRegressor",
    "TargetScaler",
    "UncalibratedWarning",
    "calibration_metrics",
    "coverage_curve",
    "eigensystem",
    "element_counts",
    "fold_ids",
    "gcv_score",
    "kernel_matrices",
    "kfold_residuals",
    "loo_residuals",
    "mae",
    "mae_interval",
    "mean_error_interval",
    "nngp_posterior",
    "nngp_variance",
    "ntk_filter",
    "ntk_gp_variance",
    "ntk_mean",
    "ntk_weights",
    "paired_error_difference",
    "paired_mae_difference",
    "r2",
    "regression_metrics",
    "rmse",
    "select_regularizer",
]
