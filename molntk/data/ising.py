"""Spin configurations of the 2-d Ising model on a periodic L × L lattice, their local
energies, and the C4 lattice rotations.

A configuration is an array s of shape (1, L, L) (one channel, so that it is an image to the
networks of :mod:`molntk.kernels.cn`). The local energy of site i is

    E(i) = Σ_{j ∈ N(i)} s_i s_j = s_i (s_{i+x̂} + s_{i-x̂} + s_{i+ŷ} + s_{i-ŷ}),

N(i) the four nearest neighbours with periodic boundaries (the total energy is ½ Σ_i E(i)).
The lattice rotation by g quarter turns, ρ(g) s = rot90(s, g), maps the torus onto itself
and nearest neighbours onto nearest neighbours, so the local energies are equivariant:
E(ρ(g) s) = ρ(g) E(s). The C4 orbit of s is {ρ(g) s : g = 0, 1, 2, 3}.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor

#: Order of the lattice rotation group C4.
C4 = 4


def spin_configurations(
    n: int, size: int, *, seed: int, kind: Literal["ising", "gaussian"] = "ising", dtype: torch.dtype = torch.float64
) -> Tensor:
    """n configurations (n, 1, L, L): ``ising`` spins ±1 with probability ½ each, or
    ``gaussian`` spins drawn from N(0, 1) (off the data manifold). Seeded by ``seed``."""
    generator = torch.Generator().manual_seed(seed)
    if kind == "ising":
        return torch.randint(0, 2, (n, 1, size, size), generator=generator).to(dtype) * 2 - 1
    if kind == "gaussian":
        return torch.randn(n, 1, size, size, generator=generator, dtype=dtype)
    raise ValueError(f"unknown kind of spins {kind!r}: 'ising' or 'gaussian'")


def local_energies(spins: Tensor) -> Tensor:
    """E(i) = s_i Σ_{j ∈ N(i)} s_j on the periodic lattice, same shape as ``spins`` (..., L, L)."""
    neighbours = sum(torch.roll(spins, shift, dims=dim) for shift in (1, -1) for dim in (-2, -1))
    return spins * neighbours


def rotate_lattice(x: Tensor, g: int) -> Tensor:
    """ρ(g) x: rotation by g quarter turns of the last two (lattice) axes."""
    return torch.rot90(x, g, dims=(-2, -1))


def c4_orbit(x: Tensor) -> Tensor:
    """The orbit (4, ...) of every configuration: ρ(g) x for g = 0, 1, 2, 3."""
    return torch.stack([rotate_lattice(x, g) for g in range(C4)])
