"""Is the Nyström rank cut set by the SO(3) quadrature or by the kernel? (issue "accuracy at scale", diagnosis (a))

The sparse model drops the eigenvalues of K_mm below ``rank_rtol`` · s_max. If the cut were
set by the quadrature, a finer grid would keep more directions; if by the kernel's own
spectrum, the kept count would not move with the grid. For one ``qm9_diagnosis.py`` variant
(its recipe, σ_w matched as there, and its m inducing environments: farthest-point sampled
per element from the first N training molecules of the standard split), this script
computes K_mm on Lebedev grids of several band limits and prints, per grid, the number of
eigenvalues above r · s_max for the rank cuts r, the most negative eigenvalue over s_max
(the exact K_mm is positive semi-definite: a negative eigenvalue is quadrature error), and
the largest entry-wise difference from the finest grid's K_mm over its largest entry.

    python benchmarks/qm9_inducing_spectrum.py --variant growth16_3A_m12000_matched --grids 5 6

K_mm matrices are cached under ``--cache``; records merge into
benchmarks/results/qm9_inducing_spectrum.json.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
from pathlib import Path

import numpy as np
from benchmark_files import cached, merge_records
from qm9_diagnosis import VARIANTS, matched

from molntk.data.qm9 import load_qm9
from molntk.data.splits import standard_split
from molntk.features.environments import environment_features
from molntk.features.inducing import environments_as_molecules, inducing_environments

RESULTS = Path(__file__).parent / "results" / "qm9_inducing_spectrum.json"
#: Rank cuts r (eigenvalues kept above r · s_max).
RANK_CUTS = (1e-8, 1e-10, 1e-12, 1e-14)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variant", default="growth16_3A_m12000_matched", choices=list(VARIANTS))
    parser.add_argument("--n-train", type=int, default=5000)
    parser.add_argument("--grids", nargs="+", type=int, default=[5, 6], help="Lebedev grid band limits")
    parser.add_argument("--cache", type=Path, default=Path("results/qm9_inducing_spectrum"))
    parser.add_argument("--json", type=Path, default=RESULTS)
    args = parser.parse_args()
    data = load_qm9()
    train = [data.molecule(int(i)) for i in standard_split(len(data), seed=0).train[: args.n_train]]
    recipe = matched(args.variant, train[:500])
    m = VARIANTS[args.variant][1]
    features = environment_features(train, recipe.features)
    inducing = environments_as_molecules(features, inducing_environments(features, m, method="fps"))
    matrices, seconds = {}, {}
    for band in args.grids:
        matrices[band], seconds[band] = cached(
            args.cache / f"{args.variant}-n{args.n_train}-B{band}.npy",
            lambda b=band: dataclasses.replace(recipe, grid_band_limit=b).molecular_kernel()(inducing).ntk.numpy())
    finest = matrices[max(args.grids)]
    records = []
    for band in args.grids:
        K = matrices[band]
        eigenvalues = np.linalg.eigvalsh(K)
        s_max = eigenvalues[-1]
        records.append({
            "variant": args.variant, "m": m, "n_train": args.n_train, "sigma_w": recipe.sigma_w, "grid_band_limit": band,
            "kept": {f"{r:.0e}": int(np.sum(eigenvalues > r * s_max)) for r in RANK_CUTS},
            "most_negative": float(eigenvalues[0] / s_max),
            "difference_from_finest": float(np.max(np.abs(K - finest)) / np.max(np.abs(finest))),
            "asymmetry": float(np.max(np.abs(K - K.T)) / np.max(np.abs(K))),
            "kernel_seconds": seconds[band], "date": datetime.date.today().isoformat(),
        })
    print(f"{args.variant}: K_mm of {m} inducing environments ({args.n_train} training molecules), σ_w {recipe.sigma_w}")
    print(f"{'grid':>4s} " + " ".join(f"{'kept > ' + f'{r:.0e}':>14s}" for r in RANK_CUTS) + f" {'λ_min/s_max':>12s} {'Δ finest':>9s}")
    for r in records:
        print(f"{r['grid_band_limit']:4d} " + " ".join(f"{v:14d}" for v in r["kept"].values())
              + f" {r['most_negative']:12.1e} {r['difference_from_finest']:9.1e}")
    merge_records(args.json, records, lambda r: (r["variant"], r["n_train"], r["grid_band_limit"]))


if __name__ == "__main__":
    main()
