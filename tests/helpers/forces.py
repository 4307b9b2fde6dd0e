"""Central-difference forces of an energy model, the reference of the force tests."""

from __future__ import annotations

from collections.abc import Callable

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
