"""Benchmark of the SO(3) NTK engine (not a test): seconds, s/pair and peak memory.

Configurations:
- ``reference``: the published QM9 model — per-atom-index branches on 29 padded atoms,
  Coulomb channels Z_a Z_b / r^p, p ∈ {2, 6}, for H, C, N, O, F; Lift(6) → erf →
  GroupConv(3) → erf → GroupConv(3) → Pool → Dense; float64.
- ``default``: molntk's default — element-resolved pair sum, 6 Gaussian radial functions
  with cosine cutoff 5 Å, smearing 0.5 rad; Lift(4) → ReLU → GroupConv(3) → ReLU → Pool →
  Dense; float64.

For each configuration, mode (fast / exact), N, kind (train×train: N×N symmetric;
test×train: N/4 × N) and dtype (float64; float32 too for the default configuration's
fast mode) one fresh subprocess computes the NTK and NNGP of QM9 molecules (first N of
the standard split's training set) and reports wall time, peak RSS and the atom-pair
throughput: atom pairs are the environment pairs the molecular sum runs over (same-element
pairs for ``default``; 29 padded atom-index pairs per molecule pair for ``reference``).
Rows are printed as a table and written to ``benchmarks/results/so3_kernel.json``.
Kernel values of both modes for the reference configuration on the first 4 molecules
are printed, for comparison with the published implementation.

    python benchmarks/so3_kernel.py                 # fast: N = 50, 200; exact: N = 50
    python benchmarks/so3_kernel.py --n 50 --modes fast
    python benchmarks/so3_kernel.py --exact-n 50 200   # exact mode at N = 200 too (slow on 2 cores)
    python benchmarks/so3_kernel.py --threads 1        # one torch thread per row
"""

from __future__ import annotations

import argparse
import itertools
import json
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results" / "so3_kernel.json"

#: SO(3) grid band limit per configuration and mode (GL product grids, see SO3Grid).
GRIDS = {("reference", "fast"): 4, ("reference", "exact"): 3, ("default", "fast"): 3, ("default", "exact"): 2}


def build(config: str, mode: str, device: str, dtype: str = "float64"):
    """(features function, SO3MolecularKernel) for a configuration."""
    import torch

    from molntk.features.environments import FeatureConfig, environment_features, padded_features
    from molntk.features.radial import CoulombBasis, GaussianBasis
    from molntk.kernels.so3 import Dense, GroupConv, Lift, Nonlinearity, Pool, SO3Grid, serial
    from molntk.molecular import SO3MolecularKernel

    grid = SO3Grid(GRIDS[(config, mode)])
    if config == "reference":
        feats = FeatureConfig(band_limit=6, smearing_width=0.0, radial=CoulombBasis(powers=(2, 6)))
        net = serial(Lift(6), Nonlinearity("erf"), GroupConv(3), Nonlinearity("erf"), GroupConv(3), Pool(), Dense())
        kern = SO3MolecularKernel(net, net.discretisation(grid, mode, getattr(torch, dtype), device), pairing="atom-index", block_size=64)
        return (lambda mols: padded_features(mols, feats, n_atoms=29, device=device)), kern
    feats = FeatureConfig(band_limit=4, smearing_width=0.5, radial=GaussianBasis(n=6, r_min=0.5, r_cut=5.0))
    net = serial(Lift(4, 1.0, 0.1), Nonlinearity("relu"), GroupConv(3, 1.0, 0.1), Nonlinearity("relu"), Pool(), Dense(1.0, 0.1))
    kern = SO3MolecularKernel(net, net.discretisation(grid, mode, getattr(torch, dtype), device), pairing="element", block_size=256)
    return (lambda mols: environment_features(mols, feats, device=device)), kern


def training_molecules(n: int):
    from molntk.data.qm9 import load_qm9
    from molntk.data.splits import standard_split

    data = load_qm9()
    split = standard_split(len(data), seed=0)
    return data.molecules(split.train[:n].tolist())


def atom_pairs(feats1, feats2) -> int:
    """Environment pairs of the molecular sum: same-centre-element pairs (element pairing)
    or padded atom-index pairs (29 per molecule pair)."""
    if hasattr(feats1, "mask"):
        return feats1.coeffs.shape[0] * feats2.coeffs.shape[0] * feats1.coeffs.shape[1]
    z1, z2 = feats1.centre_numbers.cpu(), feats2.centre_numbers.cpu()
    return sum(int((z1 == z).sum()) * int((z2 == z).sum()) for z in z1.unique())


def run_row(config: str, mode: str, n: int, kind: str, device: str, dtype: str = "float64", threads: int | None = None) -> dict:
    """Time one kernel in this process (called in a fresh subprocess)."""
    import torch

    torch.set_num_threads(threads or max(1, torch.get_num_threads()))
    featurize, kern = build(config, mode, device, dtype)
    molecules = training_molecules(n)
    # warm-up: build the measure and Wigner tables outside the timed region
    kern(featurize(molecules[:2]))
    if device != "cpu":
        torch.cuda.synchronize()
    start = time.perf_counter()
    train = featurize(molecules)
    if kind == "train×train":
        out = kern(train)
        test, pairs = train, n * n
    else:
        test = featurize(molecules[: max(1, n // 4)])
        out = kern(test, train)
        pairs = max(1, n // 4) * n
    if device != "cpu":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    assert torch.isfinite(out.ntk).all()
    n_atom_pairs = atom_pairs(test, train)
    return {
        "config": config,
        "mode": mode,
        "n": n,
        "kind": kind,
        "pairs": pairs,
        "seconds": seconds,
        "s_per_pair": seconds / pairs,
        "atom_pairs": n_atom_pairs,
        "atom_pairs_per_s": n_atom_pairs / seconds,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "device": device if device == "cpu" else torch.cuda.get_device_name(),
        "dtype": dtype,
        "grid_band_limit": GRIDS[(config, mode)],
        "threads": torch.get_num_threads(),
    }


def print_reference_values() -> None:
    import torch

    molecules = training_molecules(4)
    torch.set_printoptions(precision=10, linewidth=140)
    for mode in ("fast", "exact"):
        featurize, kern = build("reference", mode, "cpu")
        out = kern(featurize(molecules))
        print(f"reference config, {mode} mode (grid band limit {GRIDS[('reference', mode)]}), molecules "
              f"{[m.id for m in molecules]}:\nNTK =\n{out.ntk}\nNNGP =\n{out.nngp}\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, nargs="+", default=[50, 200])
    parser.add_argument("--exact-n", type=int, nargs="+", default=[50], help="N values for exact mode")
    parser.add_argument("--modes", nargs="+", default=["fast", "exact"], choices=["fast", "exact"])
    parser.add_argument("--configs", nargs="+", default=["reference", "default"], choices=["reference", "default"])
    parser.add_argument("--device", default=None, help="cpu or cuda (default: cpu, plus cuda rows when available)")
    parser.add_argument("--dtypes", nargs="+", default=["float64", "float32"], choices=["float64", "float32"],
                        help="float32 rows are run for the default configuration's fast mode only")
    parser.add_argument("--threads", type=int, default=None, help="torch threads per row (default: torch's)")
    parser.add_argument("--row", help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    if args.row:
        print(json.dumps(run_row(**json.loads(args.row))))
        return

    import torch

    devices = [args.device] if args.device else ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    print_reference_values()
    # rows of the devices run now replace that device's rows; other devices' rows (e.g. a GPU's) stay
    kept = json.loads(args.out.read_text()) if args.out.exists() else []
    rows = [row for row in kept if (row["device"] == "cpu") != ("cpu" in devices)]
    header = (
        f"{'config':<10} {'mode':<6} {'dtype':<8} {'kind':<12} {'n':>5} {'seconds':>10} {'s/pair':>11} "
        f"{'atom pairs/s':>13} {'peak MB':>9} device"
    )
    print(header)
    print("-" * len(header))
    for device in devices:
        for config in args.configs:
            for mode in args.modes:
                dtypes = [d for d in args.dtypes if d == "float64" or (config, mode) == ("default", "fast")]
                for dtype, n, kind in itertools.product(
                    dtypes, args.exact_n if mode == "exact" else args.n, ("train×train", "test×train")
                ):
                    spec = dict(config=config, mode=mode, n=n, kind=kind, device=device, dtype=dtype, threads=args.threads)
                    proc = subprocess.run(
                        [sys.executable, __file__, "--row", json.dumps(spec)], capture_output=True, text=True
                    )
                    if proc.returncode != 0:
                        print(f"{config:<10} {mode:<6} {dtype:<8} {kind:<12} {n:>5} FAILED: {proc.stderr.strip()[-300:]}")
                        continue
                    row = json.loads(proc.stdout.strip().splitlines()[-1])
                    row["machine"] = platform.machine()
                    rows.append(row)
                    print(
                        f"{config:<10} {mode:<6} {dtype:<8} {kind:<12} {n:>5} {row['seconds']:>10.3f} "
                        f"{row['s_per_pair']:>11.3e} {row['atom_pairs_per_s']:>13.3e} {row['peak_rss_mb']:>9.0f} {row['device']}",
                        flush=True,
                    )
    from molntk.utils.files import atomic_write_json

    atomic_write_json(args.out, rows)
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
