"""Group convolution C_n ⋉ R² → C_n ⋉ R²: filters on (offset, relative rotation).

Finite network (NTK parametrisation, i.i.d. N(0, 1) weights w_{oct} and biases b_o):

    z_o(x, r) = σ_w/√(C n k²) Σ_c Σ_t Σ_u (I_r w_{oct})(u) y_c(x + u, r + t) + σ_b b_o.

Kernel rule, with K̃ the covariance of the inputs y and A_{r,r'} = I_r I_r'ᵀ:

    K'((x, r), (x', r')) = σ_w²/(n k²) Σ_t Σ_{u,u'} A_{r,r'}(u, u') K̃((x+u, r+t), (x'+u', r'+t)) + σ_b²,
    Θ'                   = K' + σ_w²/(n k²) Σ_t Σ_{u,u'} A_{r,r'}(u, u') Θ̃((x+u, r+t), (x'+u', r'+t)).

On orbit blocks (:mod:`molntk.kernels.cn.state`) the sum over t is a sum over blocks:
for s, s' < p and t = τ + p·j, the pair (s + τ, s' + τ) = (p·m + σ, p·m' + σ') is block
[q − d][σ][σ'] with its second grid rotated by ρ_d, d = m' − m, the same for all q₀ values
of j. So block [q][s][s'] of K' is A_{s,s'} applied to q₀ Σ_{τ<p} (those blocks). For
p = 1 (C1, C2, C4) that is q₀ K̃[q] itself and A = identity: each orbit block is an
ordinary CNN layer, Σ_u K̃(x + u, x' + u), done as a separable box sum.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from molntk.kernels.cn.filters import FilterLayer, pad_images
from molntk.kernels.cn.rotations import filter_rotations
from molntk.kernels.cn.spatial import box_sum_into, correlate_into, pad_pairs, padded_shape
from molntk.kernels.cn.state import KernelState, rotate_sites


@lru_cache(maxsize=None)
def block_sources(n: int, orbit: int) -> dict[tuple[int, int], tuple[tuple[int, int, int], ...]]:
    """For each output block (s, s'): the input blocks (σ, σ', d) summed over τ < p."""
    p = n // orbit
    table = {}
    for s in range(p):
        for s2 in range(p):
            terms = []
            for tau in range(p):
                m, sigma = divmod((s + tau) % n, p)
                m2, sigma2 = divmod((s2 + tau) % n, p)
                terms.append((sigma, sigma2, (m2 - m) % orbit))
            table[s, s2] = tuple(terms)
    return table


@dataclass(frozen=True)
class GroupConv(FilterLayer):
    """Group convolution on C_n ⋉ R² (an ordinary convolution for n = 1)."""

    def kernel(self, state: KernelState) -> KernelState:
        """(K̃, Θ̃) of the previous nonlinearity → (K', Θ') of this layer (consumes ``state``)."""
        if len(state.spatial) != 2:
            raise ValueError("GroupConv needs feature maps; it cannot follow a pooling layer")
        if state.n != self.n:
            raise ValueError(f"GroupConv(n={self.n}) follows features with n = {state.n}")
        alpha = self.sigma_w**2 / (self.n * self.k**2) * state.orbit
        beta = self.sigma_b**2
        tensors = [state.nngp]
        if state.ntk is not None:
            tensors.append(state.ntk.clone() if state.ntk is state.nngp else state.ntk)
        if state.rotations == 1:
            nngp, ntk = self._cnn_blocks(state, tensors, alpha, beta)
        else:
            nngp, ntk = self._mixed_blocks(state, tensors, alpha, beta)
        spatial = self.out_spatial(*state.spatial)
        return KernelState(nngp=nngp, ntk=ntk, orbit=state.orbit, spatial=spatial)

    def _padded(self, state: KernelState, c: Tensor, dims: tuple[int, ...], role: str) -> Tensor:
        if self.padding == "valid":
            return c
        shape = padded_shape(tuple(c.shape), dims, self.k, self.padding)
        return pad_pairs(c, dims, self.k, self.padding, state.empty(role, shape, zeros=True))

    def _cnn_blocks(self, state: KernelState, tensors: list[Tensor], alpha: float, beta: float):
        """p = 1: every orbit block is a CNN layer, α Σ_u K̃(x + u, x' + u) + β."""
        h, w = self.out_spatial(*state.spatial)
        outs = []
        for j, c in enumerate(tensors):
            padded = self._padded(state, c, state.grid_dims, f"pad{j}")
            partial = state.empty(f"partial{j}", (*c.shape[:5], h, h, padded.shape[-2], padded.shape[-1]))
            out = box_sum_into(state.empty(f"out{j}", (*c.shape[:5], h, h, w, w)), padded, self.k, partial)
            out.mul_(alpha)
            outs.append(out.add_(beta) if j == 0 else out.add_(outs[0]))  # Θ' = K' + α Σ Θ̃
        return outs[0], outs[1] if len(outs) > 1 else None

    def _mixed_blocks(self, state: KernelState, tensors: list[Tensor], alpha: float, beta: float):
        """p > 1: block [q][s][s'] = α A_{s,s'} ⋆ Σ_τ (rotated input blocks) + β."""
        k, orbit, p = self.k, state.orbit, state.rotations
        rotations = filter_rotations(self.n, k)[:p]
        h, w = self.out_spatial(*state.spatial)
        outs = [state.empty(f"out{j}", (*c.shape[:2], orbit, p, p, h, h, w, w)) for j, c in enumerate(tensors)]
        for (s, s2), terms in block_sources(self.n, orbit).items():
            a = rotations[s] @ rotations[s2].T
            taps = [(i, j, float(a[i, j])) for i, j in torch.nonzero(a).tolist()]
            for q in range(orbit):
                for j, (c, out) in enumerate(zip(tensors, outs)):
                    summed = state.empty(f"sum{j}", (*c.shape[:2], *c.shape[5:]))
                    for n, (sigma, sigma2, d) in enumerate(terms):
                        block = rotate_sites(c[:, :, (q - d) % orbit, sigma, sigma2], d, orbit, dims=(3, 5))
                        if n == 0:
                            summed.copy_(block)
                        else:
                            summed.add_(block)
                    padded = self._padded(state, summed, (2, 3, 4, 5), f"pad{j}")
                    correlate_into(out[:, :, q, s, s2], padded, taps, k)
        nngp = outs[0].mul_(alpha).add_(beta)
        ntk = outs[1].mul_(alpha).add_(nngp) if len(outs) > 1 else None
        return nngp, ntk

    def finite(
        self, in_shape: tuple[int, ...], width: int, generator: torch.Generator, dtype: torch.dtype
    ) -> tuple[nn.Module, tuple[int, ...]]:
        """Finite twin: features (C, n, H, W) → (width, n, H', W')."""
        c, n, h, w = in_shape
        if n != self.n:
            raise ValueError(f"GroupConv(n={self.n}) follows features with n = {n}")
        out_hw = self.out_spatial(h, w)
        return GroupConvModule(c, width, self, generator, dtype), (width, n, *out_hw)


class GroupConvModule(nn.Module):
    """z (N, width, n, H', W') from y (N, C, n, H, W); output rotation r reads r + t with I_r w_t."""

    def __init__(self, c: int, width: int, layer: GroupConv, generator: torch.Generator, dtype: torch.dtype):
        super().__init__()
        n, k = layer.n, layer.k
        self.layer = layer
        self.weight = nn.Parameter(torch.randn(width, c, n, k, k, generator=generator, dtype=dtype))
        self.bias = nn.Parameter(torch.randn(width, generator=generator, dtype=dtype))
        self.register_buffer("rotations", filter_rotations(n, k, dtype=dtype))
        r, a = torch.meshgrid(torch.arange(n), torch.arange(n), indexing="ij")
        self.register_buffer("relative", (a - r) % n)

    def forward(self, y: Tensor) -> Tensor:
        layer, (width, c, n, k, _) = self.layer, self.weight.shape
        w = self.weight.flatten(3)[:, :, self.relative]  # (width, C, n_r, n_a, k²): w_{t = a − r}
        filters = torch.einsum("ruv,oirav->oriau", self.rotations, w).reshape(width * n, c * n, k, k)
        x = pad_images(y.flatten(1, 2), k, layer.padding)
        z = F.conv2d(x, filters)
        z = z.reshape(y.shape[0], width, n, *z.shape[-2:]) * (layer.sigma_w / math.sqrt(c * n * k * k))
        return z + layer.sigma_b * self.bias.reshape(1, width, 1, 1, 1)
