"""How ``molntk run`` prints each task's result: one show function per task of
:data:`molntk.pipelines.tasks.TASKS`, registered in :data:`SHOW`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from molntk.cli.output import print_qm9_summary, print_results_table, stdout
from molntk.pipelines.emergent import EmergentDigitsConfig, EmergentIsingConfig, EmergentSO3Config
from molntk.pipelines.images import ImageClassificationConfig
from molntk.pipelines.md import MDForceFieldConfig
from molntk.pipelines.qm9 import QM9PropertyConfig
from molntk.pipelines.qm9_summary import QM9SummaryConfig

#: Columns of the image-classification table: (record key, header, format).
IMAGE_COLUMNS = [
    ("model", "model", ""),
    ("n_train", "n_train", "d"),
    ("accuracy", "accuracy", ".3f"),
    ("orbit_same_predictions", "orbit same", ".2f"),
    ("n_rotations", "of n", "d"),
    ("orbit_accuracy", "orbit acc.", ".3f"),
    ("reg_relative", "λ/mean diag", ".0e"),
    ("kernel_seconds", "kernel s", ".1f"),
    ("fit_seconds", "fit s", ".3f"),
    ("predict_seconds", "predict s", ".4f"),
]


def print_comparisons(rows: list[dict[str, Any]], leading: list[tuple[str, str, str]], difference: str,
                      title: str) -> None:
    """A report's paired comparisons (:mod:`molntk.pipelines.comparisons`) as a table: the
    ``leading`` columns, the lowest-MAE model, the other one, the MAE difference (header
    ``difference``) with its paired 95 % interval, and "yes"/"no" for resolved."""
    columns = [*leading, ("model", "lowest MAE", "s"), ("against", "against", "s"), ("mae_difference", difference, ".3g"),
               ("ci95_low", "paired 95 % CI", ".3g"), ("ci95_high", "", ".3g"), ("resolved", "resolved", "s")]
    print_results_table([{**row, "resolved": "yes" if row["resolved"] else "no"} for row in rows], columns, title)


def show_qm9_summary(config: QM9SummaryConfig, result: dict[str, Any]) -> None:
    """Tables of a ``qm9-summary`` result."""
    print_qm9_summary(result, title=f"{config.name}: QM9 ({config.data.source})")


def show_image_classification(config: ImageClassificationConfig, result: dict[str, Any]) -> None:
    """The records of an ``image-classification`` result as a table, then where the files are."""
    print_results_table(result["results"], IMAGE_COLUMNS, f"{config.name}: {result['data']}")
    stdout().print(f"{result['wall_seconds']:.1f} s; report, metrics.csv and plots in {result['output']}/")


def show_qm9_property(config: QM9PropertyConfig, result: dict[str, Any]) -> None:
    """Rich tables of a ``qm9-property`` result: per target, every model × n_train with the
    MAE's bootstrap 95 % interval, and the lowest-MAE model against each other one (paired
    95 % interval of the MAE difference; "yes" when the test set tells them apart); then the
    hyperparameter choices (marked "grid edge" when CV chose an end of the model's grid);
    then where the report and the saved models are."""
    for target in config.targets:
        records = [r for r in result["records"] if r["target"] == target]
        unit = result["units"][target]
        print_results_table(
            records,
            [("model", "model", "s"), ("n_train", "n_train", "d"), ("mae", f"MAE ({unit})", ".4g"),
             ("mae_ci95_low", "95 % CI", ".4g"), ("mae_ci95_high", "", ".4g"),
             ("rmse", f"RMSE ({unit})", ".4g"), ("r2", "R²", ".4f"), ("invariance_error", f"rot. std ({unit})", ".2e"),
             ("fit_seconds", "fit s", ".2f"), ("predict_seconds", "predict s", ".2f")],
            title=f"{config.name}: {target} on {result['n_test']} test molecules ({result['device']}, {result['dtype']})",
        )
        print_comparisons([c for c in result["comparisons"] if c["target"] == target], [("n_train", "n_train", "d")],
                          f"MAE difference ({unit})",
                          f"{target}: the lowest MAE against the other models, on the same test molecules")
    chosen = [{**r, "candidate": r["candidate"] + (" (grid edge)" if r.get("hyperparameter_at_grid_edge") else "")}
              for r in result["search"] if r.get("chosen")]
    cv_error = ("cv_mae", "CV MAE", ".4g") if any("cv_mae" in r for r in chosen) else ("cv_rmse", "CV RMSE", ".4g")
    print_results_table(chosen, [("model", "model", "s"), ("candidate", "chosen hyperparameters", "s"), cv_error],
                        title="hyperparameters chosen on training data")
    failures = result.get("read_failures", [])
    if failures:
        print(f"{len(failures)} item(s) of the data file not used:")
        for message in failures:
            print(f"  {message}")
    print(f"report: {result['output']}/report.json")
    for target, path in result["model_files"].items():
        print(f"model ({target}): {path}")


#: Columns of the emergent-ising table (last recorded step): (record key, header, format).
EMERGENT_COLUMNS = [
    ("augmented", "augmented", ""),
    ("width", "width", "d"),
    ("mean_error", "ens. mean vs NTK", ".3g"),
    ("mean_error_excess", "its bias", ".3g"),
    ("mc_error", "MC error", ".3g"),
    ("member_deviation", "member vs NTK", ".3g"),
    ("orbit_std_ensemble_in", "orbit std ens. (in)", ".3g"),
    ("orbit_std_member_in", "member (in)", ".3g"),
    ("orbit_std_ensemble_ood", "ens. (ood)", ".3g"),
    ("orbit_std_member_ood", "member (ood)", ".3g"),
    ("test_rmse_ensemble", "test RMSE", ".3f"),
]


def show_emergent_ising(config: EmergentIsingConfig, result: dict[str, Any]) -> None:
    """The records of the last recorded step as a table, the fitted slope and orbit-std
    ratio, then where the files are."""
    summary = result["summary"]
    last = [r for r in result["results"] if r["step"] == summary["step"]]
    print_results_table(last, EMERGENT_COLUMNS, f"{config.name}: step {summary['step']}, {last[0]['members']} members per width")
    slopes = [summary["slope_mean_error"], summary["slope_mean_error_excess"]]
    raw, bias = ("n/a" if s is None else format(s, ".2f") for s in slopes)
    stdout().print(
        f"ensemble mean vs NTK: log-log slope {raw} against width ({bias} for its bias); "
        f"orbit std ensemble / member at width {summary['largest_width']}: "
        f"{summary['orbit_ratio_in']:.3f} (in), {summary['orbit_ratio_ood']:.3f} (ood)"
    )
    stdout().print(f"{result['wall_seconds']:.1f} s; report, metrics.csv and plots in {result['output']}/")


#: Columns of the emergent-so3 table (last recorded step): (record key, header, format).
EMERGENT_SO3_COLUMNS = [
    ("k", "k", "d"),
    ("width", "width", "d"),
    ("rotation_std_ensemble", "rot. std ensemble", ".3g"),
    ("rotation_std_member", "member", ".3g"),
    ("rotation_std_ntk", "aug. MLP NTK", ".3g"),
    ("rotation_std_so3", "SO(3) NTK", ".3g"),
    ("test_mae_ensemble", "test MAE ens.", ".3f"),
    ("test_mae_ntk", "NTK", ".3f"),
]


def show_emergent_so3(config: EmergentSO3Config, result: dict[str, Any]) -> None:
    """The records of the last recorded step as a table (rotation std and MAE in units of
    σ_y), the rotation std against ensemble size, then where the files are."""
    summary = result["summary"]
    last = [r for r in result["results"] if r["step"] == summary["step"]]
    print_results_table(last, EMERGENT_SO3_COLUMNS, f"{config.name}: step {summary['step']}, {last[0]['members']} members")
    sizes = ", ".join(f"E={s}: {v:.3g}" for s, v in summary["by_size"].items())
    stdout().print(f"rotation std of the ensemble mean (k = {summary['width_k']}, width {summary['width']}): {sizes}")
    stdout().print(f"{result['wall_seconds']:.1f} s; report, metrics.csv and plot in {result['output']}/")


#: Columns of the emergent-digits table (last recorded step): (record key, header, format).
EMERGENT_DIGITS_COLUMNS = [
    ("k", "C_k", "d"),
    ("augmented", "augmented", ""),
    ("width", "width", "d"),
    ("orbit_std_ensemble_in", "orbit std ens. (in)", ".3g"),
    ("orbit_std_member_in", "member", ".3g"),
    ("orbit_std_ntk_in", "CNN NTK", ".2g"),
    ("orbit_std_gcnn_in", "GCNN NTK", ".2g"),
    ("orbit_std_ensemble_ood", "ens. (ood)", ".3g"),
    ("orbit_same_ensemble_in", "orbit same ens.", ".3f"),
    ("orbit_same_member_in", "member", ".3f"),
    ("ntk_vs_gcnn_in", "CNN vs GCNN NTK", ".2g"),
    ("mean_error", "ens. vs NTK", ".3g"),
    ("accuracy_ensemble", "accuracy", ".3f"),
]


def show_emergent_digits(config: EmergentDigitsConfig, result: dict[str, Any]) -> None:
    """The records of the last recorded step as a table, the orbit std against ensemble
    size, then where the files are."""
    summary = result["summary"]
    last = [r for r in result["results"] if r["step"] == summary["step"]]
    print_results_table(last, EMERGENT_DIGITS_COLUMNS, f"{config.name}: step {summary['step']}, {last[0]['members']} members")
    for k, sizes in summary["by_size"].items():
        spread = ", ".join(f"E={s}: {v:.3g}" for s, v in sizes.items())
        stdout().print(f"orbit std of the ensemble mean (C{k}, width {summary['width']}, in distribution): {spread}")
    stdout().print(f"{result['wall_seconds']:.1f} s; report, metrics.csv and plots in {result['output']}/")


#: Columns of the md-force-field table: (record key, header, format).
MD_COLUMNS = [
    ("model", "model", "s"),
    ("n_train", "n_train", "d"),
    ("energy_mae", "energy MAE", ".4g"),
    ("energy_mae_ci95_low", "95 % CI", ".3g"),
    ("energy_mae_ci95_high", "", ".3g"),
    ("force_mae", "force MAE", ".4g"),
    ("force_mae_ci95_low", "95 % CI", ".3g"),
    ("force_mae_ci95_high", "", ".3g"),
    ("energy_rmse", "energy RMSE", ".4g"),
    ("force_rmse", "force RMSE", ".4g"),
    ("fit_seconds", "fit s", ".1f"),
    ("predict_seconds", "predict s", ".1f"),
]


def show_md_force_field(config: MDForceFieldConfig, result: dict[str, Any]) -> None:
    """The records as a table (energy unit and its unit per Å; each MAE with its bootstrap
    95 % interval over the test frames), the lowest MAE against the other models on the same
    frames ("yes" when the frames tell them apart), read failures, failed and skipped fits if
    any, then where the files are."""
    data = result["data"]
    unit = config.data.energy_unit
    print_results_table(result["results"], MD_COLUMNS,
                        f"{config.name}: {data['formula']}, {result['results'][0]['n_test']} test frames "
                        f"(energies in {unit}, forces in {unit}/Å)")
    if result["comparisons"]:
        print_comparisons(result["comparisons"], [("n_train", "n_train", "d"), ("quantity", "quantity", "s")],
                          "MAE difference", "the lowest MAE against the other models, on the same test frames")
    for failure in result["failures"]:
        stdout().print(f"not read: {failure}")
    for fit in result["failed_fits"]:
        stdout().print(f"failed: {fit['model']} at n_train {fit['n_train']}: {fit['error']}")
    for fit in result["skipped_fits"]:
        stdout().print(f"not fitted: {fit['model']} at n_train {fit['n_train']} (its max_n_train is {fit['max_n_train']})")
    stdout().print(f"{result['wall_seconds']:.1f} s; report, metrics.csv and plots in {result['output']}/")


#: Task name → how its result is printed; every task of :data:`molntk.pipelines.tasks.TASKS` has one.
SHOW: dict[str, Callable[[Any, dict[str, Any]], None]] = {
    "qm9-summary": show_qm9_summary,
    "image-classification": show_image_classification,
    "qm9-property": show_qm9_property,
    "emergent-ising": show_emergent_ising,
    "emergent-so3": show_emergent_so3,
    "emergent-digits": show_emergent_digits,
    "md-force-field": show_md_force_field,
}
