"""Shared helpers for the SO(3) engine tests: random inputs and rotated inputs."""

from __future__ import annotations

import torch

from molntk.kernels.so3.wigner import coeff_slices, wigner_blocks


def random_coefficients(n: int, channels: int, band_limit: int, seed: int, decay: float = 0.7) -> torch.Tensor:
    """Random spherical-harmonic coefficients (n, C, L²) with power falling like decay^l."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, channels, band_limit**2, generator=g, dtype=torch.float64)
    for l, s in enumerate(coeff_slices(band_limit)):
        x[..., s] *= decay**l
    return x


def rotate_coefficients(x: torch.Tensor, R: torch.Tensor, band_limit: int) -> torch.Tensor:
    """Coefficients of the rotated signal f(R⁻¹·): f̂^l ↦ D^l(R) f̂^l."""
    from e3nn import o3

    angles = o3.matrix_to_angles(R.to(torch.float64))
    blocks = wigner_blocks(band_limit, *(a.reshape(1) for a in angles))
    out = x.clone()
    for d, s in zip(blocks, coeff_slices(band_limit)):
        out[..., s] = x[..., s] @ d[0].T
    return out
