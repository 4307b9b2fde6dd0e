"""Dense layer on the channels (a 1×1 convolution on feature maps, shared over rotations).

Finite network: z_o = σ_w/√C Σ_c w_oc y_c + σ_b b_o (NTK parametrisation, N(0, 1) w, b).
Rule, site pair by site pair:  K' = σ_w² K̃ + σ_b²,   Θ' = K' + σ_w² Θ̃.
``out`` fixes the number of output units (the readout); None means the network width.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from molntk.kernels.cn.state import KernelState


@dataclass(frozen=True)
class Dense:
    """Fully connected layer on the channel dimension."""

    out: int | None = None
    sigma_w: float = 1.0
    sigma_b: float = 0.0

    def kernel(self, state: KernelState) -> KernelState:
        nngp = state.nngp * self.sigma_w**2 + self.sigma_b**2
        ntk = None if state.ntk is None else torch.add(nngp, state.ntk, alpha=self.sigma_w**2)
        return KernelState(nngp=nngp, ntk=ntk, orbit=state.orbit, spatial=state.spatial)

    def finite(
        self, in_shape: tuple[int, ...], width: int, generator: torch.Generator, dtype: torch.dtype
    ) -> tuple[nn.Module, tuple[int, ...]]:
        out = self.out if self.out is not None else width
        return DenseModule(in_shape[0], out, self, generator, dtype), (out, *in_shape[1:])


class DenseModule(nn.Module):
    """z (N, out, ...) = σ_w/√C w y + σ_b b on the channel dimension 1."""

    def __init__(self, c: int, out: int, layer: Dense, generator: torch.Generator, dtype: torch.dtype):
        super().__init__()
        self.layer = layer
        self.weight = nn.Parameter(torch.randn(out, c, generator=generator, dtype=dtype))
        self.bias = nn.Parameter(torch.randn(out, generator=generator, dtype=dtype))

    def forward(self, y: Tensor) -> Tensor:
        z = torch.einsum("oc,nc...->no...", self.weight, y) * (self.layer.sigma_w / math.sqrt(y.shape[1]))
        return z + self.layer.sigma_b * self.bias.reshape(1, -1, *([1] * (y.ndim - 2)))
