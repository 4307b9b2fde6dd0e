"""Similarity of neighbour elements: the channels of chemically close elements overlap.

Without it the feature maps keep one block of channels per neighbour element, and two
environments are compared element by element: a carbon neighbour and a nitrogen neighbour at
the same place do not overlap at all. With a width w > 0 (``FeatureConfig.element_width``)
neighbour elements e, e' overlap by a Gaussian of their distance in the periodic table,

    S_ee' = exp(−((p_e − p_e')² + (g_e − g_e')²) / (2 w²)),

p the period and g the group (1–18; lanthanides and actinides in group 3): the element
similarity of FCHL18 (Faber et al., J. Chem. Phys. 148, 241717, 2018). For QM9's elements C,
N, O, F (one period) S = κ^{(Δg)²} with κ = exp(−1/(2w²)), and hydrogen stays apart
(H–C: exp(−170/(2w²)) < 1e-7 for w ≤ 2).

The feature maps' element blocks are mixed by the symmetric square root A = S^{1/2}:
f'_{(e,k)} = Σ_e' A_ee' f_{(e',k)}, so every channel inner product becomes
Σ_c f'_c g'_c = Σ_{e,e',k} S_ee' f_{(e,k)} g_{(e',k)}. It is a fixed linear map of the
network's input, so a network on the mixed maps is the same network (its finite twin
unchanged) and its kernels see S in place of the identity. S is positive definite (a Gaussian
kernel on distinct points), so A is unique.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

import numpy as np
import torch
from torch import Tensor

#: Atomic number of the last element of each period 1 … 7.
_PERIOD_ENDS = (2, 10, 18, 36, 54, 86, 118)


def period_and_group(z: int) -> tuple[int, int]:
    """(period, group) of atomic number ``z`` (1 … 118); the f-block in group 3."""
    if not 1 <= z <= _PERIOD_ENDS[-1]:
        raise ValueError(f"{z} is not an atomic number (1..{_PERIOD_ENDS[-1]})")
    period = next(p for p, end in enumerate(_PERIOD_ENDS, 1) if z <= end)
    k = z - (_PERIOD_ENDS[period - 2] if period > 1 else 0)  # position in the period, from 1
    if period == 1:
        return 1, 1 if z == 1 else 18
    if period <= 3:  # s block, then the p block of groups 13–18
        return period, k if k <= 2 else k + 10
    if period <= 5:
        return period, k
    return period, k if k <= 2 else 3 if k <= 17 else k - 14  # 15 f-block elements in group 3


def element_similarity(elements: Sequence[int], width: float) -> np.ndarray:
    """S_ee' (module docstring) of ``elements``, (E, E) float64."""
    pg = np.array([period_and_group(int(z)) for z in elements], dtype=np.float64)
    d2 = ((pg[:, None, :] - pg[None, :, :]) ** 2).sum(-1)
    return np.exp(-d2 / (2.0 * width**2))


@lru_cache(maxsize=64)
def element_mixing(elements: tuple[int, ...], width: float) -> np.ndarray:
    """A = S^{1/2}, the symmetric square root of :func:`element_similarity`, (E, E) float64,
    read-only: made once per (elements, width), since the force routes ask for it per tile."""
    values, vectors = np.linalg.eigh(element_similarity(elements, width))
    mixing = (vectors * np.sqrt(values.clip(min=0.0))) @ vectors.T
    mixing.setflags(write=False)
    return mixing


def mix_elements(t: Tensor, mixing: np.ndarray | None, dim: int) -> Tensor:
    """Σ_e' A_ee' t[…, e', …] along the element axis ``dim`` of ``t`` (``mixing`` None: ``t``).
    A is symmetric, so the same map pulls a gradient with respect to the mixed channels back
    to the unmixed ones."""
    if mixing is None:
        return t
    a = torch.tensor(mixing, dtype=t.dtype, device=t.device)  # a copy: the cached A is read-only
    return torch.tensordot(t.movedim(dim, -1), a, dims=([t.dim() - 1], [1])).movedim(-1, dim)
