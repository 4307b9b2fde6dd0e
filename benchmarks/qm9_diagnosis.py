"""What limits the SO(3) NTK's QM9 learning curve: one change at a time (issue "accuracy at scale").

Every variant is the default model (:class:`~molntk.models.so3_recipe.SO3ModelRecipe`)
with one setting changed, fitted as the sparse model of the pipeline (m inducing atom
environments, farthest-point sampled per element from the training molecules; K_mm
eigenvalues ≤ rank_rtol · s_max dropped; λ by closed-form leave-one-out on the training
molecules, mean squared residual or with ``--cv-loss absolute`` mean absolute residual,
over the relative grid floored at psd_rtol) on the dressed-atom residual of QM9
U0 atomization energies, standard split (seed 0), nested training prefixes, the first
``--n-test`` molecules of the test split. Nothing is chosen on test molecules.

Kernels are computed once per variant at the largest N and cached under ``--cache``
(K_mm, K_nm, K_tm and, with ``--invariance``, the rotated test molecules' K_rm as .npy), so
the regression settings (the λ floor psd_rtol and the K_mm eigenvalue cut rank_rtol) are
scored on the same kernels without recomputing them. m is a kernel setting (FPS picks a
different set for each m).

    python benchmarks/qm9_diagnosis.py --variants base cutoff5_matched --sizes 1000 5000

Prints a line per variant, regression setting and N, and merges its records into
benchmarks/results/qm9_diagnosis.json (mae, rmse in meV, rank kept, λ / mean diag, whether λ
is at the grid edge, σ_w and the lift's pre-activation variance, kernel seconds, rotation std).
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from pathlib import Path
from typing import Any

import numpy as np
from benchmark_files import merge_records

from molntk.data.qm9 import load_qm9
from molntk.data.splits import standard_split
from molntk.features.environments import FeatureConfig, environment_features
from molntk.features.inducing import environments_as_molecules, inducing_environments
from molntk.features.radial import GaussianBasis
from molntk.models.so3_recipe import SO3ModelRecipe
from molntk.pipelines.qm9.evaluate import invariance_error
from molntk.pipelines.qm9.sets import rotated_copies
from molntk.regression.dressed_atom import DressedAtomModel, element_counts
from molntk.regression.selection import lambda_grid
from molntk.regression.sparse import SparseKernelRegressor

RESULTS = Path(__file__).parent / "results" / "qm9_diagnosis.json"
BASE = SO3ModelRecipe()


def features(**changes: Any) -> FeatureConfig:
    return dataclasses.replace(BASE.features, **changes)


def gaussians(n: int, r_cut: float, r_min: float = 0.5) -> GaussianBasis:
    return GaussianBasis(n=n, r_min=r_min, r_cut=r_cut)


#: The width-growth radial maps the scale config chose: 16 Gaussians from 0.7 to 3 Å, centres
#: and widths growing like e^{r/1.5 Å}.
GROWTH16 = GaussianBasis(n=16, r_min=0.7, r_cut=3.0, width_growth=1.5)

#: name → (recipe, inducing environments m, description of the one change). Feature changes
#: marked "matched" keep the lift's input-dependent pre-activation variance
#: σ_w² · mean ‖f‖²_{l<L_lift} / C of the base model (≈ 0.085 beside σ_b² = 1) by rescaling
#: σ_w (:func:`matched`): the lift normalises by the channel count C, so more radial
#: functions or a longer cutoff otherwise also change how nonlinear the erf is, i.e. the
#: body-order weights (DESIGN §8).
VARIANTS: dict[str, tuple[SO3ModelRecipe, int, str]] = {
    "base": (BASE, 4000, "default model: 3 Å, 8 Gaussians, σ 0.3 rad, lift l < 3, erf, σ_w 2, σ_b 1"),
    "grid6": (dataclasses.replace(BASE, grid_band_limit=6), 4000,
              "finer SO(3) quadrature: Lebedev grid of band limit 6 (600 nodes, base 380)"),
    "m2000": (BASE, 2000, "m = 2,000 inducing environments"),
    "m8000": (BASE, 8000, "m = 8,000 inducing environments"),
    "cutoff5": (dataclasses.replace(BASE, features=features(radial=gaussians(14, 5.0))), 4000,
                "cutoff 5 Å, 14 Gaussians (same spacing), σ_w 2 (pre-activation variance 2.6× base)"),
    "cutoff5_scaled": (dataclasses.replace(BASE, features=features(radial=gaussians(14, 5.0)), sigma_w=1.03), 4000,
                       "cutoff 5 Å, 14 Gaussians, σ_w 1.03 (pre-activation variance 0.68× base)"),
    "cutoff4_matched": (dataclasses.replace(BASE, features=features(radial=gaussians(11, 4.0))), 4000,
                        "cutoff 4 Å, 11 Gaussians, matched"),
    "cutoff5_matched": (dataclasses.replace(BASE, features=features(radial=gaussians(14, 5.0))), 4000,
                        "cutoff 5 Å, 14 Gaussians, matched"),
    "cutoff5_scaling_matched": (dataclasses.replace(BASE, features=features(radial=GaussianBasis(
        n=14, r_min=0.5, r_cut=5.0, scaling_r0=2.5, scaling_power=4.0))), 4000,
        "cutoff 5 Å, 14 Gaussians, radial scaling 1/(1 + (r/2.5 Å)⁴), matched"),
    "radial16_matched": (dataclasses.replace(BASE, features=features(radial=gaussians(16, 3.0))), 4000,
                         "16 Gaussians to 3 Å, matched"),
    "growth16_3A_matched": (dataclasses.replace(BASE, features=features(radial=GROWTH16)), 4000,
        "16 Gaussians to 3 Å, widths and spacing growing like e^{r/1.5 Å} (0.05 Å at 0.7 Å, 0.4 Å at 3 Å), matched"),
    "growth16_3A_m8000_matched": (dataclasses.replace(BASE, features=features(radial=GROWTH16)), 8000,
        "16 Gaussians to 3 Å with widths growing like e^{r/1.5 Å}, matched, m = 8,000 inducing environments"),
    "growth16_3A_m12000_matched": (dataclasses.replace(BASE, features=features(radial=GROWTH16)), 12000,
        "16 Gaussians to 3 Å with widths growing like e^{r/1.5 Å}, matched, m = 12,000 inducing environments"),
    "growth16_3A_grid6_matched": (dataclasses.replace(BASE, grid_band_limit=6, features=features(radial=GROWTH16)), 4000,
        "16 Gaussians to 3 Å with widths growing like e^{r/1.5 Å}, matched, Lebedev grid of band limit 6"),
    "growth16_3A_erf_w5.7_grid6": (dataclasses.replace(BASE, sigma_w=5.7, grid_band_limit=6, features=features(radial=GROWTH16)),
        4000, "16 width-growth Gaussians to 3 Å, σ_w 5.7 (pre-activation variance 4× matched), Lebedev grid of band limit 6"),
    "growth16_3A_exp_w5.7": (dataclasses.replace(BASE, layers="lift:3 exp pool dense", sigma_w=5.7, features=features(radial=GROWTH16)),
        4000, "16 width-growth Gaussians to 3 Å, exp activation (body orders weighted c^ν/ν!), σ_w 5.7"),
    "growth16_3A_smear0_matched": (dataclasses.replace(BASE, features=features(radial=GROWTH16, smearing_width=0.0)), 4000,
        "16 width-growth Gaussians to 3 Å, no angular smearing (σ 0 instead of 0.3 rad), matched"),
    "growth16_3A_lift4_smear0_grid7_matched": (dataclasses.replace(
        BASE, layers="lift:4 erf pool dense", grid_band_limit=7, features=features(radial=GROWTH16, smearing_width=0.0)), 4000,
        "16 width-growth Gaussians to 3 Å, no angular smearing, lift band limit l < 4 (the Wigner kernel's λ_max = 3), "
        "Lebedev grid of band limit 7, matched"),
    "growth20_5A_scaling_matched": (dataclasses.replace(BASE, features=features(radial=GaussianBasis(
        n=20, r_min=0.7, r_cut=5.0, width_growth=1.5, scaling_r0=2.5, scaling_power=4.0))), 4000,
        "20 Gaussians to 5 Å, widths growing like e^{r/1.5 Å}, radial scaling 1/(1 + (r/2.5 Å)⁴), matched"),
    "smear0.5_matched": (dataclasses.replace(BASE, features=features(smearing_width=0.5)), 4000,
                         "smearing σ = 0.5 rad, matched"),
    "lift4_matched": (dataclasses.replace(BASE, layers="lift:4 erf pool dense", grid_band_limit=6), 4000,
                      "lift band limit l < 4 (grid band limit 6), matched"),
    "sigma_w1": (dataclasses.replace(BASE, sigma_w=1.0), 4000, "σ_w = 1 (pre-activation variance 0.25× base)"),
    "sigma_w4": (dataclasses.replace(BASE, sigma_w=4.0), 4000, "σ_w = 4 (pre-activation variance 4× base)"),
    "sigma_w8": (dataclasses.replace(BASE, sigma_w=8.0), 4000, "σ_w = 8 (pre-activation variance 16× base)"),
    "exp_w4": (dataclasses.replace(BASE, layers="lift:3 exp pool dense", sigma_w=4.0), 4000,
               "exp activation (body orders weighted c^ν/ν!), σ_w = 4"),
    "depth2": (dataclasses.replace(BASE, layers="lift:3 erf conv:3 erf pool dense"), 4000,
               "a group convolution and a second erf"),
}


def lift_band_limit(recipe: SO3ModelRecipe) -> int:
    return int(recipe.layers.split()[0].split(":")[1])


def preactivation_scale(recipe: SO3ModelRecipe, molecules: list) -> float:
    """mean over environments of ‖f‖²_{l<L_lift} / C (without σ_w²)."""
    coeffs = environment_features(molecules, recipe.features).coeffs
    return float((coeffs[..., : lift_band_limit(recipe) ** 2] ** 2).sum(dim=(1, 2)).mean()) / coeffs.shape[1]


def matched(name: str, molecules: list) -> SO3ModelRecipe:
    """Variant ``name``'s recipe; "matched" ones with σ_w rescaled to the base pre-activation variance."""
    recipe = VARIANTS[name][0]
    if not name.endswith("_matched"):
        return recipe
    ratio = preactivation_scale(BASE, molecules) / preactivation_scale(recipe, molecules)
    return dataclasses.replace(recipe, sigma_w=round(BASE.sigma_w * ratio**0.5, 3))


#: Regression settings re-scored on every variant's kernels: (psd_rtol, rank_rtol).
REGRESSION = {"floor 3e-8": (3e-8, 1e-10), "floor 1e-10": (1e-10, 1e-10), "floor 1e-10, rank 1e-12": (1e-10, 1e-12),
              "floor 1e-10, rank 1e-13": (1e-10, 1e-13), "floor 1e-10, rank 1e-14": (1e-10, 1e-14)}


def kernels(name: str, recipe: SO3ModelRecipe, train: list, test: list, rotated: list, cache: Path) -> dict[str, np.ndarray]:
    """K_mm, K_nm, K_tm and K_rm (the ``rotated`` test molecules; empty: none) of variant
    ``name`` with ``recipe`` (NTK), each from ``cache`` when there."""
    m = VARIANTS[name][1]
    folder = cache / f"{name}-n{len(train)}-t{len(test)}"
    paths = {key: folder / f"{key}.npy" for key in ("K_mm", "K_nm", "K_tm", "seconds")}
    rotated_path = folder / f"K_rm-{len(rotated)}.npy"
    if all(p.exists() for p in paths.values()) and (not rotated or rotated_path.exists()):
        out = {key: np.load(p) for key, p in paths.items()}
        out["K_rm"] = np.load(rotated_path) if rotated else np.zeros((0, out["K_mm"].shape[0]))
        return out
    kernel = recipe.molecular_kernel()
    feats_train = environment_features(train, recipe.features)
    rows = inducing_environments(feats_train, m, method="fps")
    inducing = environments_as_molecules(feats_train, rows)
    if all(p.exists() for p in paths.values()):
        out = {key: np.load(p) for key, p in paths.items()}
    else:
        start = time.perf_counter()
        out = {"K_mm": kernel(inducing).ntk.numpy()}
        out["K_nm"] = kernel(feats_train, inducing).ntk.numpy()
        out["K_tm"] = kernel(environment_features(test, recipe.features), inducing).ntk.numpy()
        out["seconds"] = np.array(time.perf_counter() - start)
        folder.mkdir(parents=True, exist_ok=True)
        for key, path in paths.items():
            np.save(path, out[key])
    out["K_rm"] = np.zeros((0, out["K_mm"].shape[0]))
    if rotated:
        out["K_rm"] = kernel(environment_features(rotated, recipe.features), inducing).ntk.numpy()
        np.save(rotated_path, out["K_rm"])
    return out


def score(K: dict[str, np.ndarray], y_train: np.ndarray, y_test: np.ndarray, counts_train: np.ndarray,
          counts_test: np.ndarray, n: int, psd_rtol: float, rank_rtol: float, n_rotations: int,
          cv_loss: str = "squared") -> dict[str, Any]:
    """The sparse model on the first n training rows: test MAE/RMSE (meV), fit diagnostics and,
    with rotated copies, the rotation std of the predictions (meV; mean over molecules of the
    std over a molecule and its ``n_rotations`` rotations)."""
    base = DressedAtomModel().fit(counts_train[:n], y_train[:n])
    model = SparseKernelRegressor(reg="cv", cv="loo", cv_loss=cv_loss, relative_grid=lambda_grid(psd_rtol, True),
                                  rank_rtol=rank_rtol)
    model.fit(K["K_nm"][:n], K["K_mm"], y_train[:n] - base.predict(counts_train[:n]))
    pred = base.predict(counts_test) + model.predict(K["K_tm"])
    error = pred - y_test
    rotation = {}
    if K["K_rm"].shape[0]:
        n_mol = K["K_rm"].shape[0] // n_rotations
        pred_rot = base.predict(np.repeat(counts_test[:n_mol], n_rotations, axis=0)) + model.predict(K["K_rm"])
        rotation = {"rotation_std": invariance_error(pred, pred_rot, n_rotations)}
    return {**rotation,
        "mae": float(np.mean(np.abs(error))), "rmse": float(np.sqrt(np.mean(error**2))),
        "rank": int(model.rank_), "reg_relative": float(model.reg_relative_),
        "reg_at_grid_edge": bool(model.cv_result_.at_grid_edge),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--sizes", nargs="+", type=int, default=[1000, 2000, 5000])
    parser.add_argument("--regression", nargs="+", default=list(REGRESSION), choices=list(REGRESSION))
    parser.add_argument("--n-test", type=int, default=1000)
    parser.add_argument("--cv-loss", default="squared", choices=["squared", "absolute"],
                        help="loss of the leave-one-out residuals that chooses λ")
    parser.add_argument("--invariance", type=int, default=0, metavar="MOLECULES",
                        help="rotation std over this many test molecules × 3 random rotations (0: off)")
    parser.add_argument("--cache", type=Path, default=Path("results/qm9_diagnosis_kernels"))
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    data = load_qm9()
    split = standard_split(len(data), seed=0)
    n_max = max(args.sizes)
    train = [data.molecule(int(i)) for i in split.train[:n_max]]
    test = [data.molecule(int(i)) for i in split.test[: args.n_test]]
    target = data.target_names.index("u0_atom")
    y_train, y_test = data.targets[split.train[:n_max], target], data.targets[split.test[: args.n_test], target]
    elements = BASE.features.elements
    counts_train, counts_test = element_counts(train, elements), element_counts(test, elements)
    n_rotations = 3
    rotated = rotated_copies(test[: args.invariance], n_rotations, seed=0) if args.invariance else []
    for name in args.variants:
        new: list[dict[str, Any]] = []
        recipe = matched(name, train[:500])
        variance = recipe.sigma_w**2 * preactivation_scale(recipe, train[:500])
        K = kernels(name, recipe, train, test, rotated, args.cache)
        for setting in args.regression:
            psd_rtol, rank_rtol = REGRESSION[setting]
            for n in args.sizes:
                record = {"variant": name, "change": VARIANTS[name][2], "m": VARIANTS[name][1],
                          "regression": setting + ("" if args.cv_loss == "squared" else f", {args.cv_loss} loss"),
                          "sigma_w": recipe.sigma_w, "preactivation_variance": variance,
                          "n_train": n, "n_test": len(test), "kernel_seconds": float(K["seconds"]),
                          **score(K, y_train, y_test, counts_train, counts_test, n, psd_rtol, rank_rtol, n_rotations,
                                  args.cv_loss)}
                new.append(record)
                rotation = f"  rotation std {record['rotation_std']:.3f}" if "rotation_std" in record else ""
                print(f"{name:10s} {record['regression']:36s} N={n:6d} MAE {record['mae']:7.2f} meV{rotation}  rank {record['rank']:5d}  "
                      f"λ/diag {record['reg_relative']:.1e}{' (edge)' if record['reg_at_grid_edge'] else ''}"
                      f"  kernel {record['kernel_seconds']:.0f} s", flush=True)
        save(args.out, new)


def save(path: Path, new: list[dict[str, Any]]) -> None:
    """Merge ``new`` into the records at ``path``, replacing those of the same variant,
    regression setting and N."""
    merge_records(path, new, lambda r: (r["variant"], r["regression"], r["n_train"]))


if __name__ == "__main__":
    main()
