"""Sums of two SO(3) NTKs with a CV-chosen weight (issue "accuracy at scale", a learned body-order mix).

A weighted sum of two NTKs is the NTK of the sum of the two networks' outputs (two
infinite-width networks side by side, each with its own feature maps), so

    Θ_c = (1 − c) Θ_A / τ_A + c Θ_B / τ_B,      c ∈ [0, 1],

with τ the mean diagonal of each Nyström training kernel (so c weighs kernels of equal
size), is again a network kernel. Each NTK keeps its own m inducing environments (those of
:mod:`qm9_diagnosis`, the cached K_mm, K_nm, K_tm of its variants): the sparse model of
the sum is the sparse model on the concatenated inducing sets with the block-diagonal

    K_mm = diag((1 − c) K_A,mm / τ_A, c K_B,mm / τ_B),   K_nm = [(1 − c) K_A,nm / τ_A, c K_B,nm / τ_B],

since K_nm K_mm⁺ K_mn is then the weighted sum of the two Nyström kernels. c and λ are chosen
on training molecules only, by the closed-form leave-one-out residuals r_i = y_i − ŷ_{-i}(x_i)
of each (c, λ) on the grids: ``--criterion mse`` minimises mean r_i² (the pipeline's
criterion), ``--criterion mae`` mean |r_i| (the metric the QM9 tables report, less
dominated by the heavy tail of a few molecules); the test MAE is reported for every c.

    python benchmarks/qm9_kernel_mixture.py --pairs grid6:cutoff5_scaling_matched --sizes 1000 5000
    python benchmarks/qm9_kernel_mixture.py --pairs growth16_3A_matched:growth20_5A_scaling_matched \
        --criterion mse mae

Needs the variants' cached kernels (``python benchmarks/qm9_diagnosis.py --variants …``
computes them). Prints a line per pair, N, criterion and c; merges its records into
benchmarks/results/qm9_kernel_mixture.json (replacing those of the same pair, N, criterion and c).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np
from benchmark_files import merge_records
from qm9_diagnosis import BASE, REGRESSION, kernels, matched

from molntk.data.qm9 import load_qm9
from molntk.data.splits import standard_split
from molntk.regression.dressed_atom import DressedAtomModel, element_counts
from molntk.regression.selection import lambda_grid
from molntk.regression.sparse import SparseKernelRegressor

RESULTS = Path(__file__).parent / "results" / "qm9_kernel_mixture.json"
WEIGHTS = (0.0, 0.1, 0.25, 0.5, 0.75, 0.9, 1.0)
#: Leave-one-out criteria: name → the regressor's ``cv_loss`` (the loo_score records: mean r² in meV², mean |r| in meV).
CRITERIA = {"mse": "squared", "mae": "absolute"}


def nystrom_diagonal(K: dict[str, np.ndarray], rank_rtol: float) -> float:
    """τ = mean_i (K_nm K_mm⁺ K_mn)_ii: the mean diagonal of the Nyström training kernel."""
    s, U = np.linalg.eigh((K["K_mm"] + K["K_mm"].T) / 2)
    keep = s > rank_rtol * s.max()
    return float(np.mean(np.sum((K["K_nm"] @ (U[:, keep] / np.sqrt(s[keep]))) ** 2, axis=1)))


def mixed(KA: dict[str, np.ndarray], KB: dict[str, np.ndarray], a: float, b: float) -> dict[str, np.ndarray]:
    """The sparse kernels of a·Θ_A + b·Θ_B on the concatenated inducing sets (parts of weight 0 left out)."""
    parts = [(w, K) for w, K in ((a, KA), (b, KB)) if w > 0]
    K_mm = np.zeros((sum(K["K_mm"].shape[0] for _, K in parts),) * 2)
    start = 0
    for w, K in parts:
        m = K["K_mm"].shape[0]
        K_mm[start : start + m, start : start + m] = w * K["K_mm"]
        start += m
    return {"K_mm": K_mm, **{key: np.hstack([w * K[key] for w, K in parts]) for key in ("K_nm", "K_tm")}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", nargs="+", default=["grid6:cutoff5_scaling_matched", "exp_w4:cutoff5_scaling_matched"])
    parser.add_argument("--sizes", nargs="+", type=int, default=[1000, 5000])
    parser.add_argument("--regression", default="floor 1e-10, rank 1e-12", choices=list(REGRESSION))
    parser.add_argument("--criterion", nargs="+", default=["mse"], choices=list(CRITERIA))
    parser.add_argument("--n-test", type=int, default=1000)
    parser.add_argument("--n-cached", type=int, default=5000, help="training size the variants' kernels were cached at")
    parser.add_argument("--cache", type=Path, default=Path("results/qm9_diagnosis_kernels"))
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    data = load_qm9()
    split = standard_split(len(data), seed=0)
    train = [data.molecule(int(i)) for i in split.train[: args.n_cached]]
    test = [data.molecule(int(i)) for i in split.test[: args.n_test]]
    target = data.target_names.index("u0_atom")
    y_train, y_test = data.targets[split.train[: args.n_cached], target], data.targets[split.test[: args.n_test], target]
    counts_train, counts_test = element_counts(train, BASE.features.elements), element_counts(test, BASE.features.elements)
    psd_rtol, rank_rtol = REGRESSION[args.regression]
    grid = lambda_grid(psd_rtol, True)
    records: list[dict[str, Any]] = []
    for pair in args.pairs:
        names = pair.split(":")
        K = {name: kernels(name, matched(name, train[:500]), train, test, [], args.cache) for name in names}
        tau = {name: nystrom_diagonal(K[name], rank_rtol) for name in names}
        for n in args.sizes:
            dressed = DressedAtomModel().fit(counts_train[:n], y_train[:n])
            residual = y_train[:n] - dressed.predict(counts_train[:n])
            scored: dict[str, list[dict[str, Any]]] = {criterion: [] for criterion in args.criterion}
            for c in WEIGHTS:
                Kc = mixed(K[names[0]], K[names[1]], (1 - c) / tau[names[0]], c / tau[names[1]])
                for criterion in args.criterion:
                    model = SparseKernelRegressor(reg="cv", cv_loss=CRITERIA[criterion], relative_grid=grid,
                                                  rank_rtol=rank_rtol).fit(Kc["K_nm"][:n], Kc["K_mm"], residual)
                    scale = float(model.target_scale_[0])  # the curve scores standardised residuals
                    loo = float(model.cv_result_.scores.min()) * (scale**2 if criterion == "mse" else scale)
                    error = dressed.predict(counts_test) + model.predict(Kc["K_tm"]) - y_test
                    scored[criterion].append({
                        "pair": pair, "weight_b": c, "n_train": n, "n_test": len(test), "regression": args.regression,
                        "criterion": criterion, "loo_score": loo, "mae": float(np.mean(np.abs(error))),
                        "rmse": float(np.sqrt(np.mean(error**2))), "rank": int(model.rank_),
                        "reg_relative": float(model.reg_relative_), "reg_at_grid_edge": bool(model.cv_result_.at_grid_edge),
                        "chosen_by_loo": False})
                    print(f"{pair} N={n:5d} {criterion} c={c:4.2f} LOO {loo:10.4g}  test MAE {np.mean(np.abs(error)):6.2f} meV  "
                          f"rank {model.rank_}", flush=True)
            for criterion, rows in scored.items():
                chosen = min(rows, key=lambda r: r["loo_score"])
                chosen["chosen_by_loo"] = True
                print(f"{pair} N={n:5d} chosen by LOO {criterion}: c = {chosen['weight_b']}, test MAE {chosen['mae']:.2f} meV",
                      flush=True)
                records += rows
    save(args.out, records)


def save(path: Path, new: list[dict[str, Any]]) -> None:
    """Merge ``new`` into the records at ``path``, replacing those of the same pair, N, criterion and c
    (records written before the criterion was recorded scored mean squared residuals)."""
    merge_records(path, new, lambda r: (r["pair"], r["n_train"], r.get("criterion", "mse"), r["weight_b"]))


if __name__ == "__main__":
    main()
