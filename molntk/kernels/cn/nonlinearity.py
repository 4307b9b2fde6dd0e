"""Pointwise nonlinearity φ on every site (dual activations of :mod:`molntk.kernels.activations`).

Rule, site pair by site pair, with v = K(a, a), v' = K(a', a') the self-variances:

    K̃(a, a') = F_φ(K(a, a'); v, v'),     Θ̃(a, a') = Θ(a, a') · Ḟ_φ(K(a, a'); v, v').

ReLU has an in-place, slab-wise evaluation of the same arc-cosine formulas (several times
faster than the general one on the large site-pair tensors of image kernels, see
:mod:`molntk.kernels.cn.slabs`); the test suite checks it against ``activations.py``.
Rules consume their input state: its tensors may be overwritten.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from molntk.kernels.activations import get_activation, inverse_sqrt
from molntk.kernels.cn.slabs import for_each_slab, leading_dims
from molntk.kernels.cn.state import KernelState


def relu_slab(xp, k, theta, r1, r2, g1, g2, out_theta, cos, angle, scratch) -> None:
    """In place: k ← g1 g2 (sin ψ + (π − ψ) cos ψ), out_theta ← Θ (π − ψ)/(2π), cos ψ = k r1 r2.

    With r = v^{-1/2} and g1 g2 = √(v v')/(2π). π − ψ = π/2 + arcsin(cos ψ), and
    sin² ψ = (1 − cos ψ)(1 + cos ψ), which keeps full relative accuracy near cos ψ = 1.
    ``theta`` may be ``k`` itself (read before ``k`` is overwritten); ``out_theta`` None
    skips the NTK. ``cos``, ``angle``, ``scratch``: temporaries shaped like ``k``.
    """
    xp.multiply(k, r1, out=cos)
    xp.multiply(cos, r2, out=cos)
    xp.clip(cos, -1.0, 1.0, out=cos)
    xp.arcsin(cos, out=angle)
    xp.add(angle, math.pi / 2, out=angle)
    if out_theta is not None:
        xp.multiply(theta, angle, out=out_theta)
        xp.multiply(out_theta, 1 / (2 * math.pi), out=out_theta)
    xp.add(cos, 1.0, out=scratch)
    xp.multiply(cos, -1.0, out=k)
    xp.add(k, 1.0, out=k)
    xp.multiply(k, scratch, out=k)
    xp.sqrt(k, out=k)
    xp.multiply(angle, cos, out=scratch)
    xp.add(k, scratch, out=k)
    xp.multiply(k, g1, out=k)
    xp.multiply(k, g2, out=k)


def _relu_slab_without_ntk(xp, k, r1, r2, g1, g2, cos, angle, scratch) -> None:
    relu_slab(xp, k, k, r1, r2, g1, g2, None, cos, angle, scratch)


def relu_maps(
    k: Tensor, theta: Tensor | None, v1: Tensor, v2: Tensor, spare: Tensor | None = None
) -> tuple[Tensor, Tensor | None]:
    """ReLU duals, in place: K̃ = √(v v')/(2π) (sin ψ + (π − ψ) cos ψ) into ``k``,
    Θ̃ = Θ (π − ψ)/(2π) into ``theta`` — into ``spare`` (or a new tensor) if ``theta`` is ``k``
    — with cos ψ = K/√(v v')."""
    factors = [inverse_sqrt(v1), inverse_sqrt(v2), v1.sqrt() / (2 * math.pi), v2.sqrt()]
    if theta is None:
        for_each_slab(_relu_slab_without_ntk, [k, *factors], leading_dims(k.shape), scratch=3)
        return k, None
    out_theta = (torch.empty_like(k) if spare is None else spare) if theta is k else theta
    for_each_slab(relu_slab, [k, theta, *factors, out_theta], leading_dims(k.shape), scratch=3)
    return k, out_theta


@dataclass(frozen=True)
class Nonlinearity:
    """Pointwise nonlinearity by name (any of :data:`~molntk.kernels.activations.ACTIVATIONS`: ``relu``, ``erf``, ``quadratic``, …)."""

    name: str = "relu"

    def __post_init__(self) -> None:
        get_activation(self.name)

    def kernel(self, state: KernelState) -> KernelState:
        v1, v2 = state.variance_factors()
        if self.name == "relu":
            spare = state.empty("ntk", state.nngp.shape) if state.ntk is state.nngp else None
            nngp, ntk = relu_maps(state.nngp, state.ntk, v1, v2, spare)
        else:
            nngp, derivative = get_activation(self.name).dual(state.nngp, v1, v2)
            ntk = None if state.ntk is None else state.ntk * derivative
        return KernelState(nngp=nngp, ntk=ntk, orbit=state.orbit, spatial=state.spatial)

    def finite(
        self, in_shape: tuple[int, ...], width: int, generator: torch.Generator, dtype: torch.dtype
    ) -> tuple[nn.Module, tuple[int, ...]]:
        return NonlinearityModule(self.name), in_shape


class NonlinearityModule(nn.Module):
    """φ applied elementwise."""

    def __init__(self, name: str):
        super().__init__()
        self.name = name

    def forward(self, x: Tensor) -> Tensor:
        return get_activation(self.name).apply(x)
