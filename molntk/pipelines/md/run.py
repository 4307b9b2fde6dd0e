"""The run of ``task: md-force-field``: frames → split → every model at every training size →
``report.json``, ``config.yaml``, ``metrics.csv``, ``learning_curve_energy.png`` and
``learning_curve_forces.png``.

Each record gives the energy and force MAEs with their bootstrap 95 % intervals over the
test frames (a frame's 3n force components resampled together,
:func:`~molntk.regression.mean_error_interval`), and the report's ``comparisons`` put, at
each training size and for energies and forces apart, the model of the lowest MAE against
every other one on the same frames (:mod:`molntk.pipelines.comparisons`)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
from sklearn.base import clone

from molntk.data.labelled import LabelledData, read_labelled
from molntk.data.md import md_cache_dir
from molntk.errors import InputError, MolntkError
from molntk.models.fchl19_force_field import FCHL19ForceField, SparseFCHL19ForceField
from molntk.models.force_field import SO3ForceFieldRegressor
from molntk.models.sgdml_baseline import SGDMLForceField
from molntk.models.so3_ntk import SO3NTKRegressor
from molntk.pipelines.comparisons import lowest_against_others
from molntk.pipelines.files import output_dir, plot_learning_curve, result_set, write_metrics_csv, write_report
from molntk.pipelines.md.config import MDForceFieldConfig, MDSplitConfig
from molntk.pipelines.md.fits import FOLDER, KERNEL_FOLDER, FitStore, load_fitted, predict_stored, save_fitted
from molntk.regression.metrics import mae, mean_error_interval, rmse
from molntk.scale.devices import torch_threads
from molntk.scale.progress import Progress, labelled
from molntk.utils.files import sha256_file

#: Fitted attributes reported as each model's chosen hyperparameters, where the model (or
#: its fitted regressor, ``regressor_``) has them; a sparse model's functions and the rank its
#: K_mm kept beside them.
CHOSEN = ("sigma_", "sigma_at_grid_edge_", "reg_energy_", "reg_force_", "cv_score_", "reg_at_grid_edge_",
          "noise_factorisations_", "reg_relative_", "n_inducing_", "rank_")


def frames_path(config: MDForceFieldConfig) -> Path:
    """The file of the frames: ``data.path``, or the cached trajectory of ``data.molecule``
    (InputError saying how to make it when it is missing)."""
    if config.data.path is not None:
        return config.data.path
    path = md_cache_dir() / f"{config.data.molecule}.extxyz"
    if not path.exists():
        raise InputError("data.molecule", f"no cached trajectory {path}: make it with "
                         f"`python data/md/make_md_trajectories.py --molecules {config.data.molecule}` (needs molntk[md])")
    return path


#: Key of a record's per-frame absolute errors (``energy``: |E − Ê|; ``force_sums``: Σ |F − F̂|
#: over the frame's components), kept in the fit cache and taken out by :func:`paired_comparisons`.
FRAME_ERRORS = "frame_errors"

#: Config key of each model section → the model's name in the records.
MODEL_KEYS = {"so3_forces": "so3-ntk-forces", "so3_forces_exact": "so3-ntk-forces-exact",
              "so3_forces_frames": "so3-ntk-forces-frames", "so3_energy": "so3-ntk-energy",
              "sgdml": "sgdml", "fchl19": "fchl19", "fchl19_sparse": "fchl19-sparse"}


def estimators(config: MDForceFieldConfig) -> dict[str, Any]:
    """Model name → unfitted estimator, built before any work (InputError naming the key
    of an unknown parameter)."""
    models, out = config.models, {}
    for key, make in [("so3_forces", SO3ForceFieldRegressor), ("so3_forces_exact", SO3ForceFieldRegressor),
                      ("so3_forces_frames", SO3ForceFieldRegressor), ("so3_energy", SO3NTKRegressor)]:
        section = getattr(models, key)
        if section is not None:
            try:
                out[MODEL_KEYS[key]] = make(**section.params)
            except TypeError as err:
                raise InputError(f"models.{key}.params", str(err)) from err
    if models.sgdml is not None:
        out["sgdml"] = SGDMLForceField(sigmas=tuple(models.sgdml.sigmas), use_sym=models.sgdml.use_sym,
                                       validation_fraction=models.sgdml.validation_fraction, seed=config.split.seed,
                                       max_memory_gb=models.sgdml.max_memory_gb)
    if models.fchl19 is not None:
        out["fchl19"] = FCHL19ForceField(sigmas=tuple(models.fchl19.sigmas), lambdas=tuple(models.fchl19.lambdas),
                                         validation_fraction=models.fchl19.validation_fraction, seed=config.split.seed)
    if models.fchl19_sparse is not None:
        out["fchl19-sparse"] = SparseFCHL19ForceField(inducing=models.fchl19_sparse.inducing,
                                                      sigmas=tuple(models.fchl19_sparse.sigmas))
    return out


def split(config: MDSplitConfig, n_frames: int) -> tuple[np.ndarray, np.ndarray]:
    """(test frames, training pool in order) of the seeded permutation (:class:`MDSplitConfig`)."""
    need = config.n_train[-1] + config.n_test
    if need > n_frames:
        raise InputError("split.n_train", f"the largest n_train {config.n_train[-1]} and n_test "
                         f"{config.n_test} need {need} frames; the data has {n_frames}")
    order = np.random.default_rng(config.seed).permutation(n_frames)
    return order[: config.n_test], order[config.n_test:]


def evaluate(name: str, estimator: Any, data: LabelledData, energies: np.ndarray, train: np.ndarray,
             test: np.ndarray, unit: str, kernel_cache: Path | None = None,
             progress: Progress | None = None, model_file: Path | None = None) -> dict[str, Any]:
    """Fit ``estimator`` on the frames ``train`` (energies and forces; the energy-only
    model ignores the forces), predict energies and forces of ``test``: one record.
    ``kernel_cache``: where an exact SO(3) force field, or one on inducing frames, stores its
    joint kernel's rows (a killed fit resumes; :meth:`SO3ForceFieldRegressor.fit`). ``progress``:
    such a force field's kernel blocks and prediction batches, labelled ``"<name> N=<n>
    kernel"``, ``"… factor"`` (the upper storage's factorisation) and ``"… predict"``
    (:meth:`SO3ForceFieldRegressor.fit`, :func:`~molntk.pipelines.md.fits.predict_stored`).
    ``model_file``: where such a force field is stored once fitted, and read instead of
    fitting when it is there (:func:`~molntk.pipelines.md.fits.load_fitted`); its predictions
    are kept beside it a batch at a time (:func:`~molntk.pipelines.md.fits.predict_stored`)."""
    pick = lambda rows: [data.molecules[i] for i in rows]  # noqa: E731
    forces = [data.forces[i] for i in train]
    stored = load_fitted(model_file) if isinstance(estimator, SO3ForceFieldRegressor) else None
    tic = time.perf_counter()
    if stored is not None:
        estimator, fit_seconds = stored
    elif isinstance(estimator, SO3NTKRegressor):
        estimator.fit(pick(train), energies[train])
    elif isinstance(estimator, SO3ForceFieldRegressor):
        estimator.fit(pick(train), energies[train], forces,
                      kernel_cache=kernel_cache if estimator.inducing is None else None,
                      progress=labelled(progress, f"{name} N={len(train)} kernel"),
                      factor_progress=labelled(progress, f"{name} N={len(train)} factor"))
    else:
        estimator.fit(pick(train), energies[train], forces)
    if stored is None:
        fit_seconds = time.perf_counter() - tic
        if isinstance(estimator, SO3ForceFieldRegressor):
            save_fitted(model_file, estimator, fit_seconds)
    if isinstance(estimator, SO3ForceFieldRegressor):
        e_pred, f_pred, predict_seconds = predict_stored(estimator, pick(test), model_file,
                                                         labelled(progress, f"{name} N={len(train)} predict"))
    else:
        tic = time.perf_counter()
        e_pred, f_pred = estimator.predict_forces(pick(test), return_energy=True)
        predict_seconds = time.perf_counter() - tic
    f_true, f_flat = np.concatenate([data.forces[i] for i in test]).ravel(), np.concatenate(f_pred).ravel()
    energy_errors = np.abs(energies[test] - np.asarray(e_pred))
    force_sums = np.array([np.abs(np.asarray(data.forces[i]) - np.asarray(f)).sum() for i, f in zip(test, f_pred)])
    energy_ci = mean_error_interval(energy_errors)
    force_ci = mean_error_interval(force_sums, force_counts(data, test))
    return {
        "model": name, "n_train": len(train), "n_test": len(test),
        "energy_mae": mae(energies[test], e_pred), "energy_mae_ci95_low": energy_ci[0], "energy_mae_ci95_high": energy_ci[1],
        "energy_rmse": rmse(energies[test], e_pred),
        "force_mae": mae(f_true, f_flat), "force_mae_ci95_low": force_ci[0], "force_mae_ci95_high": force_ci[1],
        "force_rmse": rmse(f_true, f_flat),
        "energy_unit": unit, "force_unit": f"{unit}/Å",
        "fit_seconds": fit_seconds, "predict_seconds": predict_seconds,
        "chosen": chosen_hyperparameters(estimator),
        FRAME_ERRORS: {"energy": energy_errors.tolist(), "force_sums": force_sums.tolist()},
    }


def force_counts(data: LabelledData, frames: np.ndarray) -> np.ndarray:
    """The number of force components 3n of each of ``frames``."""
    return np.array([np.asarray(data.forces[i]).size for i in frames], dtype=np.float64)


def paired_comparisons(records: list[dict[str, Any]], counts: np.ndarray) -> list[dict[str, Any]]:
    """At each training size, for ``energy`` and ``forces`` apart (``quantity``), the lowest MAE
    against every other model on the same test frames (:func:`~molntk.pipelines.comparisons.lowest_against_others`;
    ``counts``: the test frames' force components): rows ``{"quantity", "n_train", "model",
    "against", "mae_difference", "ci95_low", "ci95_high", "resolved"}``. Takes each record's
    per-frame errors out of it; a record without them (stored by an earlier molntk) is not
    compared."""
    by_size: dict[int, list[tuple[str, dict[str, Any], dict[str, list[float]]]]] = {}
    for record in records:
        errors = record.pop(FRAME_ERRORS, None)
        if errors is not None:
            by_size.setdefault(record["n_train"], []).append((record["model"], record, errors))
    rows = []
    for n, entries in by_size.items():
        for quantity, key, errors_key, per_frame in (("energy", "energy_mae", "energy", None),
                                                      ("forces", "force_mae", "force_sums", counts)):
            scores = [(model, record[key], np.asarray(errors[errors_key])) for model, record, errors in entries]
            rows += [{"quantity": quantity, "n_train": n, **row} for row in lowest_against_others(scores, per_frame)]
    return rows


def chosen_hyperparameters(estimator: Any) -> dict[str, Any]:
    """The :data:`CHOSEN` attributes the fitted estimator (or its ``regressor_``) has."""
    holders = [estimator, getattr(estimator, "regressor_", None)]
    return {key: getattr(h, key) for h in holders if h is not None for key in CHOSEN if getattr(h, key, None) is not None}


def run_md_force_field(config: MDForceFieldConfig, source: str, progress: Progress | None = None) -> dict[str, Any]:
    """Run the learning curves, write the files and return ``{"output", "results", "comparisons"
    (:func:`paired_comparisons`), "data",
    "failures", "failed_fits", "skipped_fits", "wall_seconds"}``; ``progress("fits", done,
    total)`` after each fit, and within the SO(3) force fields' fits their kernel blocks and
    prediction batches (:func:`evaluate`). A model is fitted at the sizes up to its ``max_n_train``; the
    others are listed in ``skipped_fits``. Each fit's record is stored as it finishes
    (:mod:`~molntk.pipelines.md.fits`, ``cache: true``): a rerun resumes, and an exact SO(3)
    force field or one on inducing frames stores its joint kernel's rows as they are computed
    (``kernel_cache/``), so a fit killed halfway resumes too; an SO(3) force field is stored
    once fitted, before its predictions (``fit_cache/<key>.molntk.npz``), and its predictions a batch
    at a time (``fit_cache/<key>.predictions/``). A fit that raises is reported in ``failed_fits`` ({model,
    n_train, error}) and the others go on; MolntkError when every fit failed."""
    start = time.perf_counter()
    out = output_dir(config.name, config.output)  # checked before any work
    models = estimators(config)
    path = frames_path(config)
    data = read_labelled(path, [config.data.energy_key], forces=True)
    energies = np.asarray(data.targets[config.data.energy_key], dtype=np.float64)
    test, pool = split(config.split, len(data.molecules))
    frames_sha256 = sha256_file(path)  # in the fit cache's keys and the report
    store = FitStore(out / FOLDER if config.cache else None, frames_sha256,
                     {"energy_key": config.data.energy_key, "energy_unit": config.data.energy_unit,
                      "seed": config.split.seed, "n_test": config.split.n_test})
    caps = {name: getattr(config.models, key).max_n_train for key, name in MODEL_KEYS.items() if name in models}
    runs = [(n, name) for n in config.split.n_train for name in models if caps[name] is None or n <= caps[name]]
    skipped = [{"model": name, "n_train": n, "max_n_train": caps[name]}
               for n in config.split.n_train for name in models if caps[name] is not None and n > caps[name]]
    records: list[dict[str, Any]] = []
    failed: list[dict[str, Any]] = []
    with torch_threads(config.compute.threads):
        for done, (n, name) in enumerate(runs):
            params = models[name].get_params(deep=False)
            record = store.load(name, params, n)
            if record is None:
                try:
                    record = evaluate(name, clone(models[name]), data, energies, pool[:n], test, config.data.energy_unit,
                                      out / KERNEL_FOLDER if config.cache else None, progress,
                                      store.model_file(name, params, n))
                except Exception as err:  # a batch job: report the fit, go on with the others
                    failed.append({"model": name, "n_train": n, "error": f"{type(err).__name__}: {err}"})
                else:
                    store.save(name, params, n, record)
            if record is not None:
                records.append(record)
            if progress is not None:
                progress("fits", done + 1, len(runs))
    if not records:
        raise MolntkError("md-force-field: every fit failed: " + "; ".join(
            f"{f['model']} at n_train {f['n_train']}: {f['error']}" for f in failed))
    comparisons = paired_comparisons(records, force_counts(data, test))
    described = {"file": str(path), "sha256": frames_sha256, "n_frames": len(data.molecules),
                 "formula": data.molecules[0].formula, "n_atoms": data.molecules[0].n_atoms,
                 "energy_key": config.data.energy_key}
    failures = [failure.message for failure in data.failures]
    unit = config.data.energy_unit
    with result_set(out) as stage:
        plot_learning_curve(stage, records, metric="energy_mae", ylabel=f"energy MAE ({unit})",
                            filename="learning_curve_energy.png")
        plot_learning_curve(stage, records, metric="force_mae", ylabel=f"force component MAE ({unit}/Å)",
                            filename="learning_curve_forces.png")
        wall = time.perf_counter() - start
        write_report(stage, config=config.to_dict(), records=records,
                     extra={"comparisons": comparisons, "data": described, "read_failures": failures, "failed_fits": failed,
                            "skipped_fits": skipped, "test_frames": test.tolist(), "wall_seconds": wall})
        write_metrics_csv(stage, [{k: v for k, v in r.items() if k != "chosen"} for r in records])
    return {"output": str(out), "results": records, "comparisons": comparisons, "data": described, "failures": failures,
            "failed_fits": failed, "skipped_fits": skipped, "wall_seconds": wall}
