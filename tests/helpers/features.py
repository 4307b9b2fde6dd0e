"""Shared helpers for the feature-map tests (tests/features): random molecules and S² quadrature."""

from __future__ import annotations

import numpy as np
import torch

from molntk.data.molecule import Molecule
from molntk.features import S2Grid


def random_molecule(seed: int, n: int = 7, id: str | None = None) -> Molecule:
    """A random asymmetric H/C/N/O/F molecule whose atoms are > 0.8 Å apart and within ~4 Å."""
    rng = np.random.default_rng(seed)
    pos: list[np.ndarray] = []
    while len(pos) < n:
        x = rng.uniform(-2.0, 2.0, 3)
        if all(np.linalg.norm(x - p) > 0.8 for p in pos):
            pos.append(x)
    numbers = rng.choice([1, 6, 7, 8, 9], size=n)
    return Molecule(numbers, np.array(pos), id=id or f"random-{seed}")


def s2_integral(grid: S2Grid, values: np.ndarray) -> np.ndarray:
    """Spherical-harmonic coefficients of grid values (S² quadrature)."""
    return grid.from_grid(torch.as_tensor(values)).numpy()
