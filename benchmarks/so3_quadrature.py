"""Benchmark (not a test): the fused activation-then-mean loop and the SO(3) quadrature grids.

1. ``pooled_dual`` alone: ns per group value of the torch path (dual activation, then the
   weighted sum) and of the fused numba loop, for erf and ReLU on tiles of 1,024 pairs ×
   K values (K = 257, 381, 501: the three grids below plus the identity).
2. The SO(3) NTK of the estimator's defaults (8 Gaussians to 3 Å, smearing
   0.3, band limit 4; lift:3 erf pool dense, σ_w = 2, σ_b = 1) on the first N training
   molecules, for three fast-mode grids — Gauss–Legendre B = 4 (256 nodes), B = 5 (500) and
   Lebedev B = 5 (380) — with the fused loop and with the torch path: seconds for the
   train×train kernel, environment pairs per second, and the rotation error of the grid
   (max |K(R·A, B) − K(A, B)| / max |K| over molecule pairs, one random rotation R),
   against a Gauss–Legendre B = 10 reference too.

Timings are the best of ``--repeats`` runs (the development machine is shared and noisy).
Rows are printed and written to ``benchmarks/results/so3_quadrature.json``.

    python benchmarks/so3_quadrature.py            # N = 100
    python benchmarks/so3_quadrature.py --n 200 --repeats 3
"""

from __future__ import annotations

import argparse
import platform
import time
from datetime import date
from pathlib import Path
from unittest import mock

import torch

from molntk.kernels.activations import get_activation
from molntk.kernels.pooled_activations import pooled_dual
from molntk.utils.files import atomic_write_json

RESULTS = Path(__file__).resolve().parent / "results" / "so3_quadrature.json"
GRIDS = [("gauss-legendre", 4), ("gauss-legendre", 5), ("lebedev", 5)]


def torch_pooled_dual(activation, nngp, ntk, var1, var2, weights):
    """The unfused evaluation: dual activation on every value, then the weighted sums."""
    f, fdot = get_activation(activation).dual(nngp, var1, var2)
    return f @ weights, None if ntk is None else fdot.mul_(ntk) @ weights


def best_seconds(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def dual_rows(repeats: int) -> list[dict]:
    g = torch.Generator().manual_seed(0)
    rows = []
    for activation in ("erf", "relu"):
        for k in (257, 381, 501):
            v = torch.rand(1024, 1, generator=g, dtype=torch.float64) * 3 + 0.5
            nngp = (torch.rand(1024, k, generator=g, dtype=torch.float64) * 2 - 1) * v
            w = torch.rand(k, generator=g, dtype=torch.float64)
            pooled_dual(activation, nngp, nngp, v, v, w)  # compile
            t_torch = best_seconds(lambda: [torch_pooled_dual(activation, nngp, nngp, v, v, w) for _ in range(20)], repeats) / 20
            t_fused = best_seconds(lambda: [pooled_dual(activation, nngp, nngp, v, v, w) for _ in range(20)], repeats) / 20
            a, b = torch_pooled_dual(activation, nngp, nngp, v, v, w), pooled_dual(activation, nngp, nngp, v, v, w)
            diff = max(float(((x - y).abs() / x.abs().max()).max()) for x, y in zip(a, b))
            rows.append({
                "part": "pooled_dual", "activation": activation, "values_per_pair": k,
                "torch_ns_per_value": t_torch / nngp.numel() * 1e9, "fused_ns_per_value": t_fused / nngp.numel() * 1e9,
                "speedup": t_torch / t_fused, "max_rel_difference": diff,
            })
    return rows


def kernel_rows(n: int, repeats: int) -> list[dict]:
    from molntk.data.qm9 import load_qm9
    from molntk.data.splits import standard_split
    from molntk.features.environments import FeatureConfig, environment_features
    from molntk.features.radial import GaussianBasis
    from molntk.kernels.so3 import SO3Grid
    from molntk.kernels.so3.spec import parse_architecture
    from molntk.molecular import SO3MolecularKernel
    from molntk.pipelines.qm9.sets import rotated_copies

    data = load_qm9()
    molecules = data.molecules(standard_split(len(data), seed=0).train[:n].tolist())
    features = FeatureConfig(band_limit=4, smearing_width=0.3, radial=GaussianBasis(n=8, r_min=0.5, r_cut=3.0))
    env, rotated = environment_features(molecules, features), environment_features(rotated_copies(molecules, 1, 0), features)
    z = env.centre_numbers
    env_pairs = sum(int((z == e).sum()) ** 2 for e in z.unique())
    net = parse_architecture("lift:3 erf pool dense", sigma_w=2.0, sigma_b=1.0)

    def kernel(sampling, band_limit):
        ctx = net.discretisation(SO3Grid(band_limit, sampling), "fast", torch.float64, "cpu")
        return SO3MolecularKernel(net, ctx, pairing="element", block_size=512)

    reference = kernel("gauss-legendre", 10)(env).ntk
    rows = []
    for sampling, band_limit in GRIDS:
        kern = kernel(sampling, band_limit)
        kern(environment_features(molecules[:2], features))  # tables, compilation
        k = kern(env).ntk
        rotation_error = float((kern(rotated, env).ntk - k).abs().max() / k.abs().max())
        grid = SO3Grid(band_limit, sampling)
        row = {
            "part": "kernel", "n": n, "grid": grid.describe(), "nodes": len(grid), "env_pairs": env_pairs,
            "rotation_error": rotation_error,
            "error_vs_gl10": float((k - reference).abs().max() / reference.abs().max()),
        }
        for path in ("fused", "torch"):
            if path == "torch":
                with mock.patch("molntk.kernels.so3.nonlinearity.pooled_dual", torch_pooled_dual):
                    seconds = best_seconds(lambda: kern(env), repeats)
            else:
                seconds = best_seconds(lambda: kern(env), repeats)
            row[f"{path}_seconds"] = seconds
            row[f"{path}_env_pairs_per_s"] = env_pairs / 2 / seconds  # the symmetric call computes half
        row["speedup"] = row["torch_seconds"] / row["fused_seconds"]
        rows.append(row)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=100, help="training molecules for the kernel part")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    rows = dual_rows(args.repeats)
    print(f"{'activation':<10} {'K':>4} {'torch ns/value':>15} {'fused ns/value':>15} {'speed-up':>9} {'max rel diff':>13}")
    for r in rows:
        print(f"{r['activation']:<10} {r['values_per_pair']:>4} {r['torch_ns_per_value']:>15.2f} {r['fused_ns_per_value']:>15.2f} "
              f"{r['speedup']:>9.1f} {r['max_rel_difference']:>13.1e}")
    krows = kernel_rows(args.n, args.repeats)
    print(f"\nSO(3) NTK of the default model, train×train on N = {args.n} QM9 molecules ({torch.get_num_threads()} threads)")
    print(f"{'grid':<62} {'torch s':>8} {'fused s':>8} {'speed-up':>9} {'rotation err':>13} {'err vs GL10':>12}")
    for r in krows:
        print(f"{r['grid']:<62} {r['torch_seconds']:>8.2f} {r['fused_seconds']:>8.2f} {r['speedup']:>9.2f} "
              f"{r['rotation_error']:>13.1e} {r['error_vs_gl10']:>12.1e}")
    meta = {"date": date.today().isoformat(), "machine": platform.platform(), "processor": platform.processor(),
            "threads": torch.get_num_threads(), "numba_version": __import__("numba").__version__, "n": args.n}
    atomic_write_json(args.out, {"meta": meta, "rows": rows + krows})
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
