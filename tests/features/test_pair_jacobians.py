"""Pair Jacobians of the environment feature maps (molntk.features.pair_jacobians) against the
full Jacobian of ``environment_features`` by autograd, on ethanol frames of the committed MD
sample (some atom pairs beyond the 3 Å cutoff, so the cutoff filter is exercised)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from molntk.data.labelled import read_labelled
from molntk.features.environments import FeatureConfig, environment_features
from molntk.features.pair_jacobians import pair_jacobians
from molntk.features.radial import GaussianBasis

pytestmark = pytest.mark.usefixtures("one_thread")

SAMPLE = Path(__file__).resolve().parents[2] / "data" / "md" / "ethanol_sample.extxyz"
CONFIG = FeatureConfig(elements=(1, 6, 8), radial=GaussianBasis(n=4, r_min=0.5, r_cut=3.0))


def assembled(jac, n_atoms: int, n_coeffs: int) -> torch.Tensor:
    """∂f̂(a)/∂r from the pair Jacobians: (atoms, C, n_coeffs, atoms, 3) (module docstring of pair_jacobians)."""
    k = CONFIG.n_radial
    out = torch.zeros(n_atoms, len(CONFIG.elements), k, n_coeffs, n_atoms, 3, dtype=torch.float64)
    for p in range(len(jac.centre)):
        a, b, e = int(jac.centre[p]), int(jac.neighbour[p]), int(jac.slot[p])
        out[a, e, :, :, b] += jac.jacobian[p]
        out[a, e, :, :, a] -= jac.jacobian[p]
    return out.flatten(1, 2)


def test_pair_jacobians_assemble_the_feature_jacobian():
    """Two frames at once (atom rows continue across molecules); equal to autograd of the
    feature maps to rounding (the same derivatives by reverse instead of forward mode: bound
    1e-12 relative to the largest entry)."""
    frames = read_labelled(SAMPLE, "energy").molecules[:2]
    positions = np.concatenate([m.positions for m in frames])
    n_atoms = len(positions)

    def features(r: torch.Tensor) -> torch.Tensor:
        return environment_features(frames, CONFIG, positions=r).coeffs[..., :9]

    full = torch.autograd.functional.jacobian(features, torch.tensor(positions))
    jac = pair_jacobians(frames, CONFIG, n_coeffs=9)
    assert jac.jacobian.shape == (len(jac.centre), CONFIG.n_radial, 9, 3)
    assert len(jac.centre) < 2 * 9 * 8  # some of the 72 ordered pairs per frame lie beyond the cutoff
    assert bool((jac.centre // 9 == jac.neighbour // 9).all())
    mine = assembled(jac, n_atoms, 9)
    assert float((mine - full).abs().max()) <= 1e-12 * float(full.abs().max())
