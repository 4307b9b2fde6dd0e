"""Why one exact QM9 kernel learns faster than another: spectra, target alignment and paired
leave-one-out errors (issue "accuracy at scale").

Reads finished ``qm9-property`` runs (``molntk run`` or ``benchmarks/full_qm9.py`` output
folders with ``cache: true``, ``sparse: null``): for each model of a run, its chosen
candidate (``report.json``'s search) and its kernel K(train, train) of the run's largest
training size n from the run's block cache (a missing block is computed), then, with
K̂ = K / mean(diag K) = Σ_k s_k v_k v_kᵀ and z the standardised dressed-atom residual of the
run's first target:

- the spectrum: how many s_k exceed 1e-2, 1e-4, …, 1e-10 (a flatter spectrum keeps more
  directions above a given λ);
- the alignment of the target: the fraction of ‖z‖² outside the top k eigenvectors,
  1 − Σ_{j≤k} (v_jᵀ z)² / ‖z‖², for k = 10 … 9,000 (a kernel whose top directions hold
  more of the target learns it from fewer molecules);
- λ by exact leave-one-out on the grid and with the loss of the run's ``regression``
  section (the run's own choice, checked against its record), the effective dimension
  Σ_k s_k / (s_k + λ̂) there and the leave-one-out MAE in target units;
- for every two kernels on the same training molecules, the paired bootstrap 95 %
  interval of the difference of their leave-one-out MAEs over the n training molecules
  (:func:`molntk.regression.paired_error_difference`): n-fold more molecules than a
  1,000-molecule test set, each predicted by the model trained on the other n − 1.

    python benchmarks/qm9_kernel_spectra.py --run RUN_A --run RUN_B   # ≈ 2 min per 10,000-molecule kernel

Writes benchmarks/results/qm9_kernel_spectra.json (records keyed by run folder and model).
"""

from __future__ import annotations

import argparse
import datetime
import itertools
import json
from pathlib import Path

import numpy as np
from benchmark_files import merge_records

from molntk.pipelines.qm9.assembly import BlockAssembler, block_kernel
from molntk.pipelines.qm9.candidates import build_candidates, dtype_and_device
from molntk.pipelines.qm9.evaluate import residual_targets
from molntk.pipelines.qm9.exact import shell_kernels
from molntk.pipelines.qm9.run import target_settings
from molntk.pipelines.qm9.sets import load_sets
from molntk.pipelines.tasks import TASKS
from molntk.regression import TargetScaler, eigensystem, loo_residuals, paired_error_difference
from molntk.regression.selection import lambda_grid, select_regularizer
from molntk.scale import open_executor, torch_threads

RESULTS = Path(__file__).parent / "results" / "qm9_kernel_spectra.json"
LEVELS = (1e-2, 1e-4, 1e-6, 1e-8, 1e-10)
TOP_K = (10, 30, 100, 300, 1000, 3000, 5000, 9000)


def chosen_candidates(run: Path, config, composition, reduce: str, reference) -> dict:
    """Model name → the candidate the run chose (its search rows in report.json)."""
    report = json.loads((run / "report.json").read_text())
    labels = {row["model"]: row["candidate"] for row in report["search"] if row.get("chosen")}
    built = build_candidates(config, reduce, reference, composition)
    return {name: next(c for c in built[name] if c.label == label) for name, label in labels.items() if name in built}


def analyse(K: np.ndarray, y: np.ndarray, psd_rtol: float, quadrature: bool, cv_loss: str) -> tuple[dict, np.ndarray]:
    """The module docstring's numbers of one kernel, and its leave-one-out |residuals| (target units)."""
    eig = eigensystem(K, psd_rtol=psd_rtol)
    s = eig.values[::-1] / eig.mean_diag
    scaler = TargetScaler.fit(y[:, None])
    z = scaler.transform(y[:, None])
    coefficients = eig.to_basis(z)[::-1, 0]
    unexplained = 1.0 - np.cumsum(coefficients**2) / np.sum(coefficients**2)
    cv = select_regularizer(eig, z, criterion="loo", relative_grid=lambda_grid(psd_rtol, quadrature), loss=cv_loss)
    loo = np.abs(loo_residuals(eig, z, cv.best_reg)[:, 0]) * float(scaler.scale[0])
    rel = cv.best_reg / eig.mean_diag
    return {
        "n_above": {f"{level:g}": int(np.sum(s > level)) for level in LEVELS},
        "unexplained_after_top_k": {str(k): float(unexplained[k - 1]) for k in TOP_K if k <= len(s)},
        "reg_relative": float(rel),
        "effective_dimension": float(np.sum(s / (s + rel))),
        "loo_mae": float(loo.mean()),
    }, loo


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", type=Path, action="append", required=True, help="a finished qm9-property output folder")
    parser.add_argument("--json", type=Path, default=RESULTS)
    args = parser.parse_args()
    records, residuals = [], {}
    for run in args.run:
        config = TASKS.load(str(run / "config.yaml"), [f"output={run}"])
        target = config.targets[0]
        reduce, residual = target_settings(config, target)
        dtype, device = dtype_and_device(config)
        report = json.loads((run / "report.json").read_text())
        with torch_threads(config.kernel.threads):
            sets = load_sets(config, str(run / "config.yaml"), dtype, device)
            n = sets.sizes[-1]
            y = residual_targets(sets, target, residual, n)
            with open_executor(config.compute.executor, device=device, workers=config.compute.workers,
                               scheduler=config.compute.scheduler) as executor:
                assembler = BlockAssembler(executor, run / "kernel_cache", config.compute.block_molecules, None, None)
                candidates = chosen_candidates(run, config, sets.composition, reduce,
                                               sets.train_molecules[: config.learning_curve.n_select])
                for name, candidate in candidates.items():
                    # blocks cut at every size of the run, as it cut them: its cached blocks
                    shells = shell_kernels(block_kernel(candidate, sets.molecules), sets, assembler, None, name)
                    result, loo = analyse(np.asarray(shells.train), y, config.regression.psd_rtol, candidate.quadrature,
                                          config.regression.cv_loss)
                    shells.release()
                    recorded = next(r for r in report["results"] if r["model"] == name and r["n_train"] == n)
                    records.append({"run": str(run), "model": name, "candidate": candidate.label, "n": n, "target": target,
                                    **result, "recorded_reg_relative": recorded["reg_relative"],
                                    "test_mae": recorded["mae"], "date": datetime.date.today().isoformat()})
                    residuals[(str(run), name)] = (y, loo)
                    print(f"{run.name}/{name}: n {n}, λ/mean diag {result['reg_relative']:.2g} "
                          f"(record {recorded['reg_relative']:.2g}), d_eff {result['effective_dimension']:.0f}, "
                          f"LOO MAE {result['loo_mae']:.3f}, test MAE {recorded['mae']:.3f}", flush=True)
                    print("  eigenvalues above", result["n_above"], flush=True)
                    print("  unexplained after top k", {k: f"{v:.2e}" for k, v in result["unexplained_after_top_k"].items()},
                          flush=True)
            sets.molecules.release()
    pairs = []
    for (a, (y_a, loo_a)), (b, (y_b, loo_b)) in itertools.combinations(residuals.items(), 2):
        if y_a.shape == y_b.shape and np.array_equal(y_a, y_b):  # the same training molecules and targets
            diff = paired_error_difference(loo_a, loo_b)
            pairs.append({"a": list(a), "b": list(b), "n": len(y_a), "loo_mae_difference": diff["mae_difference"],
                          "ci95": [diff["ci_low"], diff["ci_high"]]})
            print(f"LOO MAE {a[1]} ({Path(a[0]).name}) − {b[1]} ({Path(b[0]).name}): {diff['mae_difference']:+.3f} "
                  f"[{diff['ci_low']:+.3f}, {diff['ci_high']:+.3f}]", flush=True)
    for record in records:
        record["paired_loo"] = [p for p in pairs if [record["run"], record["model"]] in (p["a"], p["b"])]
    merge_records(args.json, records, lambda r: (r["run"], r["model"]))


if __name__ == "__main__":
    main()
