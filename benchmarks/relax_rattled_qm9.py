"""Relax rattled QM9 geometries with ASE's BFGS under an SO(3) NTK model of U0 (not a test).

The main job's model (the estimator's defaults: configs/qm9_u0.yaml's features, network
and Lebedev grid of band limit 5) in sparse mode, fitted on the first ``--n-train`` molecules
of the standard split's training set (seed 0) with ``--inducing`` inducing environments
(farthest-point sampling); target U0 atomization energy in meV. The first ``--n-test``
molecules of the split's test set (never in training) are rattled with Gaussian noise of
``--sigma`` Å per coordinate (numpy generator seeded with ``--seed``) and relaxed with
``ase.optimize.BFGS`` (``--maxstep`` Å step cap) under :class:`~molntk.models.calculator.MolntkCalculator`
until max |F| < ``--fmax`` eV/Å or ``--max-steps`` steps.

Per molecule: the RMSD to the DFT (QM9) geometry after optimal superposition (Kabsch, atoms
in the same order: ``scipy.spatial.transform.Rotation.align_vectors`` of the centred
coordinates) before and after, BFGS steps, whether it converged, and the model's energy
error E_model − E_DFT(DFT geometry) at the rattled and at the relaxed geometry (and, for
reference, at the DFT geometry itself). A molecule that fails (e.g. atoms collapsing) is
reported with its error and the run goes on. Summary: fraction whose RMSD decreased,
median RMSDs, median steps, wall times. ``--minutes`` stops starting new molecules after
that much relaxation time (the JSON says how many were done).

    nice python benchmarks/relax_rattled_qm9.py                    # N = 1000, m = 2000, 100 molecules
    nice python benchmarks/relax_rattled_qm9.py --n-test 5 --out /tmp/relax.json

Writes benchmarks/results/relax_rattled_qm9.json.
"""

from __future__ import annotations

import argparse
import datetime
import time
from pathlib import Path

import numpy as np
import torch
from ase.optimize import BFGS
from scipy.spatial.transform import Rotation

from molntk.data.molecule import Molecule
from molntk.data.qm9 import load_qm9
from molntk.data.readers import molecule_to_atoms
from molntk.data.splits import standard_split
from molntk.errors import MolntkError
from molntk.models.calculator import MolntkCalculator
from molntk.models.so3_ntk import SO3NTKRegressor
from molntk.utils.files import atomic_write_json

RESULT = Path(__file__).resolve().parent / "results" / "relax_rattled_qm9.json"


def kabsch_rmsd(a: np.ndarray, b: np.ndarray) -> float:
    """min over rotations R and translations of sqrt(mean_i ‖R b_i + t − a_i‖²) (same atom order)."""
    a, b = a - a.mean(axis=0), b - b.mean(axis=0)
    _, rssd = Rotation.align_vectors(a, b)
    return float(rssd / np.sqrt(len(a)))


def relax(model: SO3NTKRegressor, mol: Molecule, energy_dft: float, rng: np.random.Generator, args) -> dict:
    """Rattle, relax and measure one molecule (module docstring)."""
    rattled = mol.positions + rng.normal(0.0, args.sigma, mol.positions.shape)
    atoms = molecule_to_atoms(Molecule(mol.numbers, rattled, id=mol.id))
    atoms.calc = MolntkCalculator(model, unit="meV", std=False)
    e_dft_geometry, e_rattled = model.predict([mol, Molecule(mol.numbers, rattled)])
    start = time.perf_counter()
    opt = BFGS(atoms, maxstep=args.maxstep, logfile=None)
    converged = bool(opt.run(fmax=args.fmax, steps=args.max_steps))
    seconds = time.perf_counter() - start
    (e_relaxed,) = model.predict([Molecule(mol.numbers, atoms.positions)])
    return {
        "id": mol.id,
        "n_atoms": mol.n_atoms,
        "rmsd_before": kabsch_rmsd(mol.positions, rattled),
        "rmsd_after": kabsch_rmsd(mol.positions, atoms.positions),
        "steps": int(opt.get_number_of_steps()),
        "converged": converged,
        "max_force_after_ev_per_a": float(np.abs(atoms.get_forces()).max()),
        "energy_error_dft_geometry_mev": float(e_dft_geometry - energy_dft),
        "energy_error_before_mev": float(e_rattled - energy_dft),
        "energy_error_after_mev": float(e_relaxed - energy_dft),
        "seconds": seconds,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n-train", type=int, default=1000)
    parser.add_argument("--inducing", type=int, default=2000)
    parser.add_argument("--n-test", type=int, default=100)
    parser.add_argument("--sigma", type=float, default=0.1, help="rattle, Å per coordinate")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--fmax", type=float, default=0.05, help="eV/Å")
    parser.add_argument("--maxstep", type=float, default=0.1, help="BFGS step cap, Å")
    parser.add_argument("--max-steps", type=int, default=200)
    parser.add_argument("--minutes", type=float, default=None, help="start no molecule after this much relaxation time")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", type=Path, default=RESULT)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    qm9 = load_qm9()
    split = standard_split(len(qm9), seed=0)
    u0 = qm9.target("u0_atom")
    train_rows, test_rows = split.train[: args.n_train], split.test[: args.n_test]
    start = time.perf_counter()
    model = SO3NTKRegressor(inducing=args.inducing).fit(qm9.molecules(train_rows), u0[train_rows])
    fit_seconds = time.perf_counter() - start
    test_mae = float(np.abs(model.predict(qm9.molecules(test_rows)) - u0[test_rows]).mean())
    print(f"fit {fit_seconds:.0f} s, test MAE {test_mae:.1f} meV on {len(test_rows)} molecules", flush=True)

    rng = np.random.default_rng(args.seed)
    rows, failures, relax_start = [], [], time.perf_counter()
    for row, mol in zip(test_rows, qm9.molecules(test_rows)):
        if args.minutes is not None and time.perf_counter() - relax_start > 60 * args.minutes:
            break
        try:
            result = relax(model, mol, float(u0[row]), rng, args)
        except MolntkError as err:  # e.g. atoms pushed closer than 0.1 Å
            failures.append({"id": mol.id, "error": str(err)})
            print(f"{mol.id}: failed: {err}", flush=True)
            continue
        rows.append(result)
        print(f"{mol.id}: {mol.n_atoms} atoms, RMSD {result['rmsd_before']:.3f} → {result['rmsd_after']:.3f} Å, "
              f"{result['steps']} steps, {result['seconds']:.1f} s", flush=True)

    before = np.array([r["rmsd_before"] for r in rows])
    after = np.array([r["rmsd_after"] for r in rows])
    err_before = np.abs([r["energy_error_before_mev"] for r in rows])
    err_after = np.abs([r["energy_error_after_mev"] for r in rows])
    summary = {
        "molecules_relaxed": len(rows),
        "molecules_failed": len(failures),
        "molecules_planned": len(test_rows),
        "fraction_rmsd_decreased": float(np.mean(after < before)),
        "median_rmsd_before": float(np.median(before)),
        "median_rmsd_after": float(np.median(after)),
        "median_steps": float(np.median([r["steps"] for r in rows])),
        "fraction_converged": float(np.mean([r["converged"] for r in rows])),
        "median_abs_energy_error_dft_geometry_mev": float(np.median(np.abs([r["energy_error_dft_geometry_mev"] for r in rows]))),
        "median_abs_energy_error_before_mev": float(np.median(err_before)),
        "median_abs_energy_error_after_mev": float(np.median(err_after)),
        "median_seconds_per_molecule": float(np.median([r["seconds"] for r in rows])),
        "relaxation_seconds": time.perf_counter() - relax_start,
    }
    report = {
        "date": datetime.date.today().isoformat(),
        "command": "nice python benchmarks/relax_rattled_qm9.py " + " ".join(f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items() if k != "out"),
        "model": {"n_train": args.n_train, "inducing": args.inducing, "target": "u0_atom", "unit": "meV",
                  "params": model.get_params(), "fit_seconds": fit_seconds, "test_mae_mev": test_mae,
                  "rank": int(model.regressor_.rank_)},
        "relaxation": {"sigma": args.sigma, "seed": args.seed, "fmax_ev_per_a": args.fmax, "maxstep": args.maxstep,
                       "max_steps": args.max_steps, "optimizer": "ase.optimize.BFGS", "threads": args.threads},
        "summary": summary,
        "molecules": rows,
        "failures": failures,
    }
    atomic_write_json(args.out, report)
    print({k: round(v, 4) if isinstance(v, float) else v for k, v in summary.items()})


if __name__ == "__main__":
    main()
