"""Speed of the closed-form Lift → x² → Pool step against the quadrature it replaces (not a test).

Networks that start ``lift:L quadratic pool`` have their pooled kernel from the lift moments
(Schur orthogonality, :meth:`molntk.kernels.so3.network.SO3Network.pools_in_closed_form`)
whenever the grid integrates degree 2(L − 1) exactly. This benchmark computes the molecular
NTK of the first ``--n`` training molecules of the standard split with itself both ways, on
the scale curve's feature maps (16 width-growth Gaussians to 3 Å, element width 2.18,
band limit 4) and grid (Lebedev, band limit 6), element pairing, float64, and reports the
seconds, the environment pairs per second, the ratio and the largest relative difference of
the two matrices (the same kernel: rounding). The quadrature route is the engine's own with
the closed form switched off.

    python benchmarks/so3_closed_form.py             # N = 300, one torch thread
    python benchmarks/so3_closed_form.py --n 1000 --threads 2

Rows are printed and merged into benchmarks/results/so3_closed_form.json (keyed by network,
N and threads).
"""

from __future__ import annotations

import argparse
import datetime
import platform
import time
from pathlib import Path
from unittest import mock

import torch
from benchmark_files import merge_records
from so3_kernel import atom_pairs, training_molecules

from molntk.features.environments import FeatureConfig, environment_features
from molntk.features.radial import radial_basis_from_dict
from molntk.models.so3_recipe import SO3ModelRecipe
from molntk.kernels.so3.network import SO3Network

RESULTS = Path(__file__).resolve().parent / "results" / "so3_closed_form.json"
RADIAL = {"kind": "gaussian", "n": 16, "r_min": 0.7, "r_cut": 3.0, "width_growth": 1.5}
NETWORKS = (("lift:3 quadratic pool layernorm dense quadratic dense", 0.0), ("lift:3 quadratic pool dense", 1.0))


def timed_kernel(kernel, feats) -> tuple[torch.Tensor, float]:
    start = time.perf_counter()
    ntk = kernel(feats)["ntk"]
    return ntk, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=300, help="training molecules (first n of the standard split)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--json", type=Path, default=RESULTS)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    maps = FeatureConfig(band_limit=4, smearing_width=0.3, radial=radial_basis_from_dict(RADIAL), element_width=2.18)
    feats = environment_features(training_molecules(args.n), maps)
    pairs = atom_pairs(feats, feats)
    records = []
    for layers, sigma_b in NETWORKS:
        recipe = SO3ModelRecipe(layers=layers, sigma_w=2.853, sigma_b=sigma_b, features=maps, grid_band_limit=6)
        kernel = recipe.molecular_kernel()
        assert kernel.network.pools_in_closed_form(kernel.ctx)
        closed, closed_s = timed_kernel(kernel, feats)
        with mock.patch.object(SO3Network, "pools_in_closed_form", lambda self, ctx: False):
            quadrature, quadrature_s = timed_kernel(kernel, feats)
        difference = float(((closed - quadrature).abs() / quadrature.abs().max()).max())
        records.append({
            "network": f"{layers} (σ_w 2.853, σ_b {sigma_b:g})", "n": args.n, "threads": args.threads,
            "environment_pairs": pairs, "grid": kernel.ctx.grid.describe(),
            "closed_form_seconds": closed_s, "quadrature_seconds": quadrature_s, "speedup": quadrature_s / closed_s,
            "closed_form_pairs_per_second": pairs / closed_s, "quadrature_pairs_per_second": pairs / quadrature_s,
            "max_relative_difference": difference, "machine": f"{platform.machine()} CPU", "date": datetime.date.today().isoformat(),
        })
        r = records[-1]
        print(f"{r['network']:76.76s} N {args.n}: closed form {closed_s:7.2f} s, quadrature {quadrature_s:7.2f} s "
              f"(×{r['speedup']:.1f}; {r['closed_form_pairs_per_second']:.3g} vs {r['quadrature_pairs_per_second']:.3g} "
              f"pairs/s), max |Δ| / max |K| {difference:.1e}", flush=True)
    merge_records(args.json, records, lambda r: (r["network"], r["n"], r["threads"]))


if __name__ == "__main__":
    main()
