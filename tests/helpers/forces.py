"""Central-difference forces of an energy model, the reference of the force tests; helpers of
the force fields' model-file tests."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from molntk.data.molecule import Molecule


def central_difference_forces(energy: Callable[[list[Molecule]], np.ndarray], molecule: Molecule,
                              h: float = 1e-4) -> np.ndarray:
    """F_ad ≈ −(E(r + h e_ad) − E(r − h e_ad)) / 2h for every atom a and axis d, shape
    (n_atoms, 3), from one call of ``energy`` (e.g. a model's ``predict``) on the 6 n_atoms
    displaced copies of ``molecule``."""
    n = molecule.n_atoms
    steps = np.eye(3 * n).reshape(3 * n, n, 3) * h
    shifted = [Molecule(molecule.numbers, molecule.positions + sign * step) for step in steps for sign in (1, -1)]
    e = np.asarray(energy(shifted)).reshape(n, 3, 2)
    return -(e[..., 0] - e[..., 1]) / (2 * h)


def assert_same_energies_and_forces(model: Any, other: Any, molecules: list[Molecule]) -> None:
    """Two force fields (e.g. one saved and loaded back) give the same energies and forces of
    ``molecules``, bit for bit."""
    e0, f0 = model.predict_forces(molecules, return_energy=True)
    e1, f1 = other.predict_forces(molecules, return_energy=True)
    assert np.array_equal(e0, e1) and all(np.array_equal(a, b) for a, b in zip(f0, f1))


def with_array(path: Path, out: Path, key: str, change: Callable[[np.ndarray], np.ndarray]) -> Path:
    """A copy ``out`` of the model file ``path`` with its array ``key`` changed (a damaged file)."""
    arrays = dict(np.load(path))
    arrays[key] = change(arrays[key])
    np.savez(out, **arrays)
    return out
