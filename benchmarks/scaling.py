"""Scaling benchmark of the block engine and the large-N solvers (not a test).

For each N (rows of the table), one fresh subprocess computes the train × train (N × N)
and test × train (N/4 × N) NTK and NNGP of QM9 molecules (first N of the standard split's
training set, first N/4 of its test set) with :func:`molntk.scale.kernel_matrices`, then
solves (K_ntk + λI) X = Y (λ = max(1e-2 · mean diag K, −2 s_min), Y: 3 seeded normal targets) by Cholesky,
PCG (pivoted-Cholesky preconditioner, rank 100, tol 1e-8) and Nyström (m = N/10 pivoted
inducing molecules), with their relative errors against Cholesky
(:func:`molntk.regression.solvers.solver_errors`). λ is that large because the fast-mode
kernel on a coarse grid is PSD only up to quadrature error: its smallest eigenvalue s_min
is negative (s_min / s_max is reported per row). Reported per row: kernel seconds,
molecule pairs per second, peak RSS of the process, its RSS before the kernel and its peak
RSS during the kernel (sampled every 5 ms; minus the RSS before and the output matrices it
is the engine's working memory, ``engine_working_mb``), GPU peak memory on CUDA, and the solve times and errors. Then: the fitted exponent a of seconds ∝ N^a (least
squares in log-log), the speed-up of 2 local Dask workers (1 thread each, warmed up) over
one process with 1 thread at ``--dask-n`` (blocks of N/4 molecules, 14 blocks), and, with
GPU rows, full QM9 (110,000 × 110,000 train + 10,831 × 110,000 test) projected from the
measured GPU pair rate (labelled projected).

Model (``--model fast``, default): feature maps of band limit 3 (6 Gaussians, cutoff 5 Å,
smearing 0.5), Lift(3, 1, 0.1) → ReLU → Pool → Dense(1, 0.1), SO3Grid(2), fast mode,
element pairing, float64. ``--model default``: the first QM9 main job's model (see
``MODELS``); ``--model main``: the SO(3) estimator's defaults (:class:`~molntk.models.SO3ModelRecipe`,
Lebedev grid of band limit 5).

    python benchmarks/scaling.py                          # CPU, N = 100 200 400; Dask at N = 200
    python benchmarks/scaling.py --n 250 500 1000 2000    # the issue's grid (hours on 2 cores)
    python benchmarks/scaling.py --device cuda --n 1000 2000 4000 --no-dask --molecules mols.npz

``--molecules`` reads molecules from an .npz (numbers, positions, n_atoms concatenated;
first N train, next N/4 test) instead of the QM9 package, for machines without it; write
one with ``--export-molecules FILE COUNT``. Results: ``benchmarks/results/scaling.json``
(rows merged by device with an existing file, so CPU and GPU runs add up).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import math
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results" / "scaling.json"
QM9_TRAIN, QM9_TEST = 110_000, 10_831

MODELS = {
    "fast": "FeatureConfig(band_limit=3, smearing_width=0.5, radial=GaussianBasis(n=6, r_cut=5.0)); Lift(3, 1, 0.1) → ReLU → Pool → Dense(1, 0.1); SO3Grid(2) fast mode; element pairing; float64",
    "default": "the first QM9 main job's model: FeatureConfig(smearing_width=0.5, radial=GaussianBasis(n=6, r_cut=5.0)); lift:3 erf pool dense (σ_w = 1, σ_b = 0.1); SO3Grid(4) fast mode; element pairing; float64",
    "main": "the SO(3) estimator's defaults (SO3ModelRecipe()): 8 Gaussians to 3 Å, smearing 0.3, band limit 4; lift:3 erf pool dense (σ_w = 2, σ_b = 1); SO3Grid(5, 'lebedev') fast mode; element pairing; float64",
}


def build(model: str, device: str, env_block: int = 256):
    """The SO3MolecularKernel (with its feature config) of a benchmark model."""
    import torch

    from molntk.features.environments import FeatureConfig
    from molntk.features.radial import GaussianBasis
    from molntk.kernels.so3 import Dense, Lift, Nonlinearity, Pool, SO3Grid, serial
    from molntk.kernels.so3.spec import parse_architecture
    from molntk.models import SO3ModelRecipe
    from molntk.molecular import SO3MolecularKernel

    if model == "main":
        return dataclasses.replace(SO3ModelRecipe(), block_size=env_block).molecular_kernel(device)
    first = FeatureConfig(smearing_width=0.5, radial=GaussianBasis(n=6, r_cut=5.0))  # the first main job's feature maps
    if model == "fast":
        net, grid, features = serial(Lift(3, 1.0, 0.1), Nonlinearity("relu"), Pool(), Dense(1.0, 0.1)), SO3Grid(2), dataclasses.replace(first, band_limit=3)
    else:
        net, grid, features = parse_architecture("lift:3 erf pool dense", sigma_w=1.0, sigma_b=0.1), SO3Grid(4), first
    return SO3MolecularKernel(net, net.discretisation(grid, "fast", torch.float64, device), block_size=env_block, features=features)


def load_molecules(n_train: int, n_test: int, path: str | None):
    """(train molecules, test molecules): QM9's standard split, or the first ones of ``path``."""
    from molntk.data.molecule import Molecule

    if path is None:
        from molntk.data.qm9 import load_qm9
        from molntk.data.splits import standard_split

        data = load_qm9()
        split = standard_split(len(data), seed=0)
        return data.molecules(split.train[:n_train].tolist()), data.molecules(split.test[:n_test].tolist())
    import numpy as np

    with np.load(path) as f:
        numbers, positions, n_atoms = f["numbers"], f["positions"], f["n_atoms"]
    if n_train + n_test > len(n_atoms):
        raise SystemExit(f"{path} holds {len(n_atoms)} molecules, {n_train + n_test} needed")
    starts = np.concatenate([[0], np.cumsum(n_atoms)])
    mols = [Molecule(numbers[starts[i] : starts[i + 1]], positions[starts[i] : starts[i + 1]]) for i in range(n_train + n_test)]
    return mols[:n_train], mols[n_train:]


def export_molecules(path: str, count: int) -> None:
    import numpy as np

    train, _ = load_molecules(count, 0, None)
    np.savez_compressed(
        path,
        numbers=np.concatenate([m.numbers for m in train]),
        positions=np.concatenate([m.positions for m in train]),
        n_atoms=np.array([m.n_atoms for m in train]),
    )
    print(f"wrote {count} molecules to {path}")


def rss_mb() -> float:
    import psutil

    return psutil.Process().memory_info().rss / 2**20


class PeakRSS:
    """Largest RSS of this process (MB) while a ``with`` block runs, sampled every 5 ms."""

    def __enter__(self) -> PeakRSS:
        import threading

        self.peak, self._stop = rss_mb(), threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self) -> None:
        while not self._stop.wait(0.005):
            self.peak = max(self.peak, rss_mb())

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, rss_mb())


def run_row(model: str, n: int, device: str, executor: str, threads: int | None, molecules: str | None, block: int | None, env_block: int) -> dict:
    """One benchmark row, in this (fresh) process."""
    import numpy as np
    import torch

    from molntk.regression.solvers import solver_errors
    from molntk.molecular import BlockKernelOf
    from molntk.scale import DaskExecutor, DeviceExecutor, SerialExecutor, kernel_matrices

    if threads:
        torch.set_num_threads(threads)
    kernel = build(model, "cpu" if device == "cuda-all" else device, env_block)
    train, test = load_molecules(n, max(1, n // 4), molecules)
    start = time.perf_counter()
    block_kernel = BlockKernelOf(kernel, train + test)  # features on the kernel's device
    feature_seconds = time.perf_counter() - start
    block_kernel.compute_block(np.arange(2), None)  # warm-up: measure and Wigner tables
    rss_before = rss_mb()
    train_idx, test_idx = np.arange(n), np.arange(n, n + len(test))
    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    with PeakRSS() as sampler:
        if executor == "dask":
            with DaskExecutor.local(n_workers=2) as dask:
                kernel_matrices(block_kernel, train_idx[:4], block_size=1, executor=dask)  # warm-up: 10 tasks reach both workers
                setup = time.perf_counter() - start
                start = time.perf_counter()
                K = kernel_matrices(block_kernel, train_idx, test_idx, block_size=block, executor=dask)
        else:
            setup = 0.0
            run_on = DeviceExecutor() if device == "cuda-all" else SerialExecutor()
            K = kernel_matrices(block_kernel, train_idx, test_idx, block_size=block, executor=run_on)
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        seconds = time.perf_counter() - start
    pairs = n * (n + 1) // 2 + len(test) * n
    K_train = K["ntk_train"]
    eigenvalues = np.linalg.eigvalsh(K_train)
    reg = max(1e-2 * float(np.mean(np.diag(K_train))), -2.0 * float(eigenvalues[0]))
    Y = np.random.default_rng(0).normal(size=(n, 3))
    solves = solver_errors(K_train, Y, reg, preconditioners=("pivoted-cholesky",), rank=100, tol=1e-8, inducing_sizes=(max(1, n // 10),))
    row = {
        "model": model,
        "n_train": n,
        "n_test": len(test),
        "device": device if not device.startswith("cuda") else f"{device} ({torch.cuda.get_device_name()})",
        "executor": executor,
        "threads": torch.get_num_threads(),
        "block_side": block or "default (256 or the memory budget)",
        "env_block": env_block,
        "feature_seconds": feature_seconds,
        "kernel_seconds": seconds,
        "cluster_start_seconds": setup,
        "pairs": pairs,
        "pairs_per_second": pairs / seconds,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "rss_before_kernel_mb": rss_before,
        "kernel_peak_rss_mb": sampler.peak,
        "engine_working_mb": sampler.peak - rss_before - sum(a.nbytes for a in K.values()) / 2**20,
        "output_mb": sum(a.nbytes for a in K.values()) / 2**20,
        "regulariser": reg,
        "eigenvalue_min_over_max": float(eigenvalues[0] / eigenvalues[-1]),
        "solvers": solves,
    }
    if device.startswith("cuda"):
        row["gpu_peak_mb"] = torch.cuda.max_memory_allocated() / 2**20
    return row


def fitted_exponent(rows: list[dict]) -> float | None:
    """Least-squares slope of log(kernel seconds) against log(N)."""
    pts = [(math.log(r["n_train"]), math.log(r["kernel_seconds"])) for r in rows]
    if len(pts) < 2:
        return None
    mx, my = sum(x for x, _ in pts) / len(pts), sum(y for _, y in pts) / len(pts)
    sxx = sum((x - mx) ** 2 for x, _ in pts)
    return sum((x - mx) * (y - my) for x, y in pts) / sxx if sxx else None


def spawn(spec: dict) -> dict | None:
    proc = subprocess.run([sys.executable, __file__, "--row", json.dumps(spec)], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        print(f"row {spec} FAILED:\n{proc.stderr.strip()[-1500:]}", flush=True)
        return None
    return json.loads(proc.stdout.strip().splitlines()[-1])


def print_row(row: dict) -> None:
    by = {s["method"]: s for s in row["solvers"]}
    print(
        f"{row['n_train']:>6} {row['n_test']:>5} {row['executor']:<7} {row['threads']:>3} {row['kernel_seconds']:>9.2f} "
        f"{row['pairs_per_second']:>10.0f} {row['peak_rss_mb']:>8.0f} {row['engine_working_mb']:>8.0f} "
        f"{by['cholesky']['seconds']:>8.3f} {by['pcg-pivoted-cholesky']['seconds']:>8.3f} {by['pcg-pivoted-cholesky']['solution_error']:>9.1e} "
        f"{by['nystrom']['seconds']:>8.3f} {by['nystrom']['fit_error']:>9.1e}  {row['device']}",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, nargs="+", default=[100, 200, 400])
    parser.add_argument("--model", choices=sorted(MODELS), default="fast")
    parser.add_argument("--device", default="cpu", help="cpu, cuda (one GPU) or cuda-all (every GPU, DeviceExecutor)")
    parser.add_argument("--dask-n", type=int, default=200, help="N of the Dask speed-up rows")
    parser.add_argument("--no-dask", action="store_true")
    parser.add_argument("--block", type=int, help="molecules per block side (default: engine default, 256)")
    parser.add_argument("--env-block", type=int, default=256, help="environments per kernel call side (SO3MolecularKernel.block_size)")
    parser.add_argument("--molecules", help="molecules .npz instead of the QM9 package")
    parser.add_argument("--export-molecules", nargs=2, metavar=("FILE", "COUNT"))
    parser.add_argument("--row", help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    if args.row:
        print(json.dumps(run_row(**json.loads(args.row))))
        return
    if args.export_molecules:
        export_molecules(args.export_molecules[0], int(args.export_molecules[1]))
        return

    print(f"model ({args.model}): {MODELS[args.model]}")
    header = f"{'N':>6} {'test':>5} {'exec':<7} {'thr':>3} {'kernel s':>9} {'pairs/s':>10} {'peak MB':>8} {'work MB':>8} {'chol s':>8} {'pcg s':>8} {'pcg err':>9} {'nys s':>8} {'nys err':>9}  device"
    print(header + "\n" + "-" * len(header))
    rows = []
    for n in args.n:
        spec = {"model": args.model, "n": n, "device": args.device, "executor": "serial", "threads": None,
                "molecules": args.molecules, "block": args.block, "env_block": args.env_block}
        row = spawn(spec)
        if row:
            rows.append(row)
            print_row(row)
    dask = None
    if not args.no_dask:
        # blocks of N/4: 10 train and 4 test blocks, enough to share between two workers
        spec = {"model": args.model, "n": args.dask_n, "device": "cpu", "threads": 1, "molecules": args.molecules,
                "block": max(1, args.dask_n // 4), "env_block": args.env_block}
        pair = [spawn(spec | {"executor": ex}) for ex in ("serial", "dask")]
        if all(pair):
            for row in pair:
                print_row(row)
            rows.extend(pair)
            dask = {"n_train": args.dask_n, "serial_1_thread_seconds": pair[0]["kernel_seconds"], "dask_2_workers_seconds": pair[1]["kernel_seconds"],
                    "speedup": pair[0]["kernel_seconds"] / pair[1]["kernel_seconds"], "cluster_start_seconds": pair[1]["cluster_start_seconds"]}
    sweep = [r for r in rows if r["executor"] == "serial" and r["n_train"] in args.n and r["threads"] == rows[0]["threads"]]
    exponent = fitted_exponent(sweep[: len(args.n)])
    print(f"\nfitted exponent (kernel seconds ∝ N^a, {args.device}): a = {exponent:.2f}" if exponent else "")
    if dask:
        print(f"Dask, 2 local workers × 1 thread vs 1 process × 1 thread at N = {args.dask_n}: speed-up {dask['speedup']:.2f}×")
    projection = None
    if args.device.startswith("cuda") and sweep:
        rate = sweep[-1]["pairs_per_second"]
        pairs = QM9_TRAIN * (QM9_TRAIN + 1) // 2 + QM9_TEST * QM9_TRAIN
        projection = {"label": "PROJECTED from the measured GPU pair rate at the largest N, not measured", "pairs": pairs,
                      "pairs_per_second": rate, "kernel_hours": pairs / rate / 3600}
        print(f"full QM9 kernels PROJECTED from {rate:.0f} pairs/s: {projection['kernel_hours']:.1f} h on {sweep[-1]['device']}")
    result = {
        "date": datetime.date.today().isoformat(),
        "machine": {"platform": platform.platform(), "processor": platform.machine(), "python": platform.python_version()},
        "model": args.model,
        "model_description": MODELS[args.model],
        "device": args.device,
        "rows": rows,
        "fitted_exponent": exponent,
        "dask": dask,
        "full_qm9_projection": projection,
    }
    merged = {}
    if args.out.exists():
        merged = json.loads(args.out.read_text())
        if "runs" not in merged:
            merged = {}
    runs = [r for r in merged.get("runs", []) if r.get("device") != args.device] + [result]
    from molntk.utils.files import atomic_write_json

    atomic_write_json(args.out, {"runs": runs})
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
