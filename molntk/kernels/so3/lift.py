"""Lifting layer S² → SO(3): kernel rule and finite-width twin.

Finite layer (width n, C input channels, band limit L, NTK parametrisation): filters
κ_jc(x) = Σ_{l<L} W^l_jcᵀ Y^l(x) with W ~ N(0, 1), and

    z_j(g) = σ_w/√C · Σ_c ∫ κ_jc(g⁻¹x) f_c(x) dx + σ_b b_j
           = σ_w/√C · Σ_c Σ_{l<L} W^l_jcᵀ D^l(g)ᵀ f̂^l_c + σ_b b_j.

Kernel (exact at every pair of points, no quadrature):

    K(g, g') = σ_w²/C · Σ_{l<L} ⟨M^l, D^l(g g'⁻¹)⟩ + σ_b²,   M^l_{mm'} = Σ_c f̂^l_{c,m} f̂'^l_{c,m'},

a function of u = g g'⁻¹ only; Θ = K (the layer's own parameters only). Its Haar mean and
the Haar mean of its square are closed forms in the moments (Schur orthogonality of the real
D^l, :meth:`Lift.haar_mean_square`), which a quadratic nonlinearity followed by Pool needs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from molntk.kernels.so3.context import Discretisation
from molntk.kernels.so3.state import GroupKernel, InputPair
from molntk.kernels.so3.wigner import coeff_slices, degree_weights


def lift_moments(a: Tensor, b: Tensor, band_limit: int) -> Tensor:
    """M^l_{ij,mm'} = Σ_c a[i,c,(l,m)] b[j,c,(l,m')], flattened over l<L: shape (n1, n2, L3).

    One GEMM per l over the channel axis, (n1·(2l+1), C) @ (C, n2·(2l+1)), each copied once
    into its slot of the output.
    """
    n1, n2, channels = a.shape[0], b.shape[0], a.shape[1]
    out = a.new_empty(n1, n2, sum((2 * l + 1) ** 2 for l in range(band_limit)))
    start = 0
    for s in coeff_slices(band_limit):
        width = s.stop - s.start
        left = a[..., s].transpose(1, 2).reshape(n1 * width, channels)
        right = b[..., s].permute(1, 0, 2).reshape(channels, n2 * width)
        block = out[..., start : start + width * width].unflatten(-1, (width, width))
        block.copy_((left @ right).view(n1, width, n2, width).permute(0, 2, 1, 3))
        start += width * width
    return out


def self_lift_moments(a: Tensor, band_limit: int) -> Tensor:
    """Diagonal of :func:`lift_moments` (a with itself): shape (n, L3)."""
    parts = [torch.einsum("icm,icn->imn", a[..., s], a[..., s]).flatten(1) for s in coeff_slices(band_limit)]
    return torch.cat(parts, dim=-1)


@dataclass(frozen=True)
class Lift:
    """Lifting convolution S² → SO(3) with band-limited white-noise filters (l < band_limit)."""

    band_limit: int
    sigma_w: float = 1.0
    sigma_b: float = 0.0

    def cross(self, x1: Tensor, x2: Tensor, ctx: Discretisation) -> Tensor:
        """K(u) for all pairs on the measure's support + identity: (n1, n2, K+1), one GEMM
        (n1·n2, L3) @ (L3, K+1) after the moments, scale and bias folded into it."""
        _check_band(x1, self.band_limit)
        moments = lift_moments(x1, x2, self.band_limit)
        flat = moments.view(-1, moments.shape[-1])
        return self._synthesise(flat, x1.shape[1], ctx).view(x1.shape[0], x2.shape[0], -1)

    def cross_gradients(self, grad: Tensor, x2: Tensor, ctx: Discretisation, channels: int, *, summed: bool = False) -> Tensor:
        """Per-pair gradients of the cross kernel with respect to the first input, given the
        cotangents ``grad`` (n1, n2, K+1) of K(u) of each pair (i, j):

            G[j, i, (l, m), c] = Σ_{m'} ∂M^l_{ij,mm'} x2[j, c, (l, m')],   ∂M = σ_w²/C · grad · D(u)

        (the synthesis transposed, one GEMM, then the moments' bilinear form: one batched GEMM
        per l over the pairs of each j), shape (n2, n1, L², C) for inputs with ``channels`` = C
        channels: reference-major and channel-last, the layout of its contraction. ``summed``:
        Σ_j G[j] instead, (1, n1, L², C), one GEMM per l over (j, m')."""
        n1, n2, size = grad.shape
        table = ctx.measure.table(self.band_limit, ctx.dtype, ctx.device)  # (K+1, L3)
        moments = (table.T * (self.sigma_w**2 / channels)) @ grad.reshape(-1, size).T  # (L3, n1·n2): the faster GEMM layout
        moments = moments.view(-1, n1, n2).permute(2, 1, 0)  # (n2, n1, L3)
        out = grad.new_empty(1 if summed else n2, n1, self.band_limit**2, x2.shape[1])
        start = 0
        for s in coeff_slices(self.band_limit):
            width = s.stop - s.start
            block = moments[..., start : start + width * width].unflatten(-1, (width, width))  # (j, i, m, m')
            if summed:  # (i m, j m') @ (j m', c)
                part = block.permute(1, 2, 0, 3).reshape(n1 * width, n2 * width) @ x2[..., s].transpose(1, 2).reshape(n2 * width, -1)
            else:
                part = torch.bmm(block.reshape(n2, n1 * width, width), x2[..., s].transpose(1, 2))
            out[:, :, s].copy_(part.view(-1, n1, width, x2.shape[1]))
            start += width * width
        return out

    def haar_mean_square(self, moments: Tensor, channels: int) -> Tensor:
        """∫ K(u)² du over the normalised Haar measure, exactly, for rows of flattened moments
        (..., L3) of inputs with C = ``channels`` channels. With a = σ_w²/C, b = σ_b² and
        ∫ D^l_{mn}(u) D^{l'}_{m'n'}(u) du = δ_{ll'} δ_{mm'} δ_{nn'} / (2l+1), ∫ D^l(u) du = δ_{l0}:

            ∫ K(u)² du = a² Σ_{l<L} ‖M^l‖²_F / (2l+1) + 2ab M^0 + b².

        ‖M^l‖²_F = Σ_{cc'} (f̂^l_c · f̂^l_{c'}) (f̂'^l_c · f̂'^l_{c'}) is the power spectrum's inner
        product, so no quadrature is involved (and no grid error)."""
        a, b = self.sigma_w**2 / channels, self.sigma_b**2
        inverse_degree = degree_weights(self.band_limit, dtype=moments.dtype, device=moments.device).reciprocal_()
        return (moments * moments) @ (inverse_degree * a * a) + (2 * a * b) * moments[..., 0] + b * b

    def self_kernel(self, x: Tensor, ctx: Discretisation) -> Tensor:
        """ψ^{ff}(u) of every input: (n, K+1)."""
        _check_band(x, self.band_limit)
        return self._synthesise(self_lift_moments(x, self.band_limit), x.shape[1], ctx)

    def _synthesise(self, moments: Tensor, channels: int, ctx: Discretisation) -> Tensor:
        """σ_w²/C · Σ_l ⟨M^l, D^l(u_k)⟩ + σ_b² for rows of flattened moments (P, L3) → (P, K+1)."""
        table = ctx.measure.table(self.band_limit, ctx.dtype, ctx.device)  # (K+1, L3)
        bias = moments.new_full((), self.sigma_b**2)  # filled on the device: no copy from the host
        return torch.addmm(bias, moments, table.T, alpha=self.sigma_w**2 / channels)

    def kernel(self, state: InputPair, ctx: Discretisation, *, ntk: bool) -> GroupKernel:
        """Cross and self kernels of the inputs; Θ = K (``ntk`` is the same tensor as ``nngp``)."""
        if not isinstance(state, InputPair):
            raise TypeError("Lift must be the first layer of an SO(3) network")
        nngp = self.cross(state.x1, state.x2, ctx)
        self1 = self.self_kernel(state.x1, ctx)
        self2 = self1 if state.same else self.self_kernel(state.x2, ctx)
        return GroupKernel(nngp=nngp, ntk=nngp if ntk else None, self1=self1, self2=self2)

    def finite(self, in_width: int, width: int, ctx: Discretisation) -> nn.Module:
        return LiftModule(self, in_width, width, ctx)


def _check_band(x: Tensor, band_limit: int) -> None:
    if x.ndim != 3 or x.shape[-1] < band_limit**2:
        raise ValueError(
            f"Lift(band_limit={band_limit}) needs coefficients of shape (n, C, >= {band_limit**2}), got {tuple(x.shape)}"
        )


class LiftModule(nn.Module):
    """Finite lifting layer on the grid nodes: (B, C, L²) → (B, n, N)."""

    def __init__(self, layer: Lift, in_width: int, width: int, ctx: Discretisation) -> None:
        super().__init__()
        self.layer, self.in_width = layer, in_width
        self.blocks = ctx.node_blocks[: layer.band_limit]
        opts = dict(dtype=ctx.dtype, device=ctx.device)
        self.weights = nn.ParameterList(
            [nn.Parameter(torch.randn(width, in_width, 2 * l + 1, **opts)) for l in range(layer.band_limit)]
        )
        self.bias = nn.Parameter(torch.randn(width, **opts))

    def forward(self, x: Tensor) -> Tensor:
        _check_band(x, self.layer.band_limit)
        out = 0
        for d, w, s in zip(self.blocks, self.weights, coeff_slices(self.layer.band_limit)):
            rotated = torch.einsum("apm,bcp->bacm", d, x[..., s])  # D^l(g_a)ᵀ f̂^l_c
            out = out + torch.einsum("bacm,jcm->bja", rotated, w)
        return self.layer.sigma_w / math.sqrt(self.in_width) * out + self.layer.sigma_b * self.bias[None, :, None]
