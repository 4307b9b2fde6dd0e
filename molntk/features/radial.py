"""Radial bases R_k(r, Z_a, Z_b) of the environment feature maps.

Two kinds, each a frozen dataclass with ``n_functions`` (how many radial functions k),
``cutoff`` (distance in Å beyond which a neighbour contributes exactly nothing, or
``None``) and a vectorised evaluation ``basis(r, z_centre, z_neighbour) -> (P, n_functions)``
over P atom pairs:

- :class:`GaussianBasis` (``kind: gaussian``): n Gaussians times a smooth cosine cutoff,
  optionally times a radial scaling u(r) that weights far neighbours less,

      R_k(r) = exp(−(r − μ_k)² / (2 w²)) · fc(r) · u(r),   fc(r) = ½ (cos(π r / r_cut) + 1) for r < r_cut, 0 beyond,
      u(r) = 1 / (1 + (r / r₀)^p)   (Willatt, Musil & Ceriotti, PCCP 20, 29661, 2018; u = 1 without r₀),

  centres μ_k = r_min + k (r_cut − r_min)/(n − 1) evenly spaced in [r_min, r_cut] (μ_0 = r_min
  when n = 1), width w = the centre spacing unless given (r_cut − r_min when n = 1).
  With a width growth length ℓ the resolution coarsens with distance like the
  distance-dependent densities of Wigner kernels (Bigi et al., JCP 161, 044116, 2024):
  centres evenly spaced in t(r) = 1 − e^{−(r − r_min)/ℓ},

      μ_k = r_min − ℓ ln(1 − k/(n − 1) · (1 − e^{−(r_cut − r_min)/ℓ})),   w_k = ℓ Δt e^{(μ_k − r_min)/ℓ},

  Δt = (1 − e^{−(r_cut − r_min)/ℓ})/(n − 1), so each width is the local centre spacing
  dμ/dk and both grow like e^{r/ℓ} (ℓ → ∞ gives the even grid).
  fc and its first derivative vanish at r_cut, so the features are continuous (even C¹)
  as a neighbour crosses the cutoff.
- :class:`CoulombBasis` (``kind: coulomb``): the published reference's channels
  R_p(r, Z_a, Z_b) = Z_a Z_b / r^p, one per power p (default p ∈ {2, 6}), no cutoff.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, ClassVar

import numpy as np
import torch
from torch import Tensor


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_))


def check_int(name: str, value: Any, minimum: int) -> int:
    """``value`` as an int ≥ ``minimum``, else a ValueError naming ``name``."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return int(value)


def check_float(name: str, value: Any, *, positive: bool = False, nonnegative: bool = False) -> float:
    """``value`` as a finite float (optionally > 0 or ≥ 0), else a ValueError naming ``name``."""
    if not _is_number(value) or not math.isfinite(float(value)):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    value = float(value)
    if positive and value <= 0:
        raise ValueError(f"{name} must be > 0, got {value}")
    if nonnegative and value < 0:
        raise ValueError(f"{name} must be >= 0, got {value}")
    return value


def cosine_cutoff(r: Tensor, r_cut: float) -> Tensor:
    """fc(r) = ½ (cos(π r / r_cut) + 1) for r < r_cut, exactly 0 for r ≥ r_cut."""
    inside = r < r_cut
    return torch.where(inside, 0.5 * (torch.cos(torch.pi * r / r_cut) + 1.0), torch.zeros_like(r))


@dataclass(frozen=True)
class GaussianBasis:
    """Gaussians exp(−(r − μ_k)²/(2w²)) on [r_min, r_cut] (Å) times a cosine cutoff at r_cut.

    ``n``: number of Gaussians; ``width``: w in Å (``None``: the centre spacing
    (r_cut − r_min)/(n − 1), or r_cut − r_min when n = 1); ``scaling_r0`` r₀ in Å and
    ``scaling_power`` p of the radial scaling u(r) = 1/(1 + (r/r₀)^p) (``None``: u = 1), which
    lets a long cutoff see far neighbours without letting them outweigh the near ones;
    ``width_growth`` ℓ in Å (``None``: even spacing) places the centres and widths as in
    the module docstring, fine near the centre and coarse far from it (``width`` must
    then be ``None``).
    """

    n: int = 6
    r_min: float = 0.5
    r_cut: float = 5.0
    width: float | None = None
    scaling_r0: float | None = None
    scaling_power: float = 4.0
    width_growth: float | None = None

    kind: ClassVar[str] = "gaussian"

    def __post_init__(self) -> None:
        object.__setattr__(self, "n", check_int("gaussian radial basis n", self.n, 1))
        object.__setattr__(self, "r_min", check_float("gaussian radial basis r_min", self.r_min, nonnegative=True))
        object.__setattr__(self, "r_cut", check_float("gaussian radial basis r_cut", self.r_cut, positive=True))
        if self.r_cut <= self.r_min:
            raise ValueError(f"gaussian radial basis needs r_cut > r_min, got r_cut={self.r_cut}, r_min={self.r_min}")
        if self.width is not None:
            object.__setattr__(self, "width", check_float("gaussian radial basis width", self.width, positive=True))
        if self.scaling_r0 is not None:
            object.__setattr__(self, "scaling_r0", check_float("gaussian radial basis scaling_r0", self.scaling_r0, positive=True))
        object.__setattr__(self, "scaling_power", check_float("gaussian radial basis scaling_power", self.scaling_power, positive=True))
        if self.width_growth is not None:
            object.__setattr__(self, "width_growth", check_float("gaussian radial basis width_growth", self.width_growth, positive=True))
            if self.width is not None:
                raise ValueError("gaussian radial basis: give width or width_growth, not both")

    @property
    def n_functions(self) -> int:
        return self.n

    @property
    def cutoff(self) -> float:
        return self.r_cut

    @property
    def centres(self) -> np.ndarray:
        """μ_k in [r_min, r_cut] (shape (n,)): evenly spaced, or evenly in 1 − e^{−(r − r_min)/ℓ}."""
        if self.width_growth is None:
            return np.linspace(self.r_min, self.r_cut, self.n)
        return self.r_min - self.width_growth * np.log1p(-np.arange(self.n) * self.growth_step)

    @property
    def growth_step(self) -> float:
        """Δt = (1 − e^{−(r_cut − r_min)/ℓ}) / (n − 1), the even step in t(r) = 1 − e^{−(r − r_min)/ℓ}."""
        return -np.expm1(-(self.r_cut - self.r_min) / self.width_growth) / max(self.n - 1, 1)

    @property
    def sigma(self) -> float | np.ndarray:
        """The Gaussian width w in Å actually used: one number, or w_k per centre with width growth."""
        if self.width is not None:
            return self.width
        if self.width_growth is not None:
            return self.width_growth * self.growth_step * np.exp((self.centres - self.r_min) / self.width_growth)
        return (self.r_cut - self.r_min) / max(self.n - 1, 1)

    def __call__(self, r: Tensor, z_centre: Tensor, z_neighbour: Tensor) -> Tensor:
        """R_k(r_ab) for P pairs: shape (P, n). The atomic numbers are not used."""
        mu = torch.as_tensor(self.centres, dtype=r.dtype, device=r.device)
        width = torch.as_tensor(self.sigma, dtype=r.dtype, device=r.device)
        gauss = torch.exp(-((r[:, None] - mu) ** 2) / (2.0 * width**2))
        envelope = cosine_cutoff(r, self.r_cut)
        if self.scaling_r0 is not None:
            envelope = envelope / (1.0 + (r / self.scaling_r0) ** self.scaling_power)
        return gauss * envelope[:, None]

    def to_dict(self) -> dict[str, Any]:
        """The settings; the radial scaling's and the width growth only when on (so that settings, and the
        block-cache keys made from them, of bases without it stay as they were)."""
        out = {"kind": self.kind, "n": self.n, "r_min": self.r_min, "r_cut": self.r_cut, "width": self.width}
        if self.scaling_r0 is not None:
            out.update(scaling_r0=self.scaling_r0, scaling_power=self.scaling_power)
        if self.width_growth is not None:
            out.update(width_growth=self.width_growth)
        return out


@dataclass(frozen=True)
class CoulombBasis:
    """Coulomb-like channels Z_a Z_b / r^p, one per power p (> 0, distinct); no cutoff."""

    powers: tuple[float, ...] = (2.0, 6.0)

    kind: ClassVar[str] = "coulomb"

    def __post_init__(self) -> None:
        if isinstance(self.powers, (str, bytes)) or not hasattr(self.powers, "__iter__"):
            raise ValueError(f"coulomb radial basis powers must be a list of numbers, got {self.powers!r}")
        powers = tuple(check_float("coulomb radial basis power", p, positive=True) for p in self.powers)
        if not powers:
            raise ValueError("coulomb radial basis needs at least one power p")
        if len(set(powers)) != len(powers):
            raise ValueError(f"coulomb radial basis powers must be distinct, got {list(powers)}")
        object.__setattr__(self, "powers", powers)

    @property
    def n_functions(self) -> int:
        return len(self.powers)

    @property
    def cutoff(self) -> None:
        return None

    def __call__(self, r: Tensor, z_centre: Tensor, z_neighbour: Tensor) -> Tensor:
        """Z_a Z_b / r_ab^p for P pairs: shape (P, len(powers))."""
        p = torch.as_tensor(self.powers, dtype=r.dtype, device=r.device)
        return (z_centre * z_neighbour)[:, None] / r[:, None] ** p

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "powers": list(self.powers)}


RadialBasis = GaussianBasis | CoulombBasis

#: kind name → radial basis class.
RADIAL_KINDS: dict[str, type[GaussianBasis] | type[CoulombBasis]] = {
    GaussianBasis.kind: GaussianBasis,
    CoulombBasis.kind: CoulombBasis,
}


def radial_basis_from_dict(data: Mapping[str, Any]) -> RadialBasis:
    """Build a radial basis from ``{"kind": ..., <parameters>}`` (the inverse of ``to_dict``)."""
    if not isinstance(data, Mapping):
        raise ValueError(f"radial basis must be a mapping with a 'kind' key, got {data!r}")
    params = dict(data)
    kind = params.pop("kind", GaussianBasis.kind)
    if kind not in RADIAL_KINDS:
        raise ValueError(f"unknown radial basis kind {kind!r}; choose one of {sorted(RADIAL_KINDS)}")
    cls = RADIAL_KINDS[kind]
    allowed = {f.name for f in fields(cls)}
    unknown = sorted(set(params) - allowed)
    if unknown:
        raise ValueError(f"unknown key(s) {unknown} for {kind} radial basis; allowed: {sorted(allowed)}")
    return cls(**params)
