"""Molecular-dynamics trajectories labelled with GFN2-xTB energies and forces (force-field data).

:func:`md_trajectory` runs Langevin dynamics (ASE) on the GFN2-xTB potential energy surface
of the semi-empirical tight-binding code tblite (PyPI package ``tblite``, the optional extra
``molntk[md]``), in the style of MD17/rMD17: a start geometry relaxed with xtb, Maxwell-
Boltzmann velocities at the target temperature (without centre-of-mass motion and rotation;
the centre of mass stays fixed, ``ase.constraints.FixCom``),
``n_equilibration`` steps that are thrown away, then one frame every ``stride`` steps, so
that frames are decorrelated (the fastest vibration, a C-H stretch, has a period of
about 11 fs). Each frame keeps the total xtb energy E (eV) and the forces F = -dE/dx (eV/Å)
of its geometry, exactly as computed for the step (no second evaluation).

:func:`write_trajectory` writes the frames as extended xyz (``energy=`` on the comment line,
``forces`` per atom, as ASE writes a ``SinglePointCalculator``) and a JSON manifest beside it
(settings, seed, method, versions, time taken), both atomically; :func:`read_labelled
<molntk.data.labelled.read_labelled>` reads them back with ``forces=True``.

Units: positions Å, energies eV, forces eV/Å, time fs, temperature K.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import ase
import numpy as np
from ase import units
from ase.calculators.calculator import Calculator
from ase.calculators.singlepoint import SinglePointCalculator
from ase.constraints import FixCom
from ase.md.langevin import Langevin
from ase.md.velocitydistribution import Stationary, ZeroRotation
from ase.optimize import BFGS

from molntk.data.labelled import write_labelled_frames
from molntk.data.molecule import Molecule
from molntk.data.qm9 import cache_root
from molntk.data.readers import molecule_from_smiles, molecule_to_atoms
from molntk.errors import InputError
from molntk.utils.files import atomic_write_json
from molntk.utils.versions import package_version

#: The molecules of the default data set (the MD17 names), by SMILES.
MD_MOLECULES: dict[str, str] = {
    "ethanol": "CCO",
    "malonaldehyde": "O=CCC=O",
    "aspirin": "CC(=O)Oc1ccccc1C(=O)O",
}
#: The tight-binding method of tblite that labels the frames.
METHOD = "GFN2-xTB"
#: tblite's SCF accuracy (1 is its default; smaller is tighter; the energy is converged to
#: 1e-6 x accuracy Eh): 0.01 keeps the energy noise far below what finite differences of
#: the forces resolve, at about 1.4x the CPU time of the default (aspirin, measured).
XTB_ACCURACY = 0.01


@dataclass(frozen=True)
class MDSettings:
    """Langevin MD at ``temperature`` K with ``timestep`` fs steps and friction ``friction``
    (1/fs); ``n_equilibration`` steps discarded, then ``n_frames`` frames one every ``stride``
    steps. ``seed`` seeds the initial velocities and the Langevin noise. The start geometry
    is relaxed with xtb (BFGS) until every force is below ``fmax`` eV/Å."""

    temperature: float = 500.0
    timestep: float = 0.5
    friction: float = 0.01
    n_equilibration: int = 2000
    n_frames: int = 2000
    stride: int = 20
    seed: int = 0
    fmax: float = 0.01

    def __post_init__(self) -> None:
        for name in ("temperature", "timestep", "friction", "fmax"):
            if not getattr(self, name) > 0:
                raise InputError("MD settings", f"{name} must be positive, got {getattr(self, name)}")
        for name in ("n_frames", "stride"):
            if getattr(self, name) < 1:
                raise InputError("MD settings", f"{name} must be at least 1, got {getattr(self, name)}")
        if self.n_equilibration < 0:
            raise InputError("MD settings", f"n_equilibration must be >= 0, got {self.n_equilibration}")


@dataclass
class Trajectory:
    """Frames of one MD run (ASE ``Atoms`` with energy and forces) and what it took.

    ``timings`` holds wall seconds of the relaxation, the equilibration, the sampling and in
    all, and ``cpu_s``, the CPU seconds of this process in all (wall time on a busy machine
    overstates the cost)."""

    name: str
    frames: list[ase.Atoms]
    settings: MDSettings
    timings: dict[str, float]
    relaxed_energy: float


def md_cache_dir(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """Folder of generated trajectories: ``<cache_dir or $MOLNTK_CACHE_DIR or user cache>/md``."""
    return cache_root(cache_dir) / "md"


def xtb_calculator() -> Calculator:
    """A tblite GFN2-xTB ASE calculator (silent, SCF accuracy :data:`XTB_ACCURACY`)."""
    try:
        from tblite.ase import TBLite
    except ImportError:
        raise ImportError('MD data generation needs tblite: pip install "molntk[md]" (or: pip install tblite)') from None
    return TBLite(method=METHOD, accuracy=XTB_ACCURACY, verbosity=0)


def start_atoms(molecule: Molecule | str) -> ase.Atoms:
    """ASE ``Atoms`` of a molecule, or of a SMILES string embedded by RDKit (ETKDGv3, MMFF94)."""
    if isinstance(molecule, str):
        molecule = molecule_from_smiles(molecule)
    return molecule_to_atoms(molecule)


def relax(atoms: ase.Atoms, calculator: Calculator, fmax: float, max_steps: int = 1000) -> ase.Atoms:
    """A copy of ``atoms`` relaxed by BFGS on ``calculator`` until all forces are below ``fmax`` eV/Å."""
    relaxed = atoms.copy()
    relaxed.calc = calculator
    if not BFGS(relaxed, logfile=None).run(fmax=fmax, steps=max_steps):
        raise InputError(str(atoms.get_chemical_formula()), f"relaxation did not reach fmax={fmax} eV/Å in {max_steps} steps")
    return relaxed


def maxwell_boltzmann_momenta(masses: np.ndarray, temperature: float, rng: np.random.Generator) -> np.ndarray:
    """Momenta (ASE units) drawn from the Maxwell-Boltzmann distribution at ``temperature`` K:
    each component normal with variance m k_B T, for atoms of ``masses`` (amu)."""
    return rng.standard_normal((len(masses), 3)) * np.sqrt(masses * units.kB * temperature)[:, None]


def _frame(atoms: ase.Atoms, frame_id: str) -> ase.Atoms:
    """A copy of ``atoms`` holding the energy and forces just computed for its geometry."""
    frame = ase.Atoms(numbers=atoms.numbers, positions=atoms.positions)
    forces = atoms.get_forces(apply_constraint=False)  # xtb's forces, not those projected by FixCom
    frame.calc = SinglePointCalculator(frame, energy=atoms.get_potential_energy(), forces=forces)
    frame.info["id"] = frame_id
    return frame


def md_trajectory(name: str, molecule: Molecule | str, settings: MDSettings = MDSettings(), *,
                  progress: Callable[[int, int], None] | None = None) -> Trajectory:
    """Relax ``molecule`` (a :class:`Molecule` or a SMILES string), then run Langevin MD and
    keep ``settings.n_frames`` frames (module docstring). Frame ``i`` is the geometry after
    ``n_equilibration + (i + 1) * stride`` steps and has the id ``<name>#<i>``.
    ``progress(done, total)`` is called after each frame."""
    calculator = xtb_calculator()
    rng = np.random.default_rng(settings.seed)
    start, cpu_start = time.perf_counter(), time.process_time()
    atoms = relax(start_atoms(molecule), calculator, settings.fmax)
    relaxed_energy = float(atoms.get_potential_energy())
    relaxed_at = time.perf_counter()
    atoms.set_momenta(maxwell_boltzmann_momenta(atoms.get_masses(), settings.temperature, rng))
    Stationary(atoms)
    ZeroRotation(atoms)
    atoms.set_constraint(FixCom())
    dynamics = Langevin(atoms, timestep=settings.timestep * units.fs, temperature_K=settings.temperature,
                        friction=settings.friction / units.fs, fixcm=False, rng=rng)
    dynamics.run(settings.n_equilibration)
    equilibrated_at = time.perf_counter()
    frames = []
    for index in range(settings.n_frames):
        dynamics.run(settings.stride)
        frames.append(_frame(atoms, f"{name}#{index}"))
        if progress is not None:
            progress(index + 1, settings.n_frames)
    done = time.perf_counter()
    timings = {"relax_s": relaxed_at - start, "equilibrate_s": equilibrated_at - relaxed_at,
               "sample_s": done - equilibrated_at, "total_s": done - start, "cpu_s": time.process_time() - cpu_start}
    return Trajectory(name, frames, settings, timings, relaxed_energy)


def write_trajectory(trajectory: Trajectory, folder: str | os.PathLike[str]) -> Path:
    """Write ``<folder>/<name>.extxyz`` (frames with ``energy`` eV and ``forces`` eV/Å) and
    ``<folder>/<name>.json`` (method, settings with seed, timings, versions), each atomically;
    returns the extxyz path."""
    folder = Path(folder)
    path = folder / f"{trajectory.name}.extxyz"
    write_labelled_frames(path, trajectory.frames)
    manifest: dict[str, Any] = {
        "name": trajectory.name,
        "file": path.name,
        "method": METHOD,
        "code": {"tblite": package_version("tblite"), "ase": package_version("ase"), "xtb_accuracy": XTB_ACCURACY},
        "units": {"positions": "Å", "energy": "eV", "forces": "eV/Å", "timestep": "fs", "temperature": "K"},
        "dynamics": "Langevin (ase.md.langevin), Maxwell-Boltzmann start without translation and rotation",
        "settings": asdict(trajectory.settings),
        "formula": trajectory.frames[0].get_chemical_formula() if trajectory.frames else None,
        "n_frames": len(trajectory.frames),
        "relaxed_energy_eV": trajectory.relaxed_energy,
        "timings_s": {key: round(value, 2) for key, value in trajectory.timings.items()},
    }
    atomic_write_json(folder / f"{trajectory.name}.json", manifest)
    return path
