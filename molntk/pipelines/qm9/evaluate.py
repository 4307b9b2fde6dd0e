"""Records of a ``qm9-property`` run (step 4 of :mod:`molntk.pipelines.qm9`).

- the dressed-atom model: y ≈ Σ_Z c_Z n_Z (n_Z: the molecule's atoms of element Z), a
  least-squares fit on the training molecules (:class:`~molntk.regression.DressedAtomModel`);
  it is the floor of every learning curve and, for extensive energies, the baseline
  whose residual y − Σ_Z c_Z n_Z the kernel models learn;
- a record: MAE, RMSE and R² of the test predictions (:func:`~molntk.regression.regression_metrics`),
  the bootstrap 95 % interval of the MAE over the test molecules (``mae_ci95_low``,
  ``mae_ci95_high``: :func:`~molntk.regression.mae_interval`), with the model, target,
  training size, unit, times and what else a model adds;
- the paired comparisons: at each target and training size, the model of the lowest test
  MAE against every other, MAE(other) − MAE(lowest) with its paired bootstrap 95 %
  interval over the same test molecules; ``resolved`` when the interval lies above 0, i.e.
  the test molecules tell the two models apart (:func:`paired_comparisons`,
  :mod:`molntk.pipelines.comparisons`);
- the invariance error: the standard deviation of a molecule's predictions over its
  original and its rotated copies, averaged over the invariance set, in target units;
- the calibration of a model that gives a predictive std (exact kernel ridge by
  eigendecomposition: the GP posterior with its amplitude fitted by leave-one-out on the
  training molecules, :mod:`molntk.regression.calibration`): the fractions of test errors
  within 1σ and 2σ of y's std and the mean |error|/σ (:func:`~molntk.regression.calibration_metrics`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from molntk.data.molecule import Molecule
from molntk.data.qm9 import QM9_ELEMENTS
from molntk.pipelines.comparisons import lowest_against_others
from molntk.pipelines.qm9.sets import QM9Sets
from molntk.regression import DressedAtomModel, calibration_metrics, element_counts, mae_interval, regression_metrics

#: Suffix of the key of a model's test-set std beside its predictions (``"<model>:std"``).
STD_SUFFIX = ":std"
#: Key of a record's absolute test errors |y − ŷ| (an array), taken out by :func:`paired_comparisons`.
TEST_ERRORS = "test_errors"


def dressed_atom(train: Sequence[Molecule], y_train: np.ndarray, *others: Sequence[Molecule],
                 elements: Sequence[int] = QM9_ELEMENTS) -> tuple[np.ndarray, ...]:
    """Dressed-atom predictions (fitted on ``train``, one coefficient per element of
    ``elements``) for ``train`` and each of ``others``."""
    model = DressedAtomModel().fit(element_counts(train, elements), y_train)
    return tuple(model.predict(element_counts(mols, elements)) for mols in (train, *others))


def residual_targets(sets: QM9Sets, target: str, residual: bool, n: int) -> np.ndarray:
    """Targets of the first n training molecules, minus their dressed-atom fit when ``residual``."""
    y = sets.train_targets[target][:n]
    if not residual:
        return y
    return y - dressed_atom(sets.train_molecules[:n], y, elements=sets.composition.elements)[0]


def invariance_error(pred_test: np.ndarray, pred_rot: np.ndarray, n_rotations: int) -> float | None:
    """mean over molecules of std(prediction over the original and its rotated copies)."""
    if pred_rot.size == 0:
        return None
    n = pred_rot.shape[0] // n_rotations
    orbit = np.concatenate([pred_test[:n, None], pred_rot.reshape(n, n_rotations)], axis=1)
    return float(orbit.std(axis=1).mean())


def metrics_record(model: str, target: str, n: int, unit: str, y_true: np.ndarray, y_pred: np.ndarray,
                   **extra: Any) -> dict[str, Any]:
    """``{"model", "target", "n_train", "mae", "mae_ci95_low", "mae_ci95_high", "rmse", "r2", "unit",
    **extra, "test_errors"}`` of test predictions ``y_pred`` (module docstring; ``test_errors``:
    |y − ŷ| per molecule, for :func:`paired_comparisons`, which takes it out)."""
    metrics = regression_metrics(y_true, y_pred)
    low, high = mae_interval(y_true, y_pred)
    return {"model": model, "target": target, "n_train": n, "mae": metrics["mae"], "mae_ci95_low": low,
            "mae_ci95_high": high, "rmse": metrics["rmse"], "r2": metrics["r2"], "unit": unit, **extra,
            TEST_ERRORS: np.abs(np.asarray(y_true) - np.asarray(y_pred))}


def paired_comparisons(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The paired comparisons of the module docstring (:func:`~molntk.pipelines.comparisons.lowest_against_others`
    per target and training size), one row per pair: ``{"target", "n_train", "model"`` (the
    lowest test MAE at that size), ``"against", "mae_difference"`` (≥ 0), ``"ci95_low",
    "ci95_high", "resolved"}``. Takes each record's test errors out of it (``records`` are
    then as written to the report)."""
    groups: dict[tuple[str, int], list[tuple[str, float, np.ndarray]]] = {}
    for record in records:
        errors = record.pop(TEST_ERRORS)
        groups.setdefault((record["target"], record["n_train"]), []).append((record["model"], record["mae"], errors))
    return [{"target": target, "n_train": n, **row}
            for (target, n), scores in groups.items() for row in lowest_against_others(scores)]


def dressed_atom_records(sets: QM9Sets, targets: list[str], records: list, predictions: dict) -> None:
    """The dressed-atom floor for each target and training size (appended to ``records``;
    its test predictions at the largest size into ``predictions[target]["dressed-atom"]``)."""
    for target in targets:
        for n in sets.sizes:
            start = time.perf_counter()
            _, pred = dressed_atom(sets.train_molecules[:n], sets.train_targets[target][:n], sets.test_molecules,
                                   elements=sets.composition.elements)
            seconds = time.perf_counter() - start
            records.append(
                metrics_record("dressed-atom", target, n, sets.units[target], sets.test_targets[target], pred,
                               fit_seconds=seconds, predict_seconds=0.0,
                               invariance_error=0.0 if sets.n_rotated else None, hyperparameters="per-element linear")
            )
            if n == sets.sizes[-1]:
                predictions.setdefault(target, {})["dressed-atom"] = pred.tolist()


#: Fitted attributes reported with a kernel model's record when its solver has them.
SOLVER_DIAGNOSTICS = ("condition_number", "eigenvalues_clipped", "iterations", "jitter")


def solver_diagnostics(model: Any) -> dict[str, Any]:
    """{name: model.<name>_} for the :data:`SOLVER_DIAGNOSTICS` the fitted ``model`` has (the
    direct and Nyström solvers: condition number, K_mm eigenvalues dropped, the Nyström
    solver's relative jitter (0 unless its factorisation is a Cholesky); Falkon: PCG
    iterations, relative jitter)."""
    return {name: getattr(model, name + "_") for name in SOLVER_DIAGNOSTICS if hasattr(model, name + "_")}


def evaluate_model(sets: QM9Sets, name: str, target: str, residual: bool, n: int, predictions: dict, *,
                   fit: Callable[[np.ndarray], Any], test_kernel: np.ndarray, rotated_kernel: np.ndarray,
                   kernel_seconds: tuple[float, float], hyperparameters: str, test_diag: np.ndarray | None = None,
                   **extra: Any) -> dict[str, Any]:
    """The record of one kernel model at training size n: the dressed-atom model (when
    ``residual``), ``fit`` on the residual targets of the first n training molecules (a
    fitted regressor with ``predict`` and the fitted attributes ``reg_relative_``, ``solver_``,
    ``cv_result_`` and the solver diagnostics it has of ``condition_number_``,
    ``eigenvalues_clipped_``, ``iterations_``, ``jitter_``), predictions from its kernels against
    the test set and the rotated copies; the record gives the cross-validation criterion
    (``cv_criterion``: loo, kfold or gcv) and its error on the training molecules at the chosen
    λ in target units (``cv_error``: the RMSE, or the MAE with ``regression.cv_loss:
    absolute``; None each where λ was not chosen by CV); ``kernel_seconds`` (training, test) are added to
    the measured fit and predict times; ``extra`` goes into the record. With ``test_diag``
    (the test molecules' self-kernels) a model that gives a std (a fitted ``amplitude_``) is
    scored by :func:`calibration` (not timed); its std at the largest size goes beside its
    predictions as ``"<name>:std"``."""
    y = sets.train_targets[target][:n]
    start = time.perf_counter()
    if residual:
        base_train, base_test, base_rot = dressed_atom(sets.train_molecules[:n], y, sets.test_molecules, sets.rotated_molecules,
                                                       elements=sets.composition.elements)
    else:
        base_train, base_test, base_rot = np.zeros(n), np.zeros(sets.n_test), np.zeros(sets.n_rotated)
    model = fit(y - base_train)
    fit_seconds = kernel_seconds[0] + time.perf_counter() - start
    start = time.perf_counter()
    pred = base_test + model.predict(test_kernel)
    predict_seconds = kernel_seconds[1] + time.perf_counter() - start
    pred_rot = base_rot + model.predict(rotated_kernel) if sets.n_rotated else np.zeros(0)
    cv = model.cv_result_
    if n == sets.sizes[-1]:
        predictions.setdefault(target, {})[name] = pred.tolist()
    if test_diag is not None:
        extra |= calibration(model, test_kernel, test_diag, sets.test_targets[target] - base_test, predictions,
                             target, name if n == sets.sizes[-1] else None)
    return metrics_record(
        name, target, n, sets.units[target], sets.test_targets[target], pred,
        fit_seconds=fit_seconds, predict_seconds=predict_seconds,
        invariance_error=invariance_error(pred, pred_rot, sets.n_rotations),
        hyperparameters=hyperparameters, reg_relative=model.reg_relative_, solver=model.solver_,
        reg_at_grid_edge=None if cv is None else cv.at_grid_edge, cv_criterion=None if cv is None else cv.criterion,
        cv_error=None if cv is None else cv.best_error * float(np.mean(model.target_scale_)),
        **solver_diagnostics(model), **extra,
    )


def calibration(model: Any, test_kernel: np.ndarray, test_diag: np.ndarray, residual_truth: np.ndarray,
                predictions: dict, target: str, name: str | None) -> dict[str, Any]:
    """``{"within_1sigma", "within_2sigma", "mean_abs_z"}`` of the std of y that ``model`` gives
    from its test kernel and the test self-kernels (None each when it gives none, or a std
    that is not > 0); with ``name`` its std goes into ``predictions[target]["<name>:std"]``."""
    if getattr(model, "amplitude_", None) is None:
        return {}
    mean, std = model.predict(test_kernel, test_diag, return_std=True)
    if not np.all(std > 0):
        return {"within_1sigma": None, "within_2sigma": None, "mean_abs_z": None}
    if name is not None:
        predictions[target][name + STD_SUFFIX] = std.tolist()
    metrics = calibration_metrics(residual_truth, mean, std)
    return {key: metrics[key] for key in ("within_1sigma", "within_2sigma", "mean_abs_z")}
