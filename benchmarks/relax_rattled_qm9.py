"""Relax rattled QM9 geometries with ASE's BFGS under four energy models of U0 (not a test).

Variants, all of U0 in meV, each relaxing the same rattled molecules:

- ``ntk``: the SO(3) NTK estimator's defaults (8 Gaussians to 3 Å, ``lift:3 erf pool dense``
  with σ_w = 2, σ_b = 1, Lebedev grid of band limit 5) in sparse mode, fitted on U0 of the first
  ``--n-train`` molecules of the standard split's training set (seed 0) with ``--inducing``
  inducing environments (farthest-point sampling);
- ``xtb``: GFN2-xTB alone (tblite, :func:`molntk.data.md.xtb_calculator`), its energies put on
  the DFT scale by the dressed-atom model fitted to U0 − E_xTB on the same training molecules
  (a constant per atom of each element: it does not move the geometry);
- ``delta``: Δ-learning, the same SO(3) NTK model with ``baseline="gfn2-xtb"`` fitted to
  U0 − E_xTB at the QM9 (DFT) geometries: E = E_xTB + E_dressed + E_NTK;
- ``delta-forces``: the Δ force field, :class:`~molntk.models.force_field.SO3ForceFieldRegressor`
  (sparse, ``--inducing``) with ``baseline="gfn2-xtb"`` fitted to U0 − E_xTB and to the forces
  0 − F_xTB at the QM9 geometries (B3LYP equilibria, where the DFT forces vanish), so that the
  correction also learns the curvature xTB misses there.

The training molecules' xTB single points (eV) are cached in
``<molntk cache>/baselines/qm9_gfn2-xtb.npz`` (by QM9 row; written atomically; recomputed when
tblite's version or the SCF settings change). The first ``--n-test`` molecules of the split's test
set (never in training) are rattled with Gaussian noise of ``--sigma`` Å per coordinate (one
numpy generator seeded with ``--seed``, drawn molecule by molecule in order) and relaxed by
each variant with ``ase.optimize.BFGS`` (``--maxstep`` Å step cap) until max |F| < ``--fmax``
eV/Å or ``--max-steps`` steps.

Per molecule and variant: the RMSD to the DFT (QM9) geometry after optimal superposition
(Kabsch, atoms in the same order: ``scipy.spatial.transform.Rotation.align_vectors`` of the
centred coordinates) after relaxation (and once, before), BFGS steps, whether it converged,
the model's energy error E_model − E_DFT(DFT geometry) at the DFT, the rattled and the relaxed
geometry, wall and CPU seconds. A relaxation that fails (e.g. atoms pushed together) is
reported with its error and the run goes on. Per variant: the fraction of the molecules it was
given whose RMSD decreased (a failed relaxation counts as not decreased; the issue's target:
≥ 90 %), median RMSDs, steps and errors over the relaxed ones, and the test MAE of U0 at the
DFT geometries of the first ``--n-mae`` test molecules (the accuracy a user gets from the
model). ``--minutes`` stops starting new molecules after that much CPU time of relaxation
(this process's; on shared cores wall time overstates the cost), so that all variants relax
the same molecules; the JSON says how many were done.

    nice python benchmarks/relax_rattled_qm9.py --minutes 35        # N = 1000, m = 1000, 100 molecules
    nice python benchmarks/relax_rattled_qm9.py --n-test 3 --n-train 100 --inducing 200 --out /tmp/relax.json

Writes benchmarks/results/relax_rattled_qm9.json.
"""

from __future__ import annotations

import argparse
import datetime
import time
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path

import numpy as np
import torch
from ase.calculators.calculator import Calculator, CalculatorError
from ase.optimize import BFGS
from scipy.spatial.transform import Rotation

from molntk.data.md import METHOD, XTB_ACCURACY, xtb_calculator
from molntk.data.molecule import Molecule
from molntk.data.qm9 import QM9, QM9_ELEMENTS, cache_root, load_qm9
from molntk.data.readers import molecule_to_atoms
from molntk.data.splits import standard_split
from molntk.errors import MolntkError
from molntk.models.calculator import MolntkCalculator
from molntk.models.delta import baseline_results, xtb_single_point
from molntk.models.force_field import SO3ForceFieldRegressor
from molntk.models.so3_ntk import SO3NTKRegressor
from molntk.regression.dressed_atom import DressedAtomModel, element_counts
from molntk.utils.files import atomic_path, atomic_write_json

RESULT = Path(__file__).resolve().parent / "results" / "relax_rattled_qm9.json"
#: What the cached xTB energies were computed with; a cache made otherwise is recomputed.
XTB_SETTINGS = f"{METHOD} accuracy={XTB_ACCURACY} tblite={version('tblite')}"


@dataclass
class Variant:
    """An energy model of U0 (meV): its ASE calculator and its energies of molecules."""

    name: str
    calculator: Callable[[], Calculator]
    energies: Callable[[list[Molecule]], np.ndarray]
    fit_seconds: float
    model: SO3NTKRegressor | None = None
    test_mae_mev: float = float("nan")


def kabsch_rmsd(a: np.ndarray, b: np.ndarray) -> float:
    """min over rotations R and translations of sqrt(mean_i ‖R b_i + t − a_i‖²) (same atom order)."""
    a, b = a - a.mean(axis=0), b - b.mean(axis=0)
    _, rssd = Rotation.align_vectors(a, b)
    return float(rssd / np.sqrt(len(a)))


def training_xtb_ev(qm9: QM9, rows: np.ndarray) -> np.ndarray:
    """GFN2-xTB energies (eV) of QM9 rows at their DFT geometries, from the cache (module
    docstring); missing rows are computed and the cache is rewritten atomically."""
    path = cache_root() / "baselines" / "qm9_gfn2-xtb.npz"
    cached: dict[int, float] = {}
    if path.exists():
        with np.load(path) as archive:
            if str(archive["settings"]) == XTB_SETTINGS:
                cached = dict(zip(archive["rows"].tolist(), archive["energies_ev"].tolist()))
    missing = [int(r) for r in rows if int(r) not in cached]
    if missing:
        start = time.perf_counter()
        for row, mol in zip(missing, qm9.molecules(missing)):
            cached[row] = xtb_single_point(mol)[0]
        print(f"xTB single points of {len(missing)} training molecules: {time.perf_counter() - start:.1f} s", flush=True)
        keys = np.array(sorted(cached), dtype=np.int64)
        with atomic_path(path, suffix=".npz") as tmp:
            np.savez(tmp, rows=keys, energies_ev=np.array([cached[k] for k in keys]), settings=np.array(XTB_SETTINGS))
    return np.array([cached[int(r)] for r in rows])


def fit_variants(train: list[Molecule], y: np.ndarray, xtb_train_mev: np.ndarray, args) -> dict[str, Variant]:
    """The three variants of the module docstring, fitted on ``train`` (U0 ``y``, meV)."""
    variants = {}
    if "ntk" in args.variants:
        start = time.perf_counter()
        ntk = SO3NTKRegressor(inducing=args.inducing).fit(train, y, target="u0_atom", unit="meV")
        variants["ntk"] = Variant("ntk", lambda: MolntkCalculator(ntk, std=False), ntk.predict, time.perf_counter() - start, ntk)
    if "xtb" in args.variants:
        start = time.perf_counter()
        dressed = DressedAtomModel().fit(element_counts(train, QM9_ELEMENTS), y - xtb_train_mev)

        def xtb_energies(mols: list[Molecule]) -> np.ndarray:
            return baseline_results("gfn2-xtb", mols, "meV").energies + dressed.predict(element_counts(mols, QM9_ELEMENTS))

        variants["xtb"] = Variant("xtb", xtb_calculator, xtb_energies, time.perf_counter() - start)
    if "delta" in args.variants:
        start = time.perf_counter()
        delta = SO3NTKRegressor(inducing=args.inducing, baseline="gfn2-xtb").fit(
            train, y, target="u0_atom", unit="meV", baseline_energies=xtb_train_mev)
        variants["delta"] = Variant("delta", lambda: MolntkCalculator(delta, std=False), delta.predict,
                                    time.perf_counter() - start, delta)
    if "delta-forces" in args.variants:
        start = time.perf_counter()
        zero_forces = [np.zeros((m.n_atoms, 3)) for m in train]  # DFT equilibrium geometries: F = 0
        field = SO3ForceFieldRegressor(inducing=args.inducing, baseline="gfn2-xtb", unit="meV").fit(
            train, y, zero_forces, baseline_results=baseline_results("gfn2-xtb", train, "meV"))
        variants["delta-forces"] = Variant("delta-forces", lambda: MolntkCalculator(field, std=False), field.predict,
                                           time.perf_counter() - start, field)
    return variants


def relax(variant: Variant, mol: Molecule, rattled: np.ndarray, energy_dft: float, args) -> dict:
    """Relax the rattled molecule under one variant and measure it (module docstring)."""
    atoms = molecule_to_atoms(Molecule(mol.numbers, rattled, id=mol.id))
    atoms.calc = variant.calculator()
    e_dft_geometry, e_rattled = variant.energies([mol, Molecule(mol.numbers, rattled)])
    start, cpu_start = time.perf_counter(), time.process_time()
    opt = BFGS(atoms, maxstep=args.maxstep, logfile=None)
    converged = bool(opt.run(fmax=args.fmax, steps=args.max_steps))
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start
    (e_relaxed,) = variant.energies([Molecule(mol.numbers, atoms.positions)])
    return {
        "rmsd_after": kabsch_rmsd(mol.positions, atoms.positions),
        "steps": int(opt.get_number_of_steps()),
        "converged": converged,
        "max_force_after_ev_per_a": float(np.abs(atoms.get_forces()).max()),
        "energy_error_dft_geometry_mev": float(e_dft_geometry - energy_dft),
        "energy_error_before_mev": float(e_rattled - energy_dft),
        "energy_error_after_mev": float(e_relaxed - energy_dft),
        "seconds": seconds,
        "cpu_seconds": cpu_seconds,
    }


def summarise(name: str, rows: list[dict], failures: list[dict], variant: Variant) -> dict:
    """The fraction of the molecules given (relaxed or failed) whose RMSD decreased; fractions
    and medians over the molecules one variant relaxed."""
    done = [(r["rmsd_before"], r["variants"][name]) for r in rows if name in r["variants"]]
    failed = sum(f["variant"] == name for f in failures)
    before = np.array([b for b, _ in done])
    after = np.array([v["rmsd_after"] for _, v in done])

    def median(key: str, absolute: bool = False) -> float:
        values = np.array([v[key] for _, v in done], dtype=float)
        return float(np.median(np.abs(values) if absolute else values)) if len(values) else float("nan")

    return {
        "molecules_relaxed": len(done),
        "molecules_failed": failed,
        "fraction_rmsd_decreased": float(np.sum(after < before) / (len(done) + failed)) if done or failed else float("nan"),
        "median_rmsd_before": float(np.median(before)) if len(done) else float("nan"),
        "median_rmsd_after": float(np.median(after)) if len(done) else float("nan"),
        "median_steps": median("steps"),
        "fraction_converged": float(np.mean([v["converged"] for _, v in done])) if len(done) else float("nan"),
        "median_abs_energy_error_dft_geometry_mev": median("energy_error_dft_geometry_mev", True),
        "median_abs_energy_error_before_mev": median("energy_error_before_mev", True),
        "median_abs_energy_error_after_mev": median("energy_error_after_mev", True),
        "median_seconds_per_molecule": median("seconds"),
        "median_cpu_seconds_per_molecule": median("cpu_seconds"),
        "test_mae_mev": variant.test_mae_mev,
        "fit_seconds": variant.fit_seconds,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n-train", type=int, default=1000)
    parser.add_argument("--inducing", type=int, default=1000)
    parser.add_argument("--n-test", type=int, default=100)
    parser.add_argument("--n-mae", type=int, default=1000, help="test molecules of the U0 MAE at DFT geometries")
    parser.add_argument("--variants", nargs="+", choices=("ntk", "xtb", "delta", "delta-forces"),
                        default=["ntk", "xtb", "delta", "delta-forces"])
    parser.add_argument("--sigma", type=float, default=0.1, help="rattle, Å per coordinate")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--fmax", type=float, default=0.05, help="eV/Å")
    parser.add_argument("--maxstep", type=float, default=0.1, help="BFGS step cap, Å")
    parser.add_argument("--max-steps", type=int, default=100)
    parser.add_argument("--minutes", type=float, default=None, help="start no molecule after this much CPU time of relaxation")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (more than the free cores slows forces down)")
    parser.add_argument("--out", type=Path, default=RESULT)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    qm9 = load_qm9()
    split = standard_split(len(qm9), seed=0)
    u0 = qm9.target("u0_atom")
    train_rows, test_rows = split.train[: args.n_train], split.test[: args.n_test]
    train = qm9.molecules(train_rows)
    xtb_train_mev = training_xtb_ev(qm9, train_rows) * 1000.0
    variants = fit_variants(train, u0[train_rows], xtb_train_mev, args)
    mae_rows = split.test[: args.n_mae]
    for variant in variants.values():
        start = time.perf_counter()
        variant.test_mae_mev = float(np.abs(variant.energies(qm9.molecules(mae_rows)) - u0[mae_rows]).mean())
        print(f"{variant.name}: fit {variant.fit_seconds:.0f} s, test MAE {variant.test_mae_mev:.1f} meV on {len(mae_rows)} "
              f"molecules ({time.perf_counter() - start:.0f} s)", flush=True)

    rng = np.random.default_rng(args.seed)
    rows, failures, relax_start, relax_cpu_start = [], [], time.perf_counter(), time.process_time()
    for row, mol in zip(test_rows, qm9.molecules(test_rows)):
        if args.minutes is not None and time.process_time() - relax_cpu_start > 60 * args.minutes:
            break
        rattled = mol.positions + rng.normal(0.0, args.sigma, mol.positions.shape)
        result = {"id": mol.id, "n_atoms": mol.n_atoms, "rmsd_before": kabsch_rmsd(mol.positions, rattled), "variants": {}}
        for variant in variants.values():
            try:
                result["variants"][variant.name] = relax(variant, mol, rattled, float(u0[row]), args)
            except (MolntkError, CalculatorError) as err:  # e.g. atoms pushed closer than 0.1 Å, an SCF that fails
                failures.append({"id": mol.id, "variant": variant.name, "error": str(err)})
                print(f"{mol.id} {variant.name}: failed: {err}", flush=True)
        rows.append(result)
        print(f"{mol.id}: {mol.n_atoms} atoms, RMSD {result['rmsd_before']:.3f} → "
              + ", ".join(f"{name} {v['rmsd_after']:.3f} Å ({v['steps']} steps, {v['seconds']:.1f} s)"
                          for name, v in result["variants"].items()), flush=True)

    summary = {name: summarise(name, rows, failures, variant) for name, variant in variants.items()}
    models = {name: {"params": v.model.get_params(),
                     "rank": int(v.model.rank_ if hasattr(v.model, "rank_") else v.model.regressor_.rank_)}
              for name, v in variants.items() if v.model is not None}
    report = {
        "date": datetime.date.today().isoformat(),
        "command": "nice python benchmarks/relax_rattled_qm9.py " + " ".join(
            f"--{k.replace('_', '-')} {' '.join(v) if isinstance(v, list) else v}" for k, v in vars(args).items()
            if k != "out" and v is not None),
        "model": {"n_train": args.n_train, "inducing": args.inducing, "target": "u0_atom", "unit": "meV",
                  "xtb": XTB_SETTINGS, "n_mae": len(mae_rows), "variants": models},
        "relaxation": {"sigma": args.sigma, "seed": args.seed, "fmax_ev_per_a": args.fmax, "maxstep": args.maxstep,
                       "max_steps": args.max_steps, "optimizer": "ase.optimize.BFGS", "threads": args.threads,
                       "molecules_planned": len(test_rows), "molecules_done": len(rows),
                       "relaxation_seconds": time.perf_counter() - relax_start,
                       "relaxation_cpu_seconds": time.process_time() - relax_cpu_start},
        "summary": summary,
        "molecules": rows,
        "failures": failures,
    }
    atomic_write_json(args.out, report)
    for name, values in summary.items():
        print(name, {k: round(v, 4) if isinstance(v, float) else v for k, v in values.items()})


if __name__ == "__main__":
    main()
