"""Shared helpers for the baseline-kernel tests (tests/molecular): the feature configuration,
rotated copies of molecules and random rotations."""

from __future__ import annotations

import math

import numpy as np
import torch
from e3nn import o3

from molntk.data.molecule import Molecule
from molntk.features.environments import FeatureConfig
from molntk.features.radial import GaussianBasis


CONFIG = FeatureConfig(band_limit=3, smearing_width=0.5, radial=GaussianBasis(n=6, r_cut=5.0))


def rotated(m: Molecule, R: np.ndarray, shift: np.ndarray | None = None, perm: np.ndarray | None = None) -> Molecule:
    perm = np.arange(m.n_atoms) if perm is None else perm
    shift = np.zeros(3) if shift is None else shift
    return Molecule(m.numbers[perm], m.positions[perm] @ R.T + shift)


def random_rotation(seed: int) -> np.ndarray:
    g = torch.Generator().manual_seed(seed)
    scale = torch.tensor([2 * math.pi, math.pi, 2 * math.pi], dtype=torch.float64)
    angles = torch.rand(3, generator=g, dtype=torch.float64) * scale
    return o3.angles_to_matrix(*angles).numpy()
