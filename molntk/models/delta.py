"""Δ-learning: the physical baseline whose residual a model learns.

A model with a baseline B (``SO3NTKRegressor(baseline=...)``) predicts

    E(M) = E_B(M) + E_dressed(M) + E_NTK(M),      F_a = F_B,a + F_NTK,a,

its dressed-atom and kernel parts fitted to y − E_B at the training geometries (Δ-learning:
Ramakrishnan, Dral, Rupp & von Lilienfeld, J. Chem. Theory Comput. 11, 2087 (2015), on QM9).
The baseline's free-atom reference energies need no care: whatever they are (and whether y is
a total or an atomization energy), they add a constant per atom of each element, which the
dressed-atom term absorbs (``residual=True``, the estimator's default).

Baselines (:data:`BASELINES`):

- ``"gfn2-xtb"``: GFN2-xTB (Bannwarth, Ehlert & Grimme 2019) by tblite (PyPI ``tblite``, the
  extra ``molntk[md]``): the total energy and its analytic gradient for the neutral molecule
  with Σ_a Z_a mod 2 unpaired electrons, the SCF converged at tblite's accuracy
  :data:`~molntk.data.md.XTB_ACCURACY` (as the project's MD data), from a fresh start at every
  geometry, so that a result depends on the geometry alone (not on the geometry before).
  Its forces agree with central differences of its energy to ≈ 5e-6 of max |F| (measured on a
  QM9 molecule at its DFT geometry, |F| ≈ 0.6 eV/Å, h = 1e-4 Å): the SCF's convergence, not a
  missing term.

tblite's Hartree and Hartree/bohr are converted with ``ase.units`` into the model's energy
unit u (:data:`~molntk.models.calculator.EV_PER_UNIT`): E[u] = E[Eh] · Hartree / eV_per(u).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from ase.units import Bohr, Hartree

from molntk.data.md import METHOD, XTB_ACCURACY
from molntk.data.molecule import Molecule
from molntk.errors import InputError
from molntk.models.calculator import EV_PER_UNIT

#: Names of the baselines a model may learn the residual of.
BASELINES: tuple[str, ...] = ("gfn2-xtb",)


@dataclass(frozen=True)
class BaselineResult:
    """Baseline energies (n,) and forces (a list of (n_atoms, 3)) of molecules, in u and u/Å."""

    energies: np.ndarray
    forces: list[np.ndarray]


def check_baseline(name: str | None) -> None:
    """InputError naming ``baseline`` unless ``name`` is None or one of :data:`BASELINES`."""
    if name is not None and name not in BASELINES:
        raise InputError("baseline", f"unknown baseline {name!r}; choose one of {', '.join(BASELINES)} (or None)")


def check_energy_unit(unit: str | None, name: str) -> None:
    """InputError naming ``unit`` unless it is an energy unit of
    :data:`~molntk.models.calculator.EV_PER_UNIT`, which the baseline ``name`` is converted into."""
    if unit not in EV_PER_UNIT:
        raise InputError("unit", f"{unit!r} is not an energy unit ({', '.join(EV_PER_UNIT)}): a model with the baseline "
                                 f"{name!r} needs its target's energy unit")


def baseline_results(name: str, molecules: Sequence[Molecule], unit: str) -> BaselineResult:
    """Energies and forces of the baseline ``name`` for each molecule, in ``unit`` (an energy
    unit of :data:`~molntk.models.calculator.EV_PER_UNIT`) and ``unit``/Å."""
    check_baseline(name)
    check_energy_unit(unit, name)
    per_ev = 1.0 / EV_PER_UNIT[unit]
    points = [xtb_single_point(m) for m in molecules]
    return BaselineResult(np.array([e for e, _ in points], dtype=np.float64) * per_ev, [f * per_ev for _, f in points])


def xtb_single_point(molecule: Molecule) -> tuple[float, np.ndarray]:
    """GFN2-xTB energy (eV) and forces (eV/Å, (n_atoms, 3)) of one molecule (module docstring).
    InputError naming ``baseline`` when tblite is missing, naming the molecule when its SCF fails."""
    try:
        from tblite.interface import Calculator
    except ImportError:
        raise InputError("baseline", "'gfn2-xtb' needs tblite: pip install \"molntk[md]\" (or: pip install tblite)") from None
    try:
        calc = Calculator(METHOD, molecule.numbers, molecule.positions / Bohr, uhf=int(molecule.numbers.sum()) % 2)
        calc.set("accuracy", XTB_ACCURACY)
        calc.set("verbosity", 0)
        result = calc.singlepoint()
    except RuntimeError as err:  # tblite's errors (SCF not converged, bad geometry) are RuntimeErrors
        raise InputError(molecule.describe(), f"GFN2-xTB failed ({molecule.formula}): {err}") from None
    return float(result["energy"]) * Hartree, -np.asarray(result["gradient"], dtype=np.float64) * (Hartree / Bohr)
