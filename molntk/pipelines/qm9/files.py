"""The files of ``task: qm9-property`` (:mod:`molntk.pipelines.qm9`): its run, then its files.

Writes into ``results/<config name>/`` (or ``output``): ``report.json`` (records with
``model``, ``target``, ``n_train``, ``mae``, ``rmse``, ``r2``, ``unit``, ``fit_seconds``,
``predict_seconds``, ``invariance_error``, ``mae_ci95_low``/``high``, …; the paired
``comparisons`` of the models at each size, :func:`~molntk.pipelines.qm9.evaluate.paired_comparisons`;
plus the hyperparameter ``search``, whose
chosen rows flag ``hyperparameter_at_grid_edge`` when CV chose an end of a model's σ, ζ or
width grid, and kernel times), ``metrics.csv``, ``learning_curve.png`` (log–log MAE against n_train, the 43 meV
chemical-accuracy line for energies in meV; one file per target, suffixed with the
target's name when there are several), ``parity.png`` (predicted against true at the
largest n_train, one panel per model), ``calibration.png`` (for the models that give a
std: the observed fraction of test errors inside the central interval of each confidence
level against the level, at the largest n_train; the records add ``within_1sigma``,
``within_2sigma`` and ``mean_abs_z``), ``predictions.csv`` (with a ``<target>:<model>:std``
column for those models), ``config.yaml`` and ``models/<target>.molntk.npz`` (the chosen
SO(3) model of each target, fitted at the largest exact n_train:
:mod:`molntk.pipelines.qm9.models`). These are written into a staging folder beside the
output folder and moved into it together at the end, so the folder holds a complete set
of results or the one it held before; with
``cache: true`` the kernel blocks in ``kernel_cache/``, so that a killed run, rerun with
the same command, resumes and reports the same numbers; with ``compute.storage: disk``
the chosen kernels as ``.npy`` files in ``kernel_matrices/<model>-<reduction>/``.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from molntk.pipelines.files import figure, output_dir, plot_learning_curve, result_set, save_figure, write_metrics_csv, write_report
from molntk.pipelines.qm9.config import QM9PropertyConfig
from molntk.pipelines.qm9.evaluate import STD_SUFFIX
from molntk.pipelines.qm9.models import write_models
from molntk.regression import coverage_curve
from molntk.pipelines.qm9.run import run_qm9_property
from molntk.scale.progress import Progress
from molntk.utils.files import atomic_write_text

#: Chemical accuracy for energies (meV), drawn on the learning curve.
CHEMICAL_ACCURACY_MEV = 43.0
#: Confidence levels of the calibration plot.
CONFIDENCE_LEVELS = np.linspace(0.05, 0.95, 19)


def run_and_write(config: QM9PropertyConfig, source: str, progress: Progress | None = None) -> dict[str, Any]:
    """Run the pipeline (:func:`~molntk.pipelines.qm9.run.run_qm9_property`, reporting kernel
    blocks to ``progress``), write the output files, return the result (without the
    per-molecule predictions, which go to ``predictions.csv``, and the fitted models, which
    go to ``models/``) with ``output``: the folder, and ``model_files``: target → model file.
    The folder is checked writable before any work, and the result files are moved into it
    together at the end (:func:`~molntk.pipelines.files.result_set`)."""
    out = output_dir(config.name, config.output)
    cache = out / "kernel_cache" if config.cache else None
    result = run_qm9_property(config, source, progress, cache, out / "kernel_matrices")
    predictions = result.pop("predictions")
    test_targets = result.pop("test_targets")
    models = result.pop("models")
    with result_set(out) as stage:
        result["model_files"] = {target: str(out / Path(path).relative_to(stage))
                                 for target, path in write_models(stage / "models", models).items()}
        write_report(stage, config=config.to_dict(), records=result["records"],
                     extra={k: v for k, v in result.items() if k != "records"})
        write_metrics_csv(stage, result["records"])
        _write_predictions(stage, predictions, test_targets)
        for target in config.targets:
            records = [r for r in result["records"] if r["target"] == target]
            unit = result["units"][target]
            suffix = "" if len(config.targets) == 1 else f"_{target}"
            hline = (CHEMICAL_ACCURACY_MEV, "chemical accuracy (43 meV)") if unit == "meV" else None
            plot_learning_curve(stage, records, metric="mae", ylabel=f"{target} test MAE ({unit})", hline=hline,
                                filename=f"learning_curve{suffix}.png")
            by_model = predictions.get(target, {})
            means = {model: values for model, values in by_model.items() if not model.endswith(STD_SUFFIX)}
            _plot_parity(stage / f"parity{suffix}.png", target, unit, test_targets[target], means, result["sizes"][-1])
            stds = {model.removesuffix(STD_SUFFIX): values for model, values in by_model.items() if model.endswith(STD_SUFFIX)}
            if stds:
                _plot_calibration(stage / f"calibration{suffix}.png", target, test_targets[target], means, stds,
                                  result["sizes"][-1])
    result["output"] = str(out)
    return result


def _write_predictions(out: Path, predictions: dict[str, dict[str, list[float]]], truth: dict[str, list[float]]) -> None:
    """predictions.csv: one row per test molecule, columns ``<target>`` and ``<target>:<model>``."""
    columns: dict[str, list[float]] = {}
    for target, by_model in predictions.items():
        columns[target] = truth[target]
        columns.update({f"{target}:{model}": values for model, values in by_model.items()})
    atomic_write_text(out / "predictions.csv", pd.DataFrame(columns).to_csv(index_label="test_index"))


def _plot_parity(path: Path, target: str, unit: str, truth: list[float], by_model: dict[str, list[float]], n: int) -> None:
    """parity.png: predicted against true ``target`` at training size n, one panel per model (at most 4 a row)."""
    from matplotlib.ticker import MaxNLocator

    models = list(by_model)
    cols = min(4, max(1, len(models)))
    rows = max(1, math.ceil(len(models) / cols))
    y = np.asarray(truth)
    with figure(rows, cols, figsize=(3.2 * cols, 3.2 * rows), dpi=110, squeeze=False) as (fig, axes):
        for ax, model in zip(axes.flat, models):
            p = np.asarray(by_model[model])
            lo, hi = float(min(y.min(), p.min())), float(max(y.max(), p.max()))
            ax.plot([lo, hi], [lo, hi], color="grey", linewidth=0.8)
            ax.scatter(y, p, s=4, alpha=0.5)
            ax.set_title(f"{model}\nMAE {np.abs(p - y).mean():.4g} {unit}", fontsize=8)
            ax.set_xlabel(f"true {target} ({unit})", fontsize=7)
            ax.set_ylabel("predicted", fontsize=7)
            ax.tick_params(labelsize=6)
            ax.xaxis.set_major_locator(MaxNLocator(4))
            ax.yaxis.set_major_locator(MaxNLocator(4))
        for ax in list(axes.flat)[len(models):]:
            ax.axis("off")
        fig.suptitle(f"{target}: test predictions at n_train = {n}", fontsize=9)
        fig.tight_layout()
        save_figure(fig, path)


def _plot_calibration(path: Path, target: str, truth: list[float], means: dict[str, list[float]],
                      stds: dict[str, list[float]], n: int) -> None:
    """calibration.png: observed coverage (fraction of |error| ≤ Φ⁻¹((1 + p)/2) σ) against the
    confidence level p, one line per model with a std, and the diagonal of perfect calibration."""
    with figure(figsize=(4.2, 4.0), dpi=110) as (fig, ax):
        ax.plot([0, 1], [0, 1], color="grey", linewidth=0.8, label="calibrated")
        for model, std in stds.items():
            observed = coverage_curve(np.asarray(truth), np.asarray(means[model]), np.asarray(std), CONFIDENCE_LEVELS)
            ax.plot(CONFIDENCE_LEVELS, observed, marker="o", markersize=3, label=model)
        ax.set_xlabel("confidence level p (central interval of the predicted std)", fontsize=8)
        ax.set_ylabel("fraction of test errors inside", fontsize=8)
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1)
        ax.tick_params(labelsize=7)
        ax.legend(fontsize=7)
        ax.set_title(f"{target}: calibration at n_train = {n}", fontsize=9)
        fig.tight_layout()
        save_figure(fig, path)
