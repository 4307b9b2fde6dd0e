"""The run of ``task: emergent-ising``: the NTK prediction, one ensemble per width (and the
un-augmented control), then ``report.json``, ``config.yaml``, ``metrics.csv``,
``width_convergence.png`` and ``orbit_std.png``."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from molntk.ensembles import kernel_learning_rate, train_ensemble
from molntk.pipelines.emergent.config import EmergentIsingConfig
from molntk.pipelines.emergent.ising import ensemble_records, ising_data, ising_network
from molntk.pipelines.emergent.measures import loglog_slope, ntk_prediction
from molntk.pipelines.emergent.plots import plot_orbit_std, plot_width_convergence
from molntk.pipelines.emergent.runs import run_setup, write_results
from molntk.scale.devices import torch_threads
from molntk.scale.progress import Progress

#: The target of the experiment: the ensemble's relative orbit std at most this fraction of a single member's.
ORBIT_TARGET = 0.1


def run_emergent_ising(config: EmergentIsingConfig, source: str, progress: Progress | None = None) -> dict[str, Any]:
    """Run the experiment, write its files and return ``{"output", "summary", "results",
    "wall_seconds"}``; ``progress("ensembles", done, total)`` after each trained ensemble."""
    setup = run_setup(config)
    device, dtype, seeds, steps = setup.device, setup.dtype, setup.seeds, setup.steps
    ens, lattice = config.ensemble, config.data.lattice
    records: list[dict[str, Any]] = []
    with torch_threads(config.compute.threads):
        data, net = ising_data(config), ising_network(config)
        tic = time.perf_counter()
        sets = {True: (data.x_aug, data.y_aug)} | ({False: (data.x_train, data.y_train)} if config.unaugmented else {})
        train_kernels = {augmented: net.kernel(x) for augmented, (x, _) in sets.items()}
        # one η for every run, stable for each training set
        lr = min(kernel_learning_rate(k.ntk.numpy(), config.training.lr_scale) for k in train_kernels.values())
        ntk = {
            augmented: ntk_prediction(train_kernels[augmented], net.kernel(data.x_eval, x), y, lr=lr, steps=steps)
            for augmented, (x, y) in sets.items()
        }
        kernel_seconds = time.perf_counter() - tic
        runs = [(True, w) for w in ens.widths] + ([(False, ens.widths[-1])] if config.unaugmented else [])
        train_seconds = {}
        for done, (augmented, width) in enumerate(runs):
            x, y = sets[augmented]
            tic = time.perf_counter()
            run = train_ensemble(
                lambda seed, width=width: net.finite((1, lattice, lattice), width, seed=seed, dtype=dtype),
                seeds,
                x.to(dtype=dtype, device=device),
                y.to(dtype=dtype, device=device),
                data.x_eval.to(dtype=dtype, device=device),
                lr=lr,
                record=steps,
                chunk=ens.chunk,
            )
            train_seconds[f"{'augmented' if augmented else 'unaugmented'} width {width}"] = time.perf_counter() - tic
            records += ensemble_records(run.to_cpu(), ntk[augmented], data, lattice, width=width, augmented=augmented)
            if progress is not None:
                progress("ensembles", done + 1, len(runs))
    summary = _summary(records, ens.widths, steps)
    extra = {
        "summary": summary,
        "learning_rate": lr,
        "data": {
            "lattice": lattice,
            "n_train": config.data.n_train,
            "n_augmented": len(data.x_aug),
            "n_test": config.data.n_test,
        },
        "kernel_seconds": kernel_seconds,
        "train_seconds": train_seconds,
    }

    def plot(folder: Path) -> None:
        plot_width_convergence(folder / "width_convergence.png", records, _plotted_steps(steps))
        plot_orbit_std(folder / "orbit_std.png", records, ens.widths[-1])

    return write_results(setup, config, records, extra, plot)


def _plotted_steps(steps: tuple[int, ...]) -> list[int]:
    """Three recorded steps for the width plot: the middle one (of the log-spaced records),
    the one at three quarters and the last."""
    return sorted({steps[len(steps) // 2], steps[3 * len(steps) // 4], steps[-1]})


def _augmented_at(records: list[dict[str, Any]], step: int) -> dict[int, dict[str, Any]]:
    """Width → the augmented ensemble's record at ``step``."""
    return {r["width"]: r for r in records if r["augmented"] and r["step"] == step}


def _slopes(records: list[dict[str, Any]], widths: list[int], steps: tuple[int, ...], key: str) -> dict[str, float | None]:
    """Step → the log-log slope of ``key`` against width (augmented ensembles)."""
    return {str(s): loglog_slope(widths, [_augmented_at(records, s)[w][key] for w in widths]) for s in steps}


def _summary(records: list[dict[str, Any]], widths: list[int], steps: tuple[int, ...]) -> dict[str, Any]:
    """The headline numbers at the last recorded step: fitted log-log slopes against width,
    and the orbit std of ensemble, member and NTK at the largest width; and the slope of
    the ensemble mean's error at every recorded step."""
    step = steps[-1]
    final = _augmented_at(records, step)
    errors = {key: [final[w][key] for w in widths] for key in ("mean_error", "mean_error_ood", "mean_error_excess")}
    top = final[widths[-1]]
    control = [r for r in records if not r["augmented"] and r["step"] == step]
    summary = {
        "step": step,
        "widths": widths,
        "slope_mean_error": loglog_slope(widths, errors["mean_error"]),
        "slope_mean_error_ood": loglog_slope(widths, errors["mean_error_ood"]),
        "slope_mean_error_excess": loglog_slope(widths, errors["mean_error_excess"]),
        "slope_member_deviation": loglog_slope(widths, [final[w]["member_deviation"] for w in widths]),
        "largest_width": widths[-1],
        "slope_mean_error_by_step": _slopes(records, widths, steps, "mean_error"),
        "slope_mean_error_excess_by_step": _slopes(records, widths, steps, "mean_error_excess"),
    }
    for name in ("in", "ood"):
        ratio = top[f"orbit_std_ensemble_{name}"] / top[f"orbit_std_member_{name}"]
        summary[f"orbit_std_ensemble_{name}"] = top[f"orbit_std_ensemble_{name}"]
        summary[f"orbit_std_member_{name}"] = top[f"orbit_std_member_{name}"]
        summary[f"orbit_std_ntk_{name}"] = top[f"orbit_std_ntk_{name}"]
        summary[f"orbit_ratio_{name}"] = ratio
        summary[f"orbit_target_met_{name}"] = ratio <= ORBIT_TARGET
        if control:
            summary[f"orbit_std_unaugmented_ensemble_{name}"] = control[0][f"orbit_std_ensemble_{name}"]
            summary[f"orbit_std_unaugmented_ntk_{name}"] = control[0][f"orbit_std_ntk_{name}"]
    return summary
