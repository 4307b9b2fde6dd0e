"""Rotations of filters and images by 2πr/n on the pixel grid.

One convention throughout (it is torch.rot90's): for an h×w array with centred
coordinates u = (i − (h−1)/2, j − (w−1)/2), the rotation by angle θ is

    (R_θ a)(u) = ā(M_θ⁻¹ u),   M_θ⁻¹ = [[cos θ, sin θ], [−sin θ, cos θ]],

where ā is the bilinear interpolant of a, zero outside the array. For θ a multiple of
90° every M_θ⁻¹ u is a grid point and R_θ is the permutation ``torch.rot90(a, θ/90°)``;
for other θ it is a bilinear interpolation (not orthogonal, and corners of a square
filter leave its support). The matrix I_r of docs/mathematics.md §4, (I_r w).flatten() = I_r @
w.flatten(), is :func:`rotation_operator` (k, k, 2πr/n).

Because bilinear interpolation commutes with the grid's own 90° symmetry,
I_{r + n/4} = P I_r = I_r P with P the exact quarter turn (n divisible by 4); the kernel
engine's symmetry reduction (:mod:`molntk.kernels.cn.state`) rests on this.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
import torch
from torch import Tensor

#: A sampling coordinate within this distance of an integer is taken as that integer,
#: so that rotations by multiples of 90° are exact permutations despite cos(π/2) ≠ 0.
_SNAP = 1e-9


def quarter_turns(angle: float) -> int | None:
    """``angle`` (radians) as a number of quarter turns in 0..3, or None if it is not one."""
    turns = angle / (math.pi / 2)
    nearest = round(turns)
    return nearest % 4 if abs(turns - nearest) < 1e-12 else None


def rotation_operator(h: int, w: int, angle: float, *, dtype: torch.dtype = torch.float64) -> Tensor:
    """The (h·w, h·w) matrix of R_θ on row-major flattened h×w arrays (bilinear, zero outside)."""
    ci, cj = (h - 1) / 2, (w - 1) / 2
    ii, jj = np.meshgrid(np.arange(h) - ci, np.arange(w) - cj, indexing="ij")
    cos, sin = math.cos(angle), math.sin(angle)
    src_i = cos * ii + sin * jj + ci
    src_j = -sin * ii + cos * jj + cj
    src_i = np.where(np.abs(src_i - np.round(src_i)) < _SNAP, np.round(src_i), src_i).ravel()
    src_j = np.where(np.abs(src_j - np.round(src_j)) < _SNAP, np.round(src_j), src_j).ravel()
    i0, j0 = np.floor(src_i).astype(int), np.floor(src_j).astype(int)
    fi, fj = src_i - i0, src_j - j0
    out = np.zeros((h * w, h * w))
    rows = np.arange(h * w)
    for di, dj, weight in ((0, 0, (1 - fi) * (1 - fj)), (1, 0, fi * (1 - fj)), (0, 1, (1 - fi) * fj), (1, 1, fi * fj)):
        si, sj = i0 + di, j0 + dj
        ok = (si >= 0) & (si < h) & (sj >= 0) & (sj < w) & (weight > 0)
        np.add.at(out, (rows[ok], si[ok] * w + sj[ok]), weight[ok])
    return torch.as_tensor(out, dtype=dtype)


@lru_cache(maxsize=64)
def _filter_rotations(n: int, k: int) -> Tensor:
    q = math.gcd(n, 4)
    p = n // q
    base = [rotation_operator(k, k, 2 * math.pi * s / n) for s in range(p)]
    mats = []
    for r in range(n):
        m, s = divmod(r, p)
        cols = base[s].reshape(k, k, k * k)
        mats.append(torch.rot90(cols, (4 // q) * m, dims=(0, 1)).reshape(k * k, k * k))
    return torch.stack(mats)


def filter_rotations(n: int, k: int, *, dtype: torch.dtype = torch.float64) -> Tensor:
    """I_r for r = 0..n−1 as an (n, k², k²) tensor: rotation of a k×k filter by 2πr/n.

    With q = gcd(n, 4) and p = n/q, I_r for r = p·m + s is built as P^{(4/q)·m} I_s (P the
    exact quarter turn, applied by ``rot90``), so that identity holds in floating point too.
    """
    return _filter_rotations(n, k).to(dtype)


def rotate_images(x: Tensor, angle: float) -> Tensor:
    """ρ(θ) x for images x (..., H, W): exact ``rot90`` for quarter turns, else bilinear.

    A quarter turn of a non-square image swaps H and W; other angles keep the frame and
    fill pixels whose source lies outside the image with zeros.
    """
    turns = quarter_turns(angle)
    if turns is not None:
        return torch.rot90(x, turns, dims=(-2, -1))
    h, w = x.shape[-2:]
    op = rotation_operator(h, w, angle, dtype=x.dtype).to(x.device)
    return (x.reshape(*x.shape[:-2], h * w) @ op.T).reshape(x.shape)
