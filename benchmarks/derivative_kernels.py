"""Speed of the force-field derivative kernels: closed form against autograd (not a test).

On frames of the committed ethanol sample (data/md/ethanol_sample.extxyz), the recipe's
default network (``lift:3 erf pool dense``, 8 radial Gaussians to 3 Å, elements H C N O F) on
Lebedev grids of band limit 5 and 7, float64, one query molecule against ``--refs`` reference
molecules; seconds per molecule pair (best of ``--repeats``) for

- rows: Θ, ∂Θ/∂r', ∂Θ/∂r and ∂²Θ/∂r∂r' (:func:`~molntk.molecular.derivative_kernels.derivative_rows`,
  what fitting the exact energy+force model costs per pair); the closed form with the tangent
  feature maps made beforehand, as ``joint_kernel`` does;
- expansion: s(M) = Σ a_j Θ + Σ b_jᵀ ∂Θ/∂r'_j and ∂s/∂r
  (:func:`~molntk.molecular.derivative_kernels.expansion_energy_and_gradient`, what predicting
  energies and forces of the exact model costs per training frame); the closed form with the
  contracted training tangents made beforehand, as the fitted model keeps them.

    OMP_NUM_THREADS=1 python benchmarks/derivative_kernels.py          # writes results/derivative_kernels.json

Prints a table with the speed-up ratios and writes the records to ``--json``.
"""

from __future__ import annotations

import argparse
import datetime
import os
import timeit
from pathlib import Path

import numpy as np
import torch

from molntk.data.labelled import read_labelled
from molntk.models.so3_recipe import SO3ModelRecipe
from molntk.molecular.derivative_kernels import derivative_rows, expansion_energy_and_gradient
from molntk.molecular.pooled_derivatives import closed_form_expansion, closed_form_rows, tangent_features
from molntk.utils.files import atomic_write_json

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "data" / "md" / "ethanol_sample.extxyz"
RESULTS = ROOT / "benchmarks" / "results" / "derivative_kernels.json"


def best_of(repeats: int, fn) -> float:
    """The smallest wall time of ``repeats`` calls (seconds)."""
    return min(timeit.repeat(fn, number=1, repeat=repeats))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--grids", type=int, nargs="+", default=[5, 7])
    parser.add_argument("--refs", type=int, default=8, help="reference molecules per call (autograd route)")
    parser.add_argument("--closed-refs", type=int, default=64, help="reference molecules per call (closed form)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    frames = read_labelled(SAMPLE, "energy").molecules
    query, refs, closed_refs = frames[0], frames[1 : 1 + args.refs], frames[1 : 1 + args.closed_refs]
    rng = np.random.default_rng(0)
    rows = []
    for grid in args.grids:
        kernel = SO3ModelRecipe(grid_band_limit=grid).molecular_kernel()
        q_tangents, r_tangents = tangent_features(kernel, [query]), tangent_features(kernel, closed_refs)
        a = rng.normal(size=len(closed_refs))
        b = rng.normal(size=3 * sum(m.n_atoms for m in closed_refs))
        contracted = r_tangents.contracted(torch.as_tensor(b))
        n_auto = len(refs)
        b_auto = b[: 3 * sum(m.n_atoms for m in refs)]
        record = {
            "grid_band_limit": grid, "support_points": kernel.ctx.measure.size,
            "rows_autograd_s": best_of(args.repeats, lambda: derivative_rows(kernel, query, refs, method="autograd")) / n_auto,
            "rows_closed_s": best_of(args.repeats, lambda: closed_form_rows(kernel, q_tangents, r_tangents)) / len(closed_refs),
            "expansion_autograd_s": best_of(args.repeats, lambda: expansion_energy_and_gradient(
                kernel, query, refs, a[:n_auto], b_auto, method="autograd")) / n_auto,
            "expansion_closed_s": best_of(args.repeats, lambda: closed_form_expansion(
                kernel, q_tangents, contracted, torch.as_tensor(a))) / len(closed_refs),
            "tangent_features_s_per_molecule": best_of(args.repeats, lambda: tangent_features(kernel, closed_refs)) / len(closed_refs),
        }
        record["rows_speedup"] = record["rows_autograd_s"] / record["rows_closed_s"]
        record["expansion_speedup"] = record["expansion_autograd_s"] / record["expansion_closed_s"]
        rows.append(record)
    print(f"{'grid':>4} {'K':>5} {'rows autograd':>14} {'rows closed':>12} {'ratio':>6} {'expansion autograd':>19} "
          f"{'expansion closed':>17} {'ratio':>6}   (ms per molecule pair)")
    for r in rows:
        print(f"{r['grid_band_limit']:>4} {r['support_points']:>5} {1e3 * r['rows_autograd_s']:>14.1f} {1e3 * r['rows_closed_s']:>12.2f} "
              f"{r['rows_speedup']:>6.1f} {1e3 * r['expansion_autograd_s']:>19.2f} {1e3 * r['expansion_closed_s']:>17.2f} "
              f"{r['expansion_speedup']:>6.1f}")
    atomic_write_json(args.json, {
        "benchmark": "derivative_kernels", "date": datetime.date.today().isoformat(), "molecule": "ethanol (9 atoms)",
        "torch_threads": torch.get_num_threads(), "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        "load_average": os.getloadavg()[0], "rows": rows})


if __name__ == "__main__":
    main()
