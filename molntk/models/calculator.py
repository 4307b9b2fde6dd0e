"""An ASE calculator of a fitted SO(3) NTK energy model or force field.

    from ase.optimize import BFGS
    atoms.calc = MolntkCalculator(model)            # model: a fitted SO3NTKRegressor of energies in meV,
                                                    # or a fitted SO3ForceFieldRegressor
    BFGS(atoms).run(fmax=0.05)                     # eV/Å, as everywhere in ASE

``energy`` is the model's prediction E(M) and ``forces`` F = −∂E/∂r
(the model's ``predict_forces``, one pass for both;
a Δ-model's include its baseline, :mod:`molntk.models.delta`),
converted from the model's energy unit u to ASE's eV and eV/Å: E[eV] = E[u] · eV_per(u),
F[eV/Å] = F[u/Å] · eV_per(u) (:data:`EV_PER_UNIT`, from ``ase.units``). An exact model also
gives its NTK-GP standard deviation as the extra result ``energy_std`` (eV;
``calc.results["energy_std"]``), unless ``std=False``. The unit is the model's ``unit_``
attribute when it has one, else the ``unit`` argument (default ``"meV"``: the unit of every
QM9 energy in :mod:`molntk.data.qm9`); a model whose unit is not an energy has no forces
and is refused.
"""

from __future__ import annotations

import inspect
from typing import Any

import numpy as np
from ase import Atoms, units
from ase.calculators.calculator import Calculator, all_changes
from sklearn.exceptions import NotFittedError
from sklearn.utils.validation import check_is_fitted

from molntk.data.readers import molecule_from_atoms
from molntk.errors import InputError

#: eV per unit of energy, for the units a model's target may have.
EV_PER_UNIT: dict[str, float] = {
    "eV": 1.0,
    "meV": 1e-3,
    "Hartree": units.Hartree,
    "Ha": units.Hartree,
    "kcal/mol": units.kcal / units.mol,
    "kJ/mol": units.kJ / units.mol,
}


def energy_unit(model: Any, unit: str | None) -> str:
    """The energy unit of ``model``'s predictions: its ``unit_`` when it has one (a different
    ``unit`` argument is an error), else ``unit`` (None: ``"meV"``). InputError naming
    ``unit`` when it is not an energy unit of :data:`EV_PER_UNIT`."""
    declared = getattr(model, "unit_", None)
    if declared is not None and unit is not None and unit != declared:
        raise InputError("unit", f"{unit!r} given, but the model's target is in {declared!r}")
    chosen = declared if declared is not None else ("meV" if unit is None else unit)
    if chosen not in EV_PER_UNIT:
        raise InputError("unit", f"{chosen!r} is not an energy unit ({', '.join(EV_PER_UNIT)}): a model of it has no forces")
    return chosen


def _has_std(model: Any) -> bool:
    """Whether the model predicts a std: an exact model whose ``predict`` takes ``return_std``."""
    return getattr(model, "inducing", None) is None and "return_std" in inspect.signature(model.predict).parameters


class MolntkCalculator(Calculator):
    """ASE calculator of a fitted :class:`~molntk.models.so3_ntk.SO3NTKRegressor` of an energy
    or :class:`~molntk.models.force_field.SO3ForceFieldRegressor` (module docstring):
    ``energy`` (eV), ``forces`` (eV/Å), and ``energy_std`` (eV) for an exact energy model when
    ``std``. Molecules only: a periodic ``Atoms`` is an InputError."""

    implemented_properties = ["energy", "forces"]

    def __init__(self, model: Any, unit: str | None = None, std: bool = True, **kwargs: Any) -> None:
        try:
            check_is_fitted(model)
        except NotFittedError:
            raise InputError("model", "the calculator needs a fitted model (call fit or load first)") from None
        self.unit = energy_unit(model, unit)
        self.model, self.std = model, std and _has_std(model)
        self.scale = EV_PER_UNIT[self.unit]
        super().__init__(**kwargs)

    def calculate(self, atoms: Atoms | None = None, properties: list[str] | None = None,
                  system_changes: list[str] = all_changes) -> None:
        """Energy and forces of ``atoms`` in one pass; ``energy_std`` as well for an exact model."""
        super().calculate(atoms, properties, system_changes)
        if self.atoms.pbc.any():
            raise InputError("atoms", "periodic cells are not supported: the model describes isolated molecules")
        molecule = molecule_from_atoms(self.atoms)
        (energy,), (forces,) = self.model.predict_forces([molecule], return_energy=True)
        self.results = {"energy": float(energy) * self.scale, "forces": np.asarray(forces) * self.scale}
        if self.std:
            _, std = self.model.predict([molecule], return_std=True)
            self.results["energy_std"] = float(std[0]) * self.scale
