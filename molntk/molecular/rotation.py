"""Rotating molecules in feature space: f̂^l(R·mol) = D^l(R) f̂^l(mol).

Rotating a molecule (positions x ↦ R x) maps the degree-l block of every environment's
feature map by the e3nn Wigner matrix D^l(R) (:mod:`molntk.features.environments`), so a
rotated copy costs one (2l+1) × (2l+1) product per block instead of a new featurisation.

- :func:`haar_angles`: Haar-random rotations as e3nn Euler angles (α, β, γ),
  R = Y(α) X(β) Y(γ) with α, γ uniform on [0, 2π) and cos β uniform on [−1, 1];
- :func:`rotate_environments`: molecule i of a batch rotated by its own R_i;
- :func:`rotated_batch`: every molecule under ``copies`` rotations, molecule-major.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import Tensor

from molntk.features.environments import EnvironmentBatch
from molntk.kernels.so3.wigner import coeff_slices, wigner_slices
from molntk.molecular.baselines.augmented import wigner_table

Angles = tuple[Tensor, Tensor, Tensor]


def haar_angles(n: int, seed: int) -> Angles:
    """n Haar-random rotations (α, β, γ), float64 tensors (n,), from ``seed`` (numpy)."""
    if n < 0:
        raise ValueError(f"number of rotations must be >= 0, got {n}")
    rng = np.random.default_rng(seed)
    alpha, gamma = rng.uniform(0.0, 2 * np.pi, (2, n))
    beta = np.arccos(rng.uniform(-1.0, 1.0, n))
    return torch.from_numpy(alpha), torch.from_numpy(beta), torch.from_numpy(gamma)


def rotate_environments(batch: EnvironmentBatch, angles: Angles) -> EnvironmentBatch:
    """The feature maps of molecule i rotated by R_i = angles[i]: f̂^l ↦ D^l(R_i) f̂^l for each
    of its environments (``angles``: three tensors (n_molecules,))."""
    if any(a.shape != (batch.n_molecules,) for a in angles):
        raise ValueError(f"need one rotation per molecule ({batch.n_molecules}), got shapes {[tuple(a.shape) for a in angles]}")
    band_limit = math.isqrt(batch.coeffs.shape[-1])
    table = wigner_table(band_limit, *angles).to(batch.coeffs)[batch.molecule_index]  # (n_env, Σ_l (2l+1)²)
    out = torch.empty_like(batch.coeffs)
    for coeffs, entries in zip(coeff_slices(band_limit), wigner_slices(band_limit)):
        size = coeffs.stop - coeffs.start
        d = table[:, entries].unflatten(-1, (size, size))  # (n_env, 2l+1, 2l+1)
        out[..., coeffs] = torch.einsum("nmp,ncp->ncm", d, batch.coeffs[..., coeffs])
    return EnvironmentBatch(out, batch.centre_numbers, batch.molecule_index, batch.atom_index, batch.n_molecules, batch.config)


def rotated_batch(batch: EnvironmentBatch, copies: int, angles: Angles) -> EnvironmentBatch:
    """Every molecule under ``copies`` rotations: molecule i · copies + j is molecule i
    rotated by angles[i · copies + j] (``angles``: three tensors (n_molecules · copies,))."""
    repeated = batch.select(np.repeat(np.arange(batch.n_molecules), copies))
    return rotate_environments(repeated, angles)
