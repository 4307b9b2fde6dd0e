"""Kernel states of C_n ⋉ R² networks, stored up to the exact rotation symmetry.

Features live on sites (x, r): positions x of an h×w grid and rotations r ∈ Z_n. Let
q₀ = gcd(n, 4) (gcd(n, 2) for non-square grids) be the order of the rotations that are
exact on the pixel grid, p = n/q₀, and ρ_j the rotation of images by j·2π/q₀ (``rot90``).
Writing r = p·m + s (s < p), the finite networks satisfy exactly

    z(x, p·m + s)[f] = (ρ_m z(·, s)[ρ_{−m} f])(x)        (equivariance),
    {z(x, r)}  =  {z(x, r + p)}  in distribution          (I_{r+p} = P I_r, P w ~ w),

so every kernel E[z(x, r)[f] z(x', r')[f']] is one of the "orbit blocks"

    B[q][s][s'](x, x') = K_{f, ρ_q f'}((x, s), (x', s')),   q < q₀,  s, s' < p,

with x' rotated: K_f,f'((x, p·m+s), (x', p·m'+s')) = B_{f, f'}[m − m'][s][s'](x, ρ_{m'−m}-rotated x').
A state holds the q₀ p² blocks instead of n² (4× fewer for C4, exactly the CNN kernels of
f against the four rotations of f'). ``orbit = 1`` keeps all n² blocks unreduced
(p = n): the direct recursion of docs/mathematics.md §4, used to check the reduction.

Layout of ``nngp`` and ``ntk``: (b1, b2, q₀, p, p, *G) with G = (h, h, w, w) for feature
maps — the two grids interleaved, (x_i, x'_i, x_j, x'_j), so that the diagonal sums of
convolutions run over contiguous memory — and G = () for vectors; b1 × b2 image pairs
(broadcast: cross pairs are (b1, b2), self pairs (i, i) are stored as (N, 1)). The
nonlinearities need the self-variances K_{f,f}((x, s), (x, s)) of both images: ``var1``
(b1, ·, p, h, w) and ``var2`` (·, b2, q₀, p, h, w), the latter rotated by each ρ_q. They are
set by the network from the self-pair states.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
from torch import Tensor


class Buffers:
    """Large output tensors kept between chunks of image pairs, one per (layer, role).

    Each chunk runs the same layers on tensors of the same shapes; reusing their memory
    instead of allocating it anew saves the page faults of fresh allocations, which cost
    as much as the arithmetic on them. A buffer is reused only by the same layer and role,
    whose previous output is no longer alive by then.
    """

    def __init__(self) -> None:
        self._buffers: dict[tuple[int, str], Tensor] = {}

    def get(self, layer: int, role: str, shape: tuple[int, ...], like: Tensor, *, zeros: bool = False) -> Tensor:
        """An uninitialised (``zeros``: zero when new) tensor of ``shape`` with ``like``'s dtype/device."""
        key = (layer, role)
        buf = self._buffers.get(key)
        if buf is None or buf.shape != shape or buf.dtype != like.dtype or buf.device != like.device:
            buf = like.new_zeros(shape) if zeros else like.new_empty(shape)
            self._buffers[key] = buf
        return buf


@dataclass(frozen=True)
class InputPair:
    """Raw images of the pairs: x1 (b1, 1, C, H, W) and x2 (1, b2, C, H, W) or (N, 1, ...) twice."""

    x1: Tensor
    x2: Tensor
    orbit: int
    buffers: Buffers | None = None

    def empty(self, role: str, shape: tuple[int, ...]) -> Tensor:
        """An output tensor for the first layer (from ``buffers`` when set)."""
        if self.buffers is None:
            return self.x1.new_empty(shape)
        return self.buffers.get(0, role, shape, self.x1)


def rotate_sites(x: Tensor, steps: int, orbit: int, dims: tuple[int, int] | None = (-2, -1)) -> Tensor:
    """Rotate the grid (dimensions ``dims``; None: no grid) of ``x`` by ``steps`` × 2π/orbit."""
    if dims is None or steps % orbit == 0:
        return x
    return torch.rot90(x, (4 // orbit) * steps, dims=dims)


@dataclass(frozen=True)
class KernelState:
    """NNGP / NTK orbit blocks of one layer for b1 × b2 image pairs (see module docstring)."""

    nngp: Tensor
    ntk: Tensor | None
    orbit: int
    spatial: tuple[int, ...]
    var1: Tensor | None = None
    var2: Tensor | None = None
    buffers: Buffers | None = None
    layer: int = 0

    def empty(self, role: str, shape: tuple[int, ...], *, zeros: bool = False) -> Tensor:
        """An output tensor of the layer applied to this state (reused from ``buffers`` when set).

        ``zeros``: zero-filled when newly made (a reused one keeps what the same layer and
        role last wrote, e.g. the zero border of a padded copy).
        """
        if self.buffers is None:
            return self.nngp.new_zeros(shape) if zeros else self.nngp.new_empty(shape)
        return self.buffers.get(self.layer, role, tuple(shape), self.nngp, zeros=zeros)

    @property
    def rotations(self) -> int:
        """p: rotations per orbit block."""
        return self.nngp.shape[3]

    @property
    def n(self) -> int:
        """Order n = q₀·p of the rotation group of the features."""
        return self.orbit * self.rotations

    @property
    def grid_dims(self) -> tuple[int, ...]:
        """Tensor dimensions of the interleaved grids (x_i, x'_i, x_j, x'_j); () for vectors."""
        return (5, 6, 7, 8) if self.spatial else ()

    def with_(self, **changes) -> "KernelState":
        return replace(self, **changes)

    def with_variances(self, var1: Tensor, var2: Tensor) -> "KernelState":
        """Attach self-variances var1 (b1, ·, p, *S) and var2 (·, b2, p, *S) (unrotated)."""
        dims = (-2, -1) if self.spatial else None
        rotated = torch.stack([rotate_sites(var2, q, self.orbit, dims) for q in range(self.orbit)], dim=2)
        return replace(self, var1=var1, var2=rotated)

    def variance_factors(self) -> tuple[Tensor, Tensor]:
        """var1, var2 as views that broadcast against ``nngp``: K((x,s),(x,s)), K((x',s'),(x',s'))."""
        v1, v2 = self.var1, self.var2
        if not self.spatial:
            return v1.reshape(*v1.shape[:2], 1, v1.shape[2], 1), v2.reshape(*v2.shape[:3], 1, v2.shape[3])
        b, p, h, w = v1.shape[:2], *v1.shape[2:]
        v1 = v1.reshape(*b, 1, p, 1, h, 1, w, 1)
        v2 = v2.reshape(*v2.shape[:3], 1, p, 1, h, 1, w)
        return v1, v2

    def diagonal(self) -> Tensor:
        """Self-variances (N, 1, p, *S) of a self-pair state (pairs (i, i) stored as (N, 1))."""
        n, p = self.nngp.shape[0], self.rotations
        block = self.nngp[:, 0, 0]
        if self.spatial:
            h, w = self.spatial
            block = block.permute(0, 1, 3, 5, 2, 4, 6).reshape(n, p * h * w, p * h * w)
        return block.diagonal(dim1=-2, dim2=-1).reshape(n, 1, p, *self.spatial).clone()
