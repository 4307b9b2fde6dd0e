"""The run of ``task: emergent-digits``: the NTK predictions (the CNN on every training set,
the C_k GCNNs), one ensemble per (k, width) and the un-augmented control, then
``report.json``, ``config.yaml``, ``metrics.csv``, ``orbit_std.png``, ``orbit_same.png``,
``ensemble_size.png`` and ``width_convergence.png``."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from molntk.ensembles import train_ensemble
from molntk.pipelines.emergent.digits import cnn, ensemble_records, ntk_predictions
from molntk.pipelines.emergent.digits_config import EmergentDigitsConfig
from molntk.pipelines.emergent.digits_data import digits_data
from molntk.pipelines.emergent.digits_plots import plot_ensemble_size, plot_orbit_measure
from molntk.pipelines.emergent.measures import loglog_slope
from molntk.pipelines.emergent.plots import plot_width_convergence
from molntk.pipelines.emergent.runs import run_setup, write_results
from molntk.scale.devices import torch_threads
from molntk.scale.progress import Progress

#: Who is measured: the ensemble mean, single members, the CNN NTK μ_s and the C_k GCNN's.
WHO = ("ensemble", "member", "ntk", "gcnn")
#: The record keys of the summary's rows for every k (last recorded step).
SUMMARY_KEYS = (
    *(f"orbit_{kind}_{who}_{name}" for kind in ("std", "same") for name in ("in", "ood") for who in WHO),
    "ntk_vs_gcnn_in",
    "ntk_vs_gcnn_ood",
    "mean_error",
    "mean_error_ood",
    "mc_error",
    *(f"accuracy_{who}" for who in WHO),
    "train_loss",
)
#: The record keys of the summary's rows for every width (k = ``augmentation.width_k``).
WIDTH_KEYS = ("mean_error", "mean_error_excess", "mc_error", "member_deviation", "orbit_std_ensemble_in", "orbit_std_member_in")


def run_emergent_digits(config: EmergentDigitsConfig, source: str, progress: Progress | None = None) -> dict[str, Any]:
    """Run the experiment, write its files and return ``{"output", "summary", "results",
    "wall_seconds"}``; ``progress("ensembles", done, total)`` after each trained ensemble."""
    setup = run_setup(config)
    device, dtype, seeds, steps = setup.device, setup.dtype, setup.seeds, setup.steps
    ens, aug = config.ensemble, config.augmentation
    plan = ens.plan(aug.k, aug.width_k) + ([(1, ens.width)] if config.unaugmented else [])  # k = 1: the control
    records: list[dict[str, Any]] = []
    with torch_threads(config.compute.threads):
        data = digits_data(config)
        tic = time.perf_counter()
        ntk = ntk_predictions(config, data, steps)
        kernel_seconds = time.perf_counter() - tic
        net, evaluate, train_seconds = cnn(config), data.x_eval.to(dtype=dtype, device=device), {}
        for done, (k, width) in enumerate(plan):
            x, y = data.augmented(k)
            tic = time.perf_counter()
            run = train_ensemble(
                lambda seed, width=width: net.finite(tuple(x.shape[1:]), width, seed=seed, dtype=dtype),
                seeds,
                x.to(dtype=dtype, device=device),
                y.to(dtype=dtype, device=device),
                evaluate,
                lr=ntk.lr,
                record=steps,
                chunk=ens.chunk,
            ).to_cpu()
            train_seconds[f"k {k} width {width}"] = time.perf_counter() - tic
            for orbit_k in aug.k if k == 1 else [k]:  # the control is measured on every C_k orbit
                records += ensemble_records(run, ntk, data, k=orbit_k, augmented=k > 1, width=width, sizes=ens.sizes)
            if progress is not None:
                progress("ensembles", done + 1, len(plan))
    summary = summarise(records, config, steps[-1])
    extra = {
        "summary": summary,
        "learning_rate": ntk.lr,
        "data": {
            "n_train": config.data.n_train,
            "n_test": config.data.n_test,
            "image_side": int(data.x_eval.shape[-1]),
            "orbit": data.order,
        },
        "kernel_seconds": kernel_seconds,
        "train_seconds": train_seconds,
    }

    def plot(folder: Path) -> None:
        plot_orbit_measure(folder / "orbit_std.png", records, ens.width, "orbit_std", "relative orbit std", log=True)
        plot_orbit_measure(folder / "orbit_same.png", records, ens.width, "orbit_same", "orbit-same predictions", log=False)
        last = [r for r in records if r["augmented"] and r["width"] == ens.width and r["step"] == steps[-1]]
        plot_ensemble_size(folder / "ensemble_size.png", last, ens.sizes)
        at_width_k = [r for r in records if r["k"] == aug.width_k]
        plot_width_convergence(folder / "width_convergence.png", at_width_k, sorted({steps[len(steps) // 2], steps[-1]}))

    return write_results(setup, config, records, extra, plot)


def summarise(records: list[dict[str, Any]], config: EmergentDigitsConfig, step: int) -> dict[str, Any]:
    """The headline numbers at the last recorded ``step``: the orbit measures, NTK agreement
    and accuracies for every k at ``ensemble.width`` (augmented, and the control measured on
    the same orbits), the NTK agreement against width at ``augmentation.width_k`` with its
    fitted log-log slopes, and the orbit std against ensemble size for every k."""
    ens, aug = config.ensemble, config.augmentation
    final = {(r["k"], r["augmented"], r["width"]): r for r in records if r["step"] == step}
    widths = sorted(w for k, augmented, w in final if k == aug.width_k and augmented)
    by_width = {w: final[(aug.width_k, True, w)] for w in widths}
    summary = {
        "step": step,
        "width": ens.width,
        "width_k": aug.width_k,
        "by_k": {str(k): {key: final[(k, True, ens.width)][key] for key in SUMMARY_KEYS} for k in aug.k},
        "by_width": {str(w): {key: by_width[w][key] for key in WIDTH_KEYS} for w in widths},
        "slope_mean_error": loglog_slope(widths, [by_width[w]["mean_error"] for w in widths]),
        "slope_mean_error_excess": loglog_slope(widths, [by_width[w]["mean_error_excess"] for w in widths]),
        "by_size": {str(k): {str(s): final[(k, True, ens.width)][f"orbit_std_E{s}_in"] for s in ens.sizes} for k in aug.k},
    }
    if config.unaugmented:
        summary["unaugmented"] = {str(k): {key: final[(k, False, ens.width)][key] for key in SUMMARY_KEYS} for k in aug.k}
    return summary
