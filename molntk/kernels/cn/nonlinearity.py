"""Pointwise nonlinearity φ on every site (dual activations of :mod:`molntk.kernels.activations`).

Rule, site pair by site pair, with v = K(a, a), v' = K(a', a') the self-variances:

    K̃(a, a') = F_φ(K(a, a'); v, v'),     Θ̃(a, a') = Θ(a, a') · Ḟ_φ(K(a, a'); v, v').

ReLU has an in-place evaluation of the same arc-cosine formulas (about 4× faster than the
general one on the large site-pair tensors of image kernels); the test suite checks it
against ``activations.py``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from molntk.kernels.activations import get_activation
from molntk.kernels.cn.state import KernelState


def _inverse_sqrt(v: Tensor) -> Tensor:
    """v^{-1/2}, and 0 where v = 0 (there the covariance is 0 too)."""
    return torch.where(v > 0, v, torch.ones_like(v)).rsqrt() * (v > 0)


def relu_maps(k: Tensor, theta: Tensor | None, v1: Tensor, v2: Tensor) -> tuple[Tensor, Tensor | None]:
    """ReLU duals: K̃ = √(v v')/(2π) (sin ψ + (π − ψ) cos ψ),  Θ̃ = Θ (π − ψ)/(2π),  cos ψ = K/√(v v')."""
    cos = k * _inverse_sqrt(v1)
    cos.mul_(_inverse_sqrt(v2)).clamp_(-1.0, 1.0)
    angle = torch.arccos(cos)
    nngp = torch.mul(cos, cos).neg_().add_(1.0).sqrt_()
    nngp.add_(cos, alpha=math.pi).addcmul_(angle, cos, value=-1.0)
    nngp.mul_(v1.sqrt() / (2 * math.pi)).mul_(v2.sqrt())
    del cos
    ntk = None
    if theta is not None:
        ntk = angle.mul_(-1.0 / (2 * math.pi)).add_(0.5).mul_(theta)
    return nngp, ntk


@dataclass(frozen=True)
class Activation:
    """Pointwise nonlinearity by name: ``relu``, ``erf``, ``quadratic``, ``identity``."""

    name: str = "relu"

    def __post_init__(self) -> None:
        get_activation(self.name)

    def kernel(self, state: KernelState) -> KernelState:
        v1, v2 = state.variance_factors()
        if self.name == "relu":
            nngp, ntk = relu_maps(state.nngp, state.ntk, v1, v2)
        else:
            nngp, derivative = get_activation(self.name).dual(state.nngp, v1, v2)
            ntk = None if state.ntk is None else state.ntk * derivative
        return KernelState(nngp=nngp, ntk=ntk, orbit=state.orbit, spatial=state.spatial)

    def module(self, shape: tuple[int, ...], width: int, generator: torch.Generator, dtype: torch.dtype):
        return ActivationModule(self.name), shape


class ActivationModule(nn.Module):
    """φ applied elementwise."""

    def __init__(self, name: str):
        super().__init__()
        self.name = name

    def forward(self, x: Tensor) -> Tensor:
        return get_activation(self.name).apply(x)
