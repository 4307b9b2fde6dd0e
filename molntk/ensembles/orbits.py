"""Emergent equivariance, measured: the relative orbit standard deviation.

For a group G acting on inputs by ρ and on outputs by ρ_out (the identity for invariant
outputs), a prediction ŷ is equivariant when the aligned orbit values

    v_g(x) = ρ_out(g)⁻¹ ŷ(ρ(g) x),   g ∈ G,

are the same for every g. Their spread, relative to their size, is

    relative orbit std = ⟨std_g v_g(x)_a⟩ / ⟨|mean_g v_g(x)_a|⟩,

std_g and mean_g over the |G| group elements (std with 1/|G|: the orbit is the whole group,
not a sample), ⟨·⟩ the mean over inputs x and output components a. It is std_g / |mean_g|
averaged as a ratio of means, which stays finite where single outputs have mean ≈ 0 (a
local energy of 0). It is 0 for an equivariant prediction and of order 1 for an arbitrary one.
"""

from __future__ import annotations

from torch import Tensor


def orbit_spread(aligned: Tensor) -> tuple[Tensor, Tensor]:
    """(std_g, |mean_g|) over the leading axis of aligned orbit values (|G|, ...)."""
    return aligned.std(dim=0, correction=0), aligned.mean(dim=0).abs()


def relative_orbit_std(aligned: Tensor) -> float:
    """⟨std_g⟩ / ⟨|mean_g|⟩ of aligned orbit values (|G|, ...), averaged over all other axes."""
    std, size = orbit_spread(aligned)
    return float(std.mean() / size.mean())


def member_relative_orbit_std(aligned: Tensor) -> Tensor:
    """The relative orbit std of each member separately, for aligned values (|G|, E, ...): (E,)."""
    std, size = orbit_spread(aligned)
    return std.flatten(1).mean(1) / size.flatten(1).mean(1)
