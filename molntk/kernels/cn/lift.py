"""Lifting layer Z² → C_n ⋉ R²: one k×k filter per channel pair, rotated by 2πr/n.

Finite network (NTK parametrisation, i.i.d. N(0, 1) weights w and biases b):

    z_o(x, r) = σ_w/√(C k²) Σ_c Σ_u (I_r w_oc)(u) f_c(x + u) + σ_b b_o,

with I_r the filter rotation of :mod:`molntk.kernels.cn.rotations`. Kernel (the rule):

    K((x, r), (x', r')) = σ_w²/(C k²) Σ_{u,u'} A_{r,r'}(u, u') ⟨f(x + u), f'(x' + u')⟩ + σ_b²,
    A_{r,r'} = I_r I_r'ᵀ,     Θ = K.

Computed as one GEMM: with rotated patches p̃_r(x) = I_rᵀ patch(x) ∈ R^{C k²},
K = σ_w²/(C k²) ⟨p̃_r(x), p̃'_r'(x')⟩ + σ_b². In the orbit-block form the second image is
rotated instead of the filters: block q pairs f with ρ_q f'. n = 1 is an ordinary
convolution.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from molntk.kernels.cn.filters import FilterLayer, pad_images
from molntk.kernels.cn.rotations import filter_rotations
from molntk.kernels.cn.state import InputPair, KernelState, rotate_sites


@dataclass(frozen=True)
class Lift(FilterLayer):
    """Lifting convolution Z² → C_n ⋉ R² (an ordinary convolution for n = 1)."""

    def _features(self, x: Tensor, rotations: Tensor) -> Tensor:
        """Scaled rotated patches σ_w/√(C k²) I_sᵀ patch(x) (+ a σ_b column), (B, p·L, C k² [+1])."""
        b, c = x.shape[:2]
        cols = F.unfold(pad_images(x, self.k, self.padding), self.k)
        cols = cols.reshape(b, c, self.k * self.k, -1)
        feats = torch.einsum("suv,bcul->bslcv", rotations, cols).reshape(b, -1, c * self.k * self.k)
        feats = feats * (self.sigma_w / math.sqrt(c * self.k * self.k))
        if self.sigma_b:
            feats = torch.cat([feats, feats.new_full((*feats.shape[:2], 1), self.sigma_b)], dim=-1)
        return feats

    def kernel_inputs(self, inputs: InputPair, ntk: bool) -> KernelState:
        """Orbit blocks K[q][s][s'](x, x') = K_{f, ρ_q f'}((x, s), (x', s')) of the lifting layer."""
        orbit = inputs.orbit
        p = self.n // orbit
        x1, x2 = inputs.x1, inputs.x2
        h, w = self.out_spatial(*x1.shape[-2:])
        rotations = filter_rotations(self.n, self.k, dtype=x1.dtype)[:p].to(x1.device)
        f1 = self._features(x1.flatten(0, 1), rotations).reshape(*x1.shape[:2], p * h * w, -1)
        turned = torch.stack([rotate_sites(x2, q, orbit) for q in range(orbit)], dim=2)
        f2 = self._features(turned.flatten(0, 2), rotations)
        f2 = f2.reshape(*x2.shape[:2], orbit * p * h * w, -1).transpose(-1, -2)
        b1, b2 = pair_shape(x1, x2)
        gram = torch.matmul(f1, f2, out=inputs.empty("gram", (b1, b2, p * h * w, orbit * p * h * w)))
        gram = gram.reshape(b1, b2, p, h, w, orbit, p, h, w).permute(0, 1, 5, 2, 6, 3, 7, 4, 8)
        k = inputs.empty("nngp", tuple(gram.shape)).copy_(gram)
        return KernelState(nngp=k, ntk=k if ntk else None, orbit=orbit, spatial=(h, w))

    def finite(
        self, in_shape: tuple[int, ...], width: int, generator: torch.Generator, dtype: torch.dtype
    ) -> tuple[nn.Module, tuple[int, ...]]:
        """Finite twin: input images (C, H, W) → features (width, n, H', W')."""
        c, h, w = in_shape
        return LiftModule(c, width, self, generator, dtype), (width, self.n, *self.out_spatial(h, w))


def pair_shape(x1: Tensor, x2: Tensor) -> tuple[int, int]:
    """The broadcast pair batch (b1, b2) of two input tensors with leading pair dims."""
    return tuple(torch.broadcast_shapes(x1.shape[:2], x2.shape[:2]))


class LiftModule(nn.Module):
    """z (N, width, n, H', W') = σ_w/√(C k²) conv(f, I_r w) + σ_b b."""

    def __init__(self, c: int, width: int, layer: Lift, generator: torch.Generator, dtype: torch.dtype):
        super().__init__()
        k = layer.k
        self.layer = layer
        self.weight = nn.Parameter(torch.randn(width, c, k, k, generator=generator, dtype=dtype))
        self.bias = nn.Parameter(torch.randn(width, generator=generator, dtype=dtype))
        self.register_buffer("rotations", filter_rotations(layer.n, k, dtype=dtype))

    def forward(self, x: Tensor) -> Tensor:
        layer, (width, c, k, _) = self.layer, self.weight.shape
        filters = torch.einsum("ruv,oiv->oriu", self.rotations, self.weight.flatten(2))
        y = F.conv2d(pad_images(x, k, layer.padding), filters.reshape(width * layer.n, c, k, k))
        y = y.reshape(x.shape[0], width, layer.n, *y.shape[-2:]) * (layer.sigma_w / math.sqrt(c * k * k))
        return y + layer.sigma_b * self.bias.reshape(1, width, 1, 1, 1)
