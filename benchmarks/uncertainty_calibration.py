"""Calibration of the SO(3) NTK's predictive standard deviation on held-out QM9 U0 (not a test).

The default model (:class:`~molntk.models.so3_recipe.SO3ModelRecipe`: ``lift:3 erf pool
dense``, σ_w = 2, σ_b = 1, 8 Gaussians to 3 Å, Lebedev grid of band limit 5) on the
standard split (seed 0): the first N training molecules, the first ``--n-test`` test
molecules, U0 minus the dressed-atom model in meV, λ by closed-form LOO over the
quadrature's λ grid. The molecular NTK Θ and NNGP K (train × train, test × train, and the test molecules' self-kernels) are
computed once and kept in ``--cache`` (a rerun reuses them).

For every way of giving a standard deviation (:class:`~molntk.regression.KernelRegressor`'s
``variance`` and ``amplitude``; the last row is :class:`~molntk.models.SO3NTKRegressor`'s
whole-model leave-one-out, dressed atoms refitted without each molecule) and every nested
training size it reports, for the std of y (latent variance plus the noise σ_f² λ): the
fraction of test errors with |error| ≤ σ and ≤ 2σ (targets at N = 1,000: 55–80 % and
88–99 %), mean |z| (|error|/σ; 0.80 for a calibrated Gaussian), median |z| (0.67), the
fitted amplitude σ_f² (of the standardised targets) and the log marginal likelihood at it.
Then the out-of-domain scores (:mod:`molntk.features.domain`) of the test molecules
against the largest training set, as they are and rattled (Gaussian noise of 0.1 Å).

    nice python benchmarks/uncertainty_calibration.py             # N = 1000, 1000 test molecules
    python benchmarks/uncertainty_calibration.py --n 400 --n-test 100

Writes benchmarks/results/uncertainty_calibration.json.
"""

from __future__ import annotations

import argparse
import datetime
import json
import time
from pathlib import Path

import numpy as np
import torch

from molntk.data.qm9 import QM9_ELEMENTS, load_qm9
from molntk.data.splits import standard_split
from molntk.models.so3_recipe import SO3ModelRecipe
from molntk.features.domain import EnvironmentDomain
from molntk.regression import DressedAtomModel, KernelRegressor, calibration_metrics, eigensystem, element_counts, mae
from molntk.regression.calibration import log_marginal_likelihood
from molntk.regression.selection import lambda_grid
from molntk.utils.files import atomic_write_json

ROOT = Path(__file__).resolve().parents[1]
#: The matrices kept in the cache: NTK and NNGP of train × train, test × train, test self-kernels.
MATRICES = ("ntk_train", "nngp_train", "ntk_test", "nngp_test", "ntk_diag", "nngp_diag")


def kernels(recipe: SO3ModelRecipe, train: list, test: list, folder: Path) -> dict[str, np.ndarray]:
    """The cached kernel matrices (:data:`MATRICES`), computed on the first call; ``seconds.json``
    is written last, so a killed computation is redone."""
    done = folder / "seconds.json"
    if done.exists():
        return {name: np.load(folder / f"{name}.npy") for name in MATRICES}
    folder.mkdir(parents=True, exist_ok=True)
    kern = recipe.molecular_kernel("cpu")
    start = time.perf_counter()
    with torch.no_grad():
        train_feats = recipe.environments(train)
        k_train = kern(train_feats)
        k_test = kern(recipe.environments(test), train_feats)
        diags = [kern(recipe.environments([m])) for m in test]
    out = {
        "ntk_train": k_train.ntk.numpy(), "nngp_train": k_train.nngp.numpy(),
        "ntk_test": k_test.ntk.numpy(), "nngp_test": k_test.nngp.numpy(),
        "ntk_diag": np.array([float(d.ntk[0, 0]) for d in diags]),
        "nngp_diag": np.array([float(d.nngp[0, 0]) for d in diags]),
    }
    for name, matrix in out.items():
        np.save(folder / f"{name}.npy", matrix)
    done.write_text(json.dumps({"kernel_seconds": time.perf_counter() - start}))
    return out


def data(n: int, n_test: int) -> tuple[list, list, np.ndarray, np.ndarray]:
    """The first n training and n_test test molecules of the standard split and their U0 (meV)."""
    qm9 = load_qm9()
    split = standard_split(len(qm9), 0)
    train_idx, test_idx = split.train[:n], split.test[:n_test]
    y = np.asarray(qm9.target("u0_atom"))
    return qm9.molecules(train_idx.tolist()), qm9.molecules(test_idx.tolist()), y[train_idx], y[test_idx]


#: (label, variance, amplitude) of the KernelRegressor variants compared.
VARIANTS = [
    ("ntk-gp Σ_t (Lee et al.), σ_f² = 1 (before)", "ntk-gp", "none"),
    ("ntk-gp Σ_t, σ_f² by LOO", "ntk-gp", "loo"),
    ("GP(Θ) posterior, σ_f² = 1", "gp", "none"),
    ("GP(Θ) posterior, σ_f² by marginal likelihood", "gp", "ml"),
    ("GP(Θ) posterior, σ_f² by LOO (the pipeline's)", "gp", "loo"),
]
WHOLE_MODEL = "GP(Θ) posterior, σ_f² by whole-model LOO (SO3NTKRegressor's)"


def rows_at(K: dict[str, np.ndarray], n: int, y: np.ndarray, counts: np.ndarray, y_test: np.ndarray,
            counts_test: np.ndarray, grid: np.ndarray | None, psd_rtol: float) -> list[dict]:
    """One row per variant at training size n (the top-left blocks of the cached kernels)."""
    dressed = DressedAtomModel().fit(counts[:n], y[:n])
    base, base_test = dressed.predict(counts[:n]), dressed.predict(counts_test)
    residual = y[:n] - base
    theta, theta_test = K["ntk_train"][:n, :n], K["ntk_test"][:, :n]
    eig = eigensystem(theta, psd_rtol=psd_rtol)
    rows = []
    for label, variance, amplitude in [*VARIANTS, (WHOLE_MODEL, "gp", "loo")]:
        model = KernelRegressor("ntk", reg="cv", cv="loo", psd_rtol=psd_rtol, relative_grid=grid,
                                variance=variance, amplitude=amplitude)
        if variance == "ntk-gp":
            model.fit(theta, residual, K_nngp_train=K["nngp_train"][:n, :n])
            mean, std = model.predict(theta_test, K["nngp_diag"], return_std=True, K_nngp_test_train=K["nngp_test"][:, :n])
        else:
            model.fit(theta, residual)
            if label == WHOLE_MODEL:
                shifts = base[None] - dressed.leave_one_out_predictions(counts[:n], y[:n])
                model.refit_loo_amplitude(shifts, reference=float(np.max(np.abs(y[:n]))))
            mean, std = model.predict(theta_test, K["ntk_diag"], return_std=True)
        pred = base_test + mean
        lml = None
        if variance == "gp" and np.isfinite(model.amplitude_[0]):
            z = (residual - model.target_mean_[0]) / model.target_scale_[0]
            lml = float(log_marginal_likelihood(eig, z, model.reg_, float(model.amplitude_[0])))
        rows.append({"n_train": n, "variant": label, "mae_mev": float(mae(y_test, pred)),
                     **calibration_metrics(y_test, pred, std), "median_std_mev": float(np.median(std)),
                     "amplitude": float(model.amplitude_[0]) if model.amplitude_ is not None else 1.0,
                     "reg_relative": model.reg_relative_, "log_marginal_likelihood": lml})
    return rows


def domain_rows(train: list, test: list, recipe: SO3ModelRecipe, pred_error: np.ndarray) -> dict:
    """Out-of-domain scores of the test molecules as they are and rattled by 0.1 Å."""
    start = time.perf_counter()
    domain = EnvironmentDomain.fit(recipe.environments(train))
    fit_seconds = time.perf_counter() - start
    scores = domain.scores(recipe.environments(test))
    rng = np.random.default_rng(0)
    rattled = [type(m)(m.numbers, m.positions + rng.normal(scale=0.1, size=m.positions.shape), id=m.id) for m in test]
    rattled_scores = domain.scores(recipe.environments(rattled))
    flagged = scores > 1
    return {
        "threshold": domain.threshold, "fit_seconds": fit_seconds,
        "test_flagged": float(np.mean(flagged)), "rattled_0.1A_flagged": float(np.mean(rattled_scores > 1)),
        "test_score_percentiles_50_90_99": np.percentile(scores, [50, 90, 99]).tolist(),
        "mae_flagged_mev": float(np.mean(pred_error[flagged])) if flagged.any() else None,
        "mae_not_flagged_mev": float(np.mean(pred_error[~flagged])),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, nargs="+", default=[100, 250, 500, 1000], help="training sizes (nested)")
    parser.add_argument("--n-test", type=int, default=1000)
    parser.add_argument("--cache", type=Path, default=ROOT / "results" / "uncertainty_calibration_kernels")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "uncertainty_calibration.json")
    args = parser.parse_args()
    recipe = SO3ModelRecipe()
    sizes = sorted(args.n)
    train, test, y, y_test = data(sizes[-1], args.n_test)
    K = kernels(recipe, train, test, args.cache / f"n{sizes[-1]}-t{args.n_test}")
    counts, counts_test = element_counts(train, QM9_ELEMENTS), element_counts(test, QM9_ELEMENTS)
    grid = lambda_grid(recipe.psd_rtol, recipe.quadrature)
    rows = [row for n in sizes for row in rows_at(K, n, y, counts, y_test, counts_test, grid, recipe.psd_rtol)]
    print(f"{'N':>5}  {'variant':62s} {'MAE':>7} {'≤1σ':>6} {'≤2σ':>6} {'mean|z|':>8} {'med|z|':>8} {'σ_f²':>9}")
    for r in rows:
        print(f"{r['n_train']:5d}  {r['variant']:62s} {r['mae_mev']:7.1f} {r['within_1sigma']:6.1%} {r['within_2sigma']:6.1%} "
              f"{r['mean_abs_z']:8.3g} {r['median_abs_z']:8.3g} {r['amplitude']:9.3g}")
    best = next(r for r in rows if r["n_train"] == sizes[-1] and r["variant"] == WHOLE_MODEL)
    dressed = DressedAtomModel().fit(counts, y)
    model = KernelRegressor("ntk", reg="cv", cv="loo", psd_rtol=recipe.psd_rtol, relative_grid=grid)
    model.fit(K["ntk_train"], y - dressed.predict(counts))
    error = np.abs(dressed.predict(counts_test) + model.predict(K["ntk_test"]) - y_test)
    domain = domain_rows(train, test, recipe, error)
    print(f"out of domain (N = {sizes[-1]}): {domain['test_flagged']:.1%} of test molecules flagged, "
          f"{domain['rattled_0.1A_flagged']:.1%} of them rattled by 0.1 Å; MAE flagged {domain['mae_flagged_mev']} meV, "
          f"not flagged {domain['mae_not_flagged_mev']:.1f} meV")
    document = {
        "benchmark": "uncertainty_calibration",
        "date": datetime.date.today().isoformat(),
        "command": "nice python benchmarks/uncertainty_calibration.py",
        "model": {"layers": recipe.layers, "sigma_w": recipe.sigma_w, "sigma_b": recipe.sigma_b,
                  "grid_band_limit": recipe.grid_band_limit, "sampling": recipe.sampling, "psd_rtol": recipe.psd_rtol},
        "data": {"split": "standard, seed 0", "n_train": sizes, "n_test": args.n_test, "target": "u0_atom (meV)"},
        "kernel_seconds": json.loads((args.cache / f"n{sizes[-1]}-t{args.n_test}" / "seconds.json").read_text()),
        "targets": {"within_1sigma": [0.55, 0.80], "within_2sigma": [0.88, 0.99]},
        "rows": rows,
        "at_largest_n": best,
        "domain": domain,
    }
    atomic_write_json(args.out, document)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
