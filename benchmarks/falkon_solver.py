"""Falkon's preconditioned CG against the sparse regressor's SVD on the same Nyström model (not a test).

Synthetic molecules: 10–26 atoms each, elements H, C, N, O, F with QM9-like frequencies
(0.51, 0.35, 0.055, 0.08, 0.005); an atom's environment is one of 40 per-element prototype
points in 6 dimensions plus Gaussian noise (σ = 0.35), so that environments repeat as in
real molecules and K_mm is ill conditioned; the environment kernel is an RBF of length 1
between environments of the same element and 0 across elements (element pairing). K_nm sums
it over each molecule's atoms against m inducing environments drawn (seeded) from the
training environments; K_tm likewise for ``--n-test`` test molecules; targets are sums over
atoms of sin(x₀) + 0.3 x₁² (+ 0.5 x₂ on carbon), plus noise (σ = 0.1): energies after a
dressed-atom baseline.

For each (n, m) the data are written once to a temporary folder, and every solver fits in a
fresh subprocess (one torch thread and one BLAS thread, leaving a core to other work) at the
same λ = ``--reg-relative`` × mean diag of the exact molecular kernel (Σ over atom pairs of
each molecule, cheap): ``sparse`` (``SparseKernelRegressor``: eigh of K_mm, thin SVD of the
n × r features) and ``FalkonRegressor`` (float64, tol 1e-8, CPU, at most ``--max-iter``
iterations) with its default preconditioner (``falkon``: s = 2m sampled rows), Falkon's
T Tᵀ with c = n/m (``falkon-subsample``) and, when asked for, with the Frobenius c
(``falkon-frobenius``; it converges like ``falkon-subsample`` at small λ), and the sparse
regressor with the Cholesky factor of the jittered K_mm instead of its eigendecomposition
(``sparse-cholesky``), and the sampled rows fixed at s = 2m (``falkon-2m``; with ``--search``
the default samples every row).
Reported per row: fit seconds, the extra peak RSS over the inputs held in memory
(``ru_maxrss`` minus the RSS after loading them), PCG iterations, test RMSE, and the largest
difference of the predictions from the sparse regressor's, relative to the spread of its
predictions: max|p − p_S| / max|p_S − mean(y)|.

    python benchmarks/falkon_solver.py                                # n 5000 20000 × m 2000 5000
    python benchmarks/falkon_solver.py --n 5000 --m 2000 --solvers sparse falkon-frobenius
    python benchmarks/falkon_solver.py --n 20000 --m 20000 --solvers falkon   # m = 20,000: Falkon only
    python benchmarks/falkon_solver.py --n 5000 --m 2000 5000 --solvers sparse sparse-cholesky
    python benchmarks/falkon_solver.py --search --n 20000 --m 2000 5000 --solvers falkon falkon-2m

``--search``: λ by hold-out over the default relative grid (``reg="cv"``: 20 % of the
training molecules held out, 21 λ from 1 down to 1e-10 × mean diag K̃, warm starts) instead
of one given λ; the row's ``reg_relative`` is "cv", ``iterations`` counts every PCG iteration
of the search and the final solve (``cv_iterations`` per λ, ascending), and the predictions
are compared with the first solver's (``max_rel_diff_vs_first``).

Writes benchmarks/results/falkon_solver.json; rows of an existing file with another
(n, m, solver, λ) are kept, so runs add up.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from molntk.regression import FalkonRegressor, SparseKernelRegressor

RESULTS = Path(__file__).resolve().parent / "results" / "falkon_solver.json"
SOLVERS = ("sparse", "falkon", "falkon-subsample", "falkon-frobenius", "sparse-cholesky", "falkon-2m")
PRECONDITIONERS = {"falkon": "sampled-rows", "falkon-subsample": "subsample", "falkon-frobenius": "frobenius",
                   "falkon-2m": "sampled-rows"}
ELEMENTS = np.array([1, 6, 7, 8, 9])
FREQUENCIES = np.array([0.51, 0.35, 0.055, 0.08, 0.005])
#: Environments per chunk when the kernels are summed over atoms (a 4,000 × m block).
CHUNK = 4000


def environments(n: int, rng: np.random.Generator, centres: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(owning molecule, element index, 6-d point) of every atom of n molecules."""
    owner = np.repeat(np.arange(n), rng.integers(10, 27, size=n))
    element = rng.choice(len(ELEMENTS), size=owner.size, p=FREQUENCIES)
    points = centres[element, rng.integers(0, centres.shape[1], owner.size)] + 0.35 * rng.normal(size=(owner.size, 6))
    return owner, element, points


def env_kernel(xa: np.ndarray, ea: np.ndarray, xb: np.ndarray, eb: np.ndarray) -> np.ndarray:
    """exp(−‖x_a − x_b‖²/2) between environments of the same element, 0 across elements."""
    squares = (xa**2).sum(1)[:, None] + (xb**2).sum(1)[None, :] - 2.0 * xa @ xb.T
    return np.exp(-0.5 * np.maximum(squares, 0.0)) * (ea[:, None] == eb[None, :])


def summed(
    owner: np.ndarray, n: int, element: np.ndarray, points: np.ndarray, ind_e: np.ndarray, ind_x: np.ndarray
) -> np.ndarray:
    """K (n, m): the environment kernel against the inducing environments, summed over each molecule's atoms."""
    out = np.zeros((n, ind_x.shape[0]))
    for start in range(0, owner.size, CHUNK):
        rows = slice(start, start + CHUNK)
        np.add.at(out, owner[rows], env_kernel(points[rows], element[rows], ind_x, ind_e))
    return out


def self_kernel_mean(owner: np.ndarray, element: np.ndarray, points: np.ndarray) -> float:
    """mean_M K(M, M) = Σ_{a, b ∈ M} k(a, b), averaged over the molecules."""
    bounds = np.flatnonzero(np.diff(owner)) + 1
    blocks = np.split(np.arange(owner.size), bounds)
    return float(np.mean([env_kernel(points[b], element[b], points[b], element[b]).sum() for b in blocks]))


def write_problem(folder: Path, n: int, m: int, n_test: int, seed: int) -> dict:
    """Generate the data of (n, m) and save K_nm, K_mm, K_tm, Y, y_test as .npy in ``folder``."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(len(ELEMENTS), 40, 6))
    owner, element, points = environments(n, rng, centres)
    t_owner, t_element, t_points = environments(n_test, rng, centres)
    inducing = np.sort(rng.choice(owner.size, m, replace=False))
    ind_e, ind_x = element[inducing], points[inducing]

    def targets(own: np.ndarray, el: np.ndarray, x: np.ndarray, count: int) -> np.ndarray:
        per_atom = np.sin(x[:, 0]) + 0.3 * x[:, 1] ** 2 + 0.5 * x[:, 2] * (el == 1)
        return np.bincount(own, per_atom, minlength=count) + 0.1 * rng.normal(size=count)

    np.save(folder / "K_nm.npy", summed(owner, n, element, points, ind_e, ind_x))
    np.save(folder / "K_mm.npy", env_kernel(ind_x, ind_e, ind_x, ind_e))
    np.save(folder / "K_tm.npy", summed(t_owner, n_test, t_element, t_points, ind_e, ind_x))
    np.save(folder / "Y.npy", targets(owner, element, points, n))
    y_test = targets(t_owner, t_element, t_points, n_test)
    np.save(folder / "y_test.npy", y_test)
    return {
        "environments": int(owner.size),
        "mean_diag_K": self_kernel_mean(owner, element, points),
        "test_target_std": float(np.std(y_test)),
    }


def row_key(row: dict) -> tuple:
    """A result row's identity: (n, m, solver, relative λ)."""
    return row["n"], row["m"], row["solver"], row["reg_relative"]


def run_row(spec: dict) -> dict:
    """One solver on one problem, in this process: fit, predict, time and peak RSS."""
    torch.set_num_threads(1)
    folder = Path(spec["folder"])
    K_nm, K_mm, K_tm, Y = (np.load(folder / f"{name}.npy") for name in ("K_nm", "K_mm", "K_tm", "Y"))
    baseline = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    solver = spec["solver"]
    if solver.startswith("sparse"):
        model = SparseKernelRegressor(reg=spec["reg"], factorisation="cholesky" if solver == "sparse-cholesky" else "eigh")
    else:
        rows = 2 * K_mm.shape[0] if solver == "falkon-2m" else None
        model = FalkonRegressor(reg=spec["reg"], preconditioner=PRECONDITIONERS[solver], preconditioner_rows=rows,
                                max_iter=spec["max_iter"])
    start = time.perf_counter()
    model.fit(K_nm, K_mm, Y)
    seconds = time.perf_counter() - start
    predicted = model.predict(K_tm)
    np.save(folder / f"predicted-{solver}.npy", predicted)
    searched = getattr(model, "cv_iterations_", None)
    return {
        "solver": solver,
        "fit_seconds": seconds,
        "extra_peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 - baseline,
        "iterations": getattr(model, "iterations_", None) if searched is None else int(searched.sum()) + model.iterations_,
        **({} if searched is None else {"cv_iterations": searched.tolist(), "reg_relative_chosen": model.reg_relative_}),
        "converged": getattr(model, "converged_", None),
        "jitter": getattr(model, "jitter_", None),
        "preconditioner_scale": getattr(model, "preconditioner_scale_", None),
        "rank": getattr(model, "rank_", None),
        "test_rmse": float(np.sqrt(np.mean((predicted - np.load(folder / "y_test.npy")) ** 2))),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, nargs="+", default=[5000, 20000], help="training molecules")
    parser.add_argument("--m", type=int, nargs="+", default=[2000, 5000], help="inducing environments")
    parser.add_argument("--n-test", type=int, default=1000)
    parser.add_argument("--reg-relative", type=float, default=1e-6, help="λ / mean diag of the molecular kernel")
    parser.add_argument("--solvers", nargs="+", choices=SOLVERS, default=list(SOLVERS[:3]))
    parser.add_argument("--max-iter", type=int, default=500, help="Falkon's max_iter")
    parser.add_argument("--search", action="store_true", help="λ by hold-out over the default grid (reg='cv')")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--row", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.row:
        print(json.dumps(run_row(json.loads(args.row))))
        return
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    header = f"{'n':>6} {'m':>5} {'solver':<17} {'fit s':>7} {'extra MB':>8} {'iter':>5} {'test RMSE':>9} {'max rel diff':>12}"
    print(header)
    rows = []
    for n in args.n:
        for m in args.m:
            with tempfile.TemporaryDirectory() as folder:
                start = time.perf_counter()
                info = write_problem(Path(folder), n, m, args.n_test, args.seed)
                reg = "cv" if args.search else args.reg_relative * info["mean_diag_K"]
                print(
                    f"# n {n}, m {m}: {info['environments']} environments, test target std {info['test_target_std']:.3f}, "
                    f"λ = {reg if args.search else format(reg, '.3g')}, data {time.perf_counter() - start:.0f} s",
                    flush=True,
                )
                reference = None
                for solver in args.solvers:
                    spec = {"folder": folder, "solver": solver, "reg": reg, "max_iter": args.max_iter}
                    child = subprocess.run(
                        [sys.executable, __file__, "--row", json.dumps(spec)], capture_output=True, text=True, env=env, check=False
                    )
                    if child.returncode != 0:
                        print(f"{n} {m} {solver}: failed\n{child.stderr}", file=sys.stderr)
                        continue
                    row = {"n": n, "m": m, "reg_relative": "cv" if args.search else args.reg_relative, "reg": reg,
                           "n_test": args.n_test, **info}
                    row.update(json.loads(child.stdout.strip().splitlines()[-1]))
                    predicted = np.load(Path(folder) / f"predicted-{solver}.npy")
                    if solver == "sparse" or (args.search and reference is None):
                        reference = predicted
                    spread = None if reference is None else np.max(np.abs(reference - np.load(Path(folder) / "Y.npy").mean()))
                    diff = None if reference is None else float(np.max(np.abs(predicted - reference)) / spread)
                    row["max_rel_diff_vs_first" if args.search else "max_rel_diff_vs_sparse"] = diff
                    rows.append(row)
                    iterations = "" if row["iterations"] is None else f"{row['iterations']}{'' if row['converged'] else '*'}"
                    diff = "" if diff is None else f"{diff:.1e}"
                    print(
                        f"{n:>6} {m:>5} {solver:<17} {row['fit_seconds']:>7.1f} {row['extra_peak_rss_mb']:>8.0f} "
                        f"{iterations:>5} {row['test_rmse']:>9.3f} {diff:>12}",
                        flush=True,
                    )
    if any(row.get("converged") is False for row in rows):
        print("* PCG stopped at --max-iter above tol")
    done = {row_key(row) for row in rows}
    kept = json.loads(args.out.read_text())["rows"] if args.out.exists() else []
    document = {
        "date": datetime.date.today().isoformat(),
        "machine": platform.processor() or platform.machine(),
        "threads": 1,
        "rows": [row for row in kept if row_key(row) not in done] + rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(document, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
