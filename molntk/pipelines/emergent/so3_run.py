"""The run of ``task: emergent-so3``: the NTK predictions (augmented MLP NTK for every k, the
SO(3) NTK), one ensemble per (k, width), then ``report.json``, ``config.yaml``,
``metrics.csv`` and ``rotation_std.png``."""

from __future__ import annotations

import time
from typing import Any

from molntk.ensembles import kernel_learning_rate, train_ensemble
from molntk.pipelines.emergent.atom_sum import AtomSumMLP, padded_inputs
from molntk.pipelines.emergent.qm9 import architecture, energy_sets, ensemble_records, mlp_kernel, ntk_means, so3_kernel
from molntk.pipelines.emergent.runs import run_setup, write_results
from molntk.pipelines.emergent.so3_config import EmergentSO3Config
from molntk.pipelines.emergent.so3_plots import plot_rotation_std
from molntk.scale.devices import torch_threads
from molntk.scale.progress import Progress


def run_emergent_so3(config: EmergentSO3Config, source: str, progress: Progress | None = None) -> dict[str, Any]:
    """Run the experiment, write its files and return ``{"output", "summary", "results",
    "wall_seconds"}``; ``progress("ensembles", done, total)`` after each trained ensemble."""
    setup = run_setup(config)
    device, dtype, seeds, steps = setup.device, setup.dtype, setup.seeds, setup.steps
    ens = config.ensemble
    records: list[dict[str, Any]] = []
    with torch_threads(config.compute.threads):
        tic = time.perf_counter()
        sets = energy_sets(config)
        augmented = {k: sets.augmented(k) for k in config.augmentation.k}
        data_seconds = time.perf_counter() - tic
        tic = time.perf_counter()
        mlp, so3 = mlp_kernel(config), so3_kernel(config)
        # one η for every run, stable for every training kernel
        train_kernels = [mlp(batch).ntk.numpy() for batch, _ in augmented.values()] + [so3(sets.train).ntk.numpy()]
        lr = min(kernel_learning_rate(theta, config.training.lr_scale) for theta in train_kernels)
        ntk = {k: ntk_means(mlp, batch, y, sets.evaluate, lr=lr, steps=steps) for k, (batch, y) in augmented.items()}
        so3_mean = ntk_means(so3, sets.train, sets.y_train, sets.evaluate, lr=lr, steps=steps)
        kernel_seconds = time.perf_counter() - tic
        evaluate = padded_inputs(sets.evaluate, sets.slots).to(dtype=dtype, device=device)
        channels, coeffs = sets.train.coeffs.shape[1:]
        arch, plan, train_seconds = architecture(config), ens.plan(config.augmentation.k, config.augmentation.width_k), {}
        for done, (k, width) in enumerate(plan):
            batch, y = augmented[k]
            tic = time.perf_counter()
            run = train_ensemble(
                lambda seed, width=width: AtomSumMLP(arch, channels, coeffs, width, seed=seed, dtype=dtype),
                seeds,
                padded_inputs(batch, sets.slots).to(dtype=dtype, device=device),
                y.to(dtype=dtype, device=device),
                evaluate,
                lr=lr,
                record=steps,
                chunk=ens.chunk,
            )
            train_seconds[f"k {k} width {width}"] = time.perf_counter() - tic
            records += ensemble_records(run.to_cpu(), ntk[k], so3_mean, sets, k=k, width=width, sizes=ens.sizes)
            if progress is not None:
                progress("ensembles", done + 1, len(plan))
    summary = summarise(records, config, steps[-1])
    extra = {
        "summary": summary,
        "learning_rate": lr,
        "data": {
            "n_train": config.data.n_train,
            "n_test": config.data.n_test,
            "n_rotated": config.data.n_rotated,
            "rotations": config.data.rotations,
            "sigma_y_mev": sets.sigma_mev,
            "slots": sets.slots,
            "input_size": int(channels * coeffs),
        },
        "data_seconds": data_seconds,
        "kernel_seconds": kernel_seconds,
        "train_seconds": train_seconds,
    }
    return write_results(setup, config, records, extra, lambda folder: plot_rotation_std(folder / "rotation_std.png", records, summary))


def summarise(records: list[dict[str, Any]], config: EmergentSO3Config, step: int) -> dict[str, Any]:
    """The headline numbers at the last recorded ``step``: rotation stds (ensemble, member,
    augmented MLP NTK, SO(3) NTK) against k at ``ensemble.width``, against width at
    ``augmentation.width_k``, and against ensemble size at (width_k, width)."""
    ens, aug = config.ensemble, config.augmentation
    final = {(r["k"], r["width"]): r for r in records if r["step"] == step}
    keys = ("rotation_std_ensemble", "rotation_std_member", "rotation_std_ntk", "test_mae_ensemble", "test_mae_ntk")
    base = final[(aug.width_k, ens.width)]
    return {
        "step": step,
        "width": ens.width,
        "width_k": aug.width_k,
        "rotation_std_so3": base["rotation_std_so3"],
        "test_mae_so3": base["test_mae_so3"],
        "by_k": {str(k): {key: final[(k, ens.width)][key] for key in keys} for k in aug.k},
        "by_width": {str(w): {key: final[(aug.width_k, w)][key] for key in keys} for w in ens.widths},
        "by_size": {str(s): base[f"rotation_std_E{s}"] for s in ens.sizes},
    }
