"""Sparse (inducing-environment) SO(3) NTK against the exact one on QM9 U0 (not a test).

The default model on QM9 (8 Gaussians to 3 Å, Lebedev grid of band limit 5, ``lift:3 erf
pool dense`` with σ_w = 2 and ``--sigma-b``; standard split seed 0, the first N training
and first ``--n-test`` test molecules; U0 minus the dressed-atom model in meV). The
environment kernel k(env, env') of every environment (training and test) against every
training environment is computed once (element pairing: zero across elements); from it, by sums over atoms, the exact molecular kernels and, for every m and
selection, the sparse model's K_mm, K_nm and K_tm. Each model's λ is chosen by
closed-form LOO on the training set over the same relative grid (floored at psd_rtol);
the sparse model drops K_mm eigenvalues below ``--rank-rtol`` · s_max (default: the
``sparse`` section's 1e-10).

Reported per (m, selection): test MAE, the relative distance of the sparse predictions
from the exact ones ‖p − p*‖ / ‖p*‖, and the kernel work of each model in environment
pairs (exact: Σ_e n_e(n_e + 1)/2 train + n_e^test · n_e train pairs; sparse: the inducing
pairs m_e(m_e + 1)/2 and (n_e + n_e^test) · m_e), with their ratio.

    python benchmarks/sparse_inducing.py                       # N = 1000, m = 250 … 8000
    python benchmarks/sparse_inducing.py --rank-rtol 1e-10 3e-8 --kernel-file /tmp/k.npy
    python benchmarks/sparse_inducing.py --n 500 --m 100 500 --n-test 200

Writes benchmarks/results/sparse_inducing.json.
"""

from __future__ import annotations

import argparse
import datetime
import itertools
import json
import time
from pathlib import Path

import numpy as np
import torch

from molntk.data.qm9 import QM9_ELEMENTS, load_qm9
from molntk.pipelines.qm9.config import SparseConfig
from molntk.pipelines.tasks import TASKS
from molntk.data.splits import standard_split
from molntk.features.environments import environment_features
from molntk.features.inducing import environments_as_molecules, inducing_environments
from molntk.kernels.so3 import SO3Grid
from molntk.kernels.so3.spec import parse_architecture
from molntk.molecular import SO3MolecularKernel
from molntk.regression import DressedAtomModel, KernelRegressor, element_counts
from molntk.regression.selection import lambda_grid
from molntk.regression.sparse import SparseKernelRegressor

ROOT = Path(__file__).resolve().parents[1]


def atom_sums(molecule_index: np.ndarray, n_molecules: int) -> np.ndarray:
    """L (n_molecules, n_env): L[M, a] = 1 when environment a belongs to molecule M."""
    L = np.zeros((n_molecules, molecule_index.size))
    L[molecule_index, np.arange(molecule_index.size)] = 1.0
    return L


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1000, help="training molecules")
    parser.add_argument("--n-test", type=int, default=400)
    parser.add_argument("--m", type=int, nargs="+", default=[250, 500, 1000, 2000, 4000, 8000])
    parser.add_argument("--selection", nargs="+", default=["fps", "random"], choices=["fps", "random"])
    parser.add_argument("--rank-rtol", type=float, nargs="+", default=[SparseConfig().rank_rtol],
                        help="K_mm eigenvalues below rtol · s_max dropped (default: the sparse section's default)")
    parser.add_argument("--sigma-b", type=float, default=1.0)
    parser.add_argument("--kernel-file", default=None, help="keep the environment kernel in this .npy and reuse it")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "sparse_inducing.json"))
    args = parser.parse_args()

    config = TASKS.load(str(ROOT / "configs" / "qm9_u0.yaml"), ())
    features = config.features.feature_config()
    psd_rtol = config.regression.psd_rtol
    qm9 = load_qm9()
    split = standard_split(len(qm9), 0)
    train_idx, test_idx = split.train[: args.n], split.test[: args.n_test]
    molecules = qm9.molecules(train_idx.tolist()) + qm9.molecules(test_idx.tolist())
    y = np.asarray(qm9.target("u0_atom"))
    dressed = DressedAtomModel().fit(element_counts(molecules[: args.n], QM9_ELEMENTS), y[train_idx])
    base = dressed.predict(element_counts(molecules, QM9_ELEMENTS))
    y_train, y_test = y[train_idx] - base[: args.n], y[test_idx]

    feats = environment_features(molecules, features)
    n_env_train = int((feats.molecule_index < args.n).sum())
    net = parse_architecture("lift:3 erf pool dense", sigma_w=2.0, sigma_b=args.sigma_b)
    grid = SO3Grid(config.kernel.grid_band_limit, config.kernel.sampling)
    kernel = SO3MolecularKernel(net, net.discretisation(grid, "fast", torch.float64, "cpu"), "element", "sum", config.kernel.block_size)
    every = environments_as_molecules(feats, torch.arange(feats.n_env))
    train_envs = environments_as_molecules(feats, torch.arange(n_env_train))
    start = time.perf_counter()
    seconds_file = Path(f"{args.kernel_file}.seconds")
    if args.kernel_file and seconds_file.exists():  # written after the kernel file is complete
        K_env, env_seconds = np.load(args.kernel_file), float(seconds_file.read_text())
    else:
        with torch.no_grad():
            K_env = kernel(every, train_envs).ntk.numpy()  # (all environments, training environments)
        env_seconds = time.perf_counter() - start
        if args.kernel_file:
            np.save(args.kernel_file, K_env)
            seconds_file.write_text(f"{env_seconds}\n")
    print(f"environment kernel {K_env.shape}: {env_seconds:.0f} s")

    index = feats.molecule_index.numpy()
    L = atom_sums(index, len(molecules))
    L_train, L_test = L[: args.n, :n_env_train], L[args.n :, n_env_train:]
    K_train = L_train @ K_env[:n_env_train] @ L_train.T
    K_test = L_test @ K_env[n_env_train:] @ L_train.T
    grid_rel = lambda_grid(psd_rtol, quadrature=True)
    exact = KernelRegressor("ntk", reg="cv", cv="loo", psd_rtol=psd_rtol, relative_grid=grid_rel).fit(K_train, y_train)
    p_exact = base[args.n :] + exact.predict(K_test)
    mae_exact = float(np.mean(np.abs(p_exact - y_test)))
    numbers = feats.centre_numbers.numpy()
    n_e = {e: int((numbers[:n_env_train] == e).sum()) for e in QM9_ELEMENTS}
    t_e = {e: int((numbers[n_env_train:] == e).sum()) for e in QM9_ELEMENTS}
    exact_pairs = sum(n * (n + 1) // 2 + t_e[e] * n for e, n in n_e.items())
    print(f"exact: MAE {mae_exact:.1f} meV, λ_rel {exact.reg_relative_:.1e}, {exact_pairs:.3g} environment pairs")

    rows = []
    for m, method, rank_rtol in itertools.product(args.m, args.selection, args.rank_rtol):
        chosen = inducing_environments(feats, m, method=method, seed=0, pool=args.n).numpy()
        m_e = {e: int((numbers[chosen] == e).sum()) for e in QM9_ELEMENTS}
        pairs = sum(k * (k + 1) // 2 + (n_e[e] + t_e[e]) * k for e, k in m_e.items())
        K_mm = K_env[np.ix_(chosen, chosen)]
        K_nm = L_train @ K_env[:n_env_train, chosen]
        K_tm = L_test @ K_env[n_env_train:, chosen]
        model = SparseKernelRegressor(reg="cv", cv="loo", relative_grid=grid_rel, rank_rtol=rank_rtol).fit(K_nm, K_mm, y_train)
        p = base[args.n :] + model.predict(K_tm)
        row = {
            "m": len(chosen), "selection": method, "rank_rtol": rank_rtol, "mae_mev": float(np.mean(np.abs(p - y_test))),
            "prediction_distance": float(np.linalg.norm(p - p_exact) / np.linalg.norm(p_exact - base[args.n :])),
            "reg_relative": model.reg_relative_, "rank": model.rank_,
            "environment_pairs": pairs, "pairs_vs_exact": pairs / exact_pairs,
        }
        rows.append(row)
        print(f"m {row['m']:5d} {method:6s} rtol {rank_rtol:.0e}: MAE {row['mae_mev']:6.1f} meV, distance to exact {row['prediction_distance']:.3f}, "
              f"rank {row['rank']}, λ_rel {row['reg_relative']:.1e}, work {row['pairs_vs_exact']:.3f} × exact")
    document = {
        "date": datetime.date.today().isoformat(), "n_train": args.n, "n_test": args.n_test, "sigma_b": args.sigma_b,
        "threads": torch.get_num_threads(), "environment_kernel_seconds": env_seconds,
        "training_environments": n_env_train, "test_environments": feats.n_env - n_env_train,
        "exact": {"mae_mev": mae_exact, "reg_relative": exact.reg_relative_, "environment_pairs": exact_pairs},
        "sparse": rows,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(document, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
