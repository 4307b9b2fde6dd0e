"""Power-spectrum (SOAP-type) kernel on the environment feature maps.

Per environment, from the Fourier coefficients f̂^l_{c,m} (:mod:`molntk.features.environments`):

    p^l_{cc'} = s_l Σ_m f̂^l_{c,m} f̂^l_{c',m},    s_l = 1/√(2l+1) (``degree_scaling``) or 1,

flattened over (l, c ≤ c') with the off-diagonal entries (c < c') multiplied by √2, so
that the flat dot product is the full sum p·p' = Σ_l Σ_{c,c'} p^l_{cc'} p'^l_{cc'}. Since
D^l(R) is orthogonal, p is exactly rotation invariant. With s_l = 1/√(2l+1),

    p·p' = Σ_l ⟨M^l, M^l⟩ / (2l+1) = ∫_{SO(3)} ⟨f, ρ(u) f'⟩² du,   M^l = Σ_c f̂^l_c f̂'^{lT}_c,

the Haar mean of the squared SO(3) lifting kernel (docs/mathematics.md §2: the body-order-3 term of the
pooled GCNN kernel). The environment kernel is the normalised dot product raised to ζ,

    k(a, b) = (p̂_a · p̂_b)^ζ,   p̂ = p / ‖p‖   (p̂ = 0 for an environment with no neighbours),

with ζ a positive integer (a Schur power of a Gram matrix, so the kernel stays positive
semi-definite even where p̂ · p̂' < 0), and the molecular kernel is the element-resolved
pair sum of :mod:`molntk.molecular.pair_sum`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import ClassVar

import torch
from torch import Tensor

from molntk.features.environments import EnvironmentBatch, FeatureConfig
from molntk.kernels.so3.wigner import coeff_slices
from molntk.molecular.baselines.local import FeatureMapKernel
from molntk.molecular.descriptors import AtomDescriptors

#: Environments per chunk of the (chunk, C, C) Gram matrices: small enough that a chunk's
#: Gram matrix stays in cache while its upper triangle is copied out.
_CHUNK = 256


def power_spectrum(coeffs: Tensor, *, degree_scaling: bool = True) -> Tensor:
    """Unnormalised power spectra p (n, L · C(C+1)/2) of coefficients (n, C, L²) (module doc).

    Per chunk of environments and degree l, the Gram matrices Σ_m f̂^l_{c,m} f̂^l_{c',m}
    (chunk, C, C) are formed and their upper triangles written, weighted, into the output:
    the peak memory is the output's.
    """
    n, n_chan, n_coef = coeffs.shape
    band_limit = math.isqrt(n_coef)
    if band_limit**2 != n_coef:
        raise ValueError(f"coefficients must have L² entries per channel, got {n_coef}")
    rows, cols = torch.triu_indices(n_chan, n_chan, device=coeffs.device)
    upper = rows * n_chan + cols  # the upper triangle in a flattened (C, C) Gram matrix
    pair_weight = torch.full(rows.shape, math.sqrt(2.0), dtype=coeffs.dtype, device=coeffs.device)
    pair_weight[rows == cols] = 1.0
    weights = [pair_weight / math.sqrt(2 * l + 1) if degree_scaling else pair_weight for l in range(band_limit)]
    n_pairs = upper.numel()
    out = coeffs.new_empty(n, band_limit * n_pairs)
    for start in range(0, n, _CHUNK):
        chunk = coeffs[start : start + _CHUNK]
        for l, s in enumerate(coeff_slices(band_limit)):
            gram = torch.bmm(chunk[..., s], chunk[..., s].transpose(1, 2)).view(len(chunk), n_chan * n_chan)
            part = out[start : start + len(chunk), l * n_pairs : (l + 1) * n_pairs]
            part.copy_(gram.index_select(1, upper))
            part.mul_(weights[l])
    return out


def normalise(p: Tensor) -> Tensor:
    """Rows of ``p`` scaled to unit length in place (all-zero rows stay zero); returns ``p``.
    In place because p is large: 3,280 numbers per environment at C = 40, L = 4 (10 GB for
    the 400,000 environments of 20,000 QM9 molecules)."""
    norm = torch.linalg.vector_norm(p, dim=1, keepdim=True)
    return p.div_(torch.where(norm > 0, norm, torch.ones_like(norm)))


def normalised_dot_power(x1: Tensor, x2: Tensor | None, zeta: int) -> Tensor:
    """(x1_i · x2_j)^ζ for unit-length rows (x2 None: x2 = x1)."""
    return (x1 @ (x1 if x2 is None else x2).T) ** zeta


@dataclass(frozen=True)
class PowerSpectrumKernel(FeatureMapKernel):
    """Molecular SOAP-type kernel Σ_a Σ_b [Z_a = Z_b] (p̂_a · p̂_b)^ζ on molntk's feature maps.

    ``kern(a, b)`` → ``{"kernel"}`` (M1, M2) for molecules / an EnvironmentBatch / :meth:`describe` output.
    """

    features: FeatureConfig = field(default_factory=FeatureConfig)
    zeta: int = 2
    degree_scaling: bool = True
    block_size: int = field(default=1024, kw_only=True)
    name: ClassVar[str] = "power-spectrum"

    def __post_init__(self) -> None:
        super().__post_init__()
        if isinstance(self.zeta, bool) or not isinstance(self.zeta, int) or self.zeta < 1:
            raise ValueError(f"zeta must be a positive integer, got {self.zeta!r}")

    def from_environments(self, batch: EnvironmentBatch) -> AtomDescriptors:
        """The environments' Fourier coefficients (C, L²) as they are: the power spectra are
        formed per kernel call (:meth:`compared`: for the atoms of one block), never for every
        atom at once (L · C(C+1)/2 numbers per atom: 12,960 for 80 channels, 41 GB for the
        400,000 atoms of 22,000 QM9 molecules)."""
        return AtomDescriptors.from_batch(batch)

    def compared(self, values: Tensor) -> Tensor:
        """Normalised power spectra p̂ of coefficients (n, C, L²)."""
        return normalise(power_spectrum(values, degree_scaling=self.degree_scaling))

    def env_kernel(self, x1: Tensor, x2: Tensor | None = None) -> tuple[Tensor]:
        return (normalised_dot_power(x1, x2, self.zeta),)
