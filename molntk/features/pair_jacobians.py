"""Derivatives of the environment feature maps with respect to the atom positions, pair by pair.

The feature map of environment a is a sum over its neighbours b (r_ab < cutoff) of the pair
terms t(r_b − r_a) (:func:`~molntk.features.environments.pair_terms`, shape (K, L²)) in the
channels (Z_b, k), so with the pair Jacobian J_ab = ∂t(v)/∂v at v = r_b − r_a, (K, L², 3):

    ∂f̂_{(Z_b,k)}(a)/∂r_b = J_ab[k]   (b ≠ a),     ∂f̂(a)/∂r_a = −Σ_b J_ab   (in the channels of each Z_b),

and no other position moves f̂(a). Each pair's terms depend on its own vector only, so the
three Jacobian-vector products J e_x, J e_y, J e_z (the tangent on every pair vector at once)
give all the J_ab, by reverse over reverse mode: with g(u) = Jᵀu (one backward pass of the
terms with a dummy cotangent u, its graph kept), J e = ∂⟨g(u), e⟩/∂u is one more backward pass
per axis. Their cost is that of a few feature evaluations, whatever the number of atoms.
(torch.func.jvp gives the same numbers but runs e3nn's spherical harmonics through torch's
Python reference decompositions: ≈ 9× slower for one ethanol frame.)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from molntk.data.molecule import Molecule
from molntk.features.environments import (
    FeatureConfig,
    element_slots,
    neighbour_pairs,
    pair_indices,
    pair_terms,
)
from molntk.features.smearing import smearing_vector


@dataclass(frozen=True)
class PairJacobians:
    """The pairs (a, b) of a list of molecules that are in each other's environment (atom rows
    a = ``centre``, b = ``neighbour`` into the molecules' concatenated atoms, (P,) int64), the
    channel block ``slot`` of each neighbour's element (P,), and ``jacobian`` (P, K, n, 3):
    J_ab for the first n coefficients (l, m) of every radial channel k."""

    centre: Tensor
    neighbour: Tensor
    slot: Tensor
    jacobian: Tensor


def pair_jacobians(molecules: Sequence[Molecule], config: FeatureConfig, *, n_coeffs: int | None = None,
                   dtype: torch.dtype = torch.float64, device: torch.device | str = "cpu") -> PairJacobians:
    """:class:`PairJacobians` of ``molecules`` for the first ``n_coeffs`` (default all L²)
    coefficients of each channel, in ``dtype`` on ``device``."""
    n_coeffs = config.n_coeffs if n_coeffs is None else n_coeffs
    n_atoms = np.array([m.n_atoms for m in molecules], dtype=np.int64)
    pos = torch.as_tensor(np.concatenate([m.positions for m in molecules]), dtype=torch.float64, device=device)
    z = torch.as_tensor(np.concatenate([m.numbers for m in molecules]), device=device)
    centre, neighbour, vec = neighbour_pairs(pos, *pair_indices(n_atoms), config, dtype)
    smearing = smearing_vector(config.band_limit, config.smearing_width, dtype=dtype, device=device)

    with torch.enable_grad():
        v = vec.detach().requires_grad_(True)
        terms = pair_terms(v, z[centre], z[neighbour], config, smearing)[..., :n_coeffs]
        dummy = torch.zeros_like(terms, requires_grad=True)
        (transposed,) = torch.autograd.grad(terms, v, dummy, create_graph=True)  # Jᵀu, linear in u
        columns = []
        for axis in range(3):
            tangent = torch.zeros_like(vec)
            tangent[:, axis] = 1.0
            columns.append(torch.autograd.grad(transposed, dummy, tangent, retain_graph=axis < 2)[0].detach())
    return PairJacobians(centre, neighbour, element_slots(config, device)[z[neighbour]], torch.stack(columns, dim=-1))
