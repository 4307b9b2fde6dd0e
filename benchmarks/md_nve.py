"""NVE molecular dynamics with the SO(3) NTK force field: stability and energy drift (not a test).

For each molecule: the energy+force model of ``configs/md_<molecule>.yaml``
(``models.so3_forces``: :class:`~molntk.models.force_field.SO3ForceFieldRegressor`, sparse,
λ_E and λ_F by grouped LOO) fitted on the config's largest training set (``--n-train``:
another size) of the cached GFN2-xTB trajectory (``data/md/make_md_trajectories.py``; the
frames ``molntk run configs/md_<molecule>.yaml`` trains on), or loaded from ``--model-dir``
when a file of the same settings is there (the fit is saved there otherwise). Then velocity Verlet
(ASE ``VelocityVerlet``, the model serving energies and forces through
:class:`~molntk.models.calculator.MolntkCalculator`) from the first test frame, with
Maxwell–Boltzmann velocities at ``--temperature`` (seeded; centre-of-mass motion and rotation
removed), ``--steps`` steps of ``--dt`` fs. Reported per molecule:

- energy drift: the least-squares slope of E_tot = E_pot + E_kin over the run (meV/ps, and
  per atom), and the largest |E_tot(t) − E_tot(0)| (meV);
- stability: the covalent bond graph (ASE's natural cutoffs × 1.2) of every recorded frame
  equals that of the start, and the largest bond stretch relative to the start frame;
- fidelity along the run: the model's energy and forces against GFN2-xTB (tblite) on every
  ``--check-every``-th frame: energy error relative to the first checked frame (the model
  and xTB agree on differences; the absolute offset is the model's dressed-atom constant)
  and force-component MAE;
- the mean temperature and the wall seconds per step.

    OMP_NUM_THREADS=2 python benchmarks/md_nve.py                               # ethanol, 10,000 steps
    OMP_NUM_THREADS=2 python benchmarks/md_nve.py --molecules malonaldehyde aspirin

Each molecule's row replaces its row in benchmarks/results/md_nve.json as soon as its run
ends; ``--device cuda`` runs the force field on a GPU.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import time
from pathlib import Path

import numpy as np
import torch
from ase import Atoms, units
from ase.md.velocitydistribution import Stationary, ZeroRotation
from ase.md.verlet import VelocityVerlet
from ase.neighborlist import natural_cutoffs, neighbor_list

from molntk.data.labelled import read_labelled
from molntk.data.md import md_cache_dir
from molntk.data.readers import molecule_from_atoms
from molntk.models.calculator import MolntkCalculator
from molntk.models.delta import baseline_results
from molntk.models.force_field import SO3ForceFieldRegressor
from molntk.pipelines.md.run import split
from molntk.pipelines.tasks import TASKS
from molntk.utils.files import atomic_write_json

try:  # ASE ≥ 3.29's name of the Maxwell–Boltzmann momenta
    from ase.md.velocitydistribution import thermalize_momenta as thermalize
except ImportError:  # pragma: no cover - older ASE
    from ase.md.velocitydistribution import MaxwellBoltzmannDistribution as thermalize

RESULTS = Path(__file__).resolve().parent / "results" / "md_nve.json"
CONFIGS = Path(__file__).resolve().parents[1] / "configs"
#: Bonds: atoms closer than this factor × the sum of their natural (covalent) radii.
BOND_FACTOR = 1.2


def bonds(atoms: Atoms) -> set[tuple[int, int]]:
    """The covalent bond graph: pairs (i < j) closer than BOND_FACTOR × their natural cutoffs."""
    i, j = neighbor_list("ij", atoms, [BOND_FACTOR * c for c in natural_cutoffs(atoms)])
    return {(int(a), int(b)) for a, b in zip(i, j) if a < b}


def bond_lengths(atoms: Atoms, pairs: list[tuple[int, int]]) -> np.ndarray:
    return np.array([atoms.get_distance(i, j) for i, j in pairs])


def force_field(molecule: str, n_train: int | None, model_dir: Path, device: str | None = None, key: str = "so3_forces",
                changes: dict | None = None) -> tuple[SO3ForceFieldRegressor, list, dict]:
    """The force field ``models.<key>`` (``so3_forces``: sparse; ``so3_forces_exact``) of
    ``configs/md_<molecule>.yaml``, its parameters updated by ``changes``, fitted on the first
    ``n_train`` training frames of its split (None: its largest size) on ``device`` (None: the
    config's), loaded when saved before with these settings, else fitted and saved; the test
    frames; the settings."""
    config = TASKS.load(CONFIGS / f"md_{molecule}.yaml")
    n_train = n_train or config.split.n_train[-1]
    params = {"unit": config.data.energy_unit, **getattr(config.models, key).params, **(changes or {})}
    if device is not None:
        params["device"] = device
    data = read_labelled(md_cache_dir() / f"{molecule}.extxyz", [config.data.energy_key], forces=True)
    test, pool = split(config.split.model_copy(update={"n_train": [n_train]}), len(data.molecules))
    settings = {"n_train": n_train, "params": params}
    path = model_dir / f"{molecule}-{hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:12]}.molntk.npz"
    if path.exists():
        return SO3ForceFieldRegressor.load(path), [data.molecules[i] for i in test], {**settings, "fit_s": None}
    train = pool[:n_train]
    start = time.perf_counter()
    model = SO3ForceFieldRegressor(**params).fit([data.molecules[i] for i in train],
                                                 np.asarray(data.targets[config.data.energy_key])[train],
                                                 [data.forces[i] for i in train])
    seconds = time.perf_counter() - start
    model_dir.mkdir(parents=True, exist_ok=True)
    model.save(path)
    return model, [data.molecules[i] for i in test], {**settings, "fit_s": seconds, "rank": getattr(model, "rank_", None)}


def run_nve(model: SO3ForceFieldRegressor, start: Atoms, steps: int, dt_fs: float, temperature: float, seed: int,
            check_every: int) -> dict:
    """Velocity Verlet from ``start``; the record of the module docstring."""
    atoms = start.copy()
    atoms.calc = MolntkCalculator(model, std=False)
    thermalize(atoms, temperature_K=temperature, rng=np.random.default_rng(seed))
    Stationary(atoms)
    ZeroRotation(atoms)
    reference = bonds(atoms)
    pairs = sorted(reference)
    lengths0 = bond_lengths(atoms, pairs)
    n = len(atoms)
    times, e_tot, temps, broken_at, stretch = [], [], [], None, 0.0
    checked: list[Atoms] = []

    def record() -> None:
        nonlocal broken_at, stretch
        step = len(times)
        times.append(step * dt_fs)
        e_tot.append(atoms.get_potential_energy() + atoms.get_kinetic_energy())
        temps.append(atoms.get_temperature())
        stretch = max(stretch, float(np.max(np.abs(bond_lengths(atoms, pairs) / lengths0 - 1.0))))
        if broken_at is None and bonds(atoms) != reference:
            broken_at = step
        if step % check_every == 0:
            checked.append(atoms.copy())
            print(f"  step {step}/{steps}: E_tot {e_tot[-1]:.4f} eV, T {temps[-1]:.0f} K", flush=True)

    dyn = VelocityVerlet(atoms, timestep=dt_fs * units.fs)
    dyn.attach(record, interval=1)
    tic = time.perf_counter()
    dyn.run(steps)  # the observer sees the start and every step
    wall = time.perf_counter() - tic
    t_ps, e = np.array(times) / 1000.0, np.array(e_tot)
    slope = float(np.polyfit(t_ps, e, 1)[0]) * 1000.0  # meV/ps
    fidelity = against_xtb(model, checked)
    return {
        "steps": steps, "dt_fs": dt_fs, "temperature_K": temperature, "n_atoms": n,
        "drift_meV_per_ps": slope, "drift_meV_per_ps_per_atom": slope / n,
        "max_abs_energy_change_meV": float(np.max(np.abs(e - e[0]))) * 1000.0,
        "mean_temperature_K": float(np.mean(temps)), "bonds": len(pairs),
        "bond_graph_changed_at_step": broken_at, "max_bond_stretch": stretch,
        "stable": broken_at is None and bool(np.all(np.isfinite(e))),
        "seconds_per_step": wall / steps, **fidelity,
        "trace": {"time_fs": times[::50], "total_energy_eV": e_tot[::50], "temperature_K": temps[::50]},
    }


def against_xtb(model: SO3ForceFieldRegressor, frames: list[Atoms]) -> dict:
    """The model's energies and forces on ``frames`` against GFN2-xTB (tblite): energy
    differences to the first frame (meV; MAE over the others) and force-component MAE (meV/Å)."""
    molecules = [molecule_from_atoms(a) for a in frames]
    xtb = baseline_results("gfn2-xtb", molecules, "eV")
    energies, forces = model.predict_forces(molecules, return_energy=True)
    de_model, de_xtb = energies - energies[0], xtb.energies - xtb.energies[0]
    f_model = np.concatenate([np.ravel(f) for f in forces])
    f_xtb = np.concatenate([np.ravel(f) for f in xtb.forces])
    return {"xtb_checked_frames": len(frames),
            "xtb_energy_difference_mae_meV": float(np.mean(np.abs(de_model - de_xtb)[1:])) * 1000.0,
            "xtb_force_mae_meV_per_A": float(np.mean(np.abs(f_model - f_xtb))) * 1000.0}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--molecules", nargs="+", default=["ethanol"])
    parser.add_argument("--n-train", type=int, default=None, help="training frames (default: the config's largest size)")
    parser.add_argument("--steps", type=int, default=10_000)
    parser.add_argument("--dt", type=float, default=0.5, help="fs")
    parser.add_argument("--temperature", type=float, default=500.0, help="K (the trajectories' Langevin temperature)")
    parser.add_argument("--check-every", type=int, default=500)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--model-dir", type=Path, default=Path("runs/md_nve_models"))
    parser.add_argument("--device", default=None, help="where the force field runs (default: the config's)")
    parser.add_argument("--json", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    for molecule in args.molecules:
        model, test, settings = force_field(molecule, args.n_train, args.model_dir, args.device)
        start = Atoms(numbers=test[0].numbers, positions=test[0].positions)
        row = {"molecule": molecule, **settings,
               **run_nve(model, start, args.steps, args.dt, args.temperature, args.seed, args.check_every)}
        print(f"{molecule}: {row['steps']} steps of {row['dt_fs']} fs, stable {row['stable']} "
              f"(max bond stretch {row['max_bond_stretch']:.1%}), drift {row['drift_meV_per_ps_per_atom']:.3f} meV/ps/atom, "
              f"max |ΔE_tot| {row['max_abs_energy_change_meV']:.1f} meV, T {row['mean_temperature_K']:.0f} K, "
              f"vs xTB: ΔE MAE {row['xtb_energy_difference_mae_meV']:.1f} meV, F MAE {row['xtb_force_mae_meV_per_A']:.1f} meV/Å; "
              f"{row['seconds_per_step'] * 1000:.0f} ms/step")
        previous = json.loads(args.json.read_text())["rows"] if args.json.exists() else []
        kept = [r for r in previous if r["molecule"] != molecule]
        atomic_write_json(args.json, {"benchmark": "md_nve", "date": datetime.date.today().isoformat(),
                                      "torch_threads": torch.get_num_threads(), "rows": kept + [row]})
        print(f"wrote {args.json}", flush=True)


if __name__ == "__main__":
    main()
