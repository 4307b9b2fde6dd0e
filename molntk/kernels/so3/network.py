"""Composing SO(3) layers (like neural-tangents' ``serial``) into kernels and finite nets.

    net = serial(Lift(6), Nonlinearity("erf"), GroupConv(3), Nonlinearity("erf"),
                 GroupConv(3), Pool(), Dense())
    k = net.kernel(x1, x2, grid=SO3Grid(4), mode="fast")     # PooledKernel, (n1, n2)
    f = net.finite(in_channels=C, width=256, grid=SO3Grid(4)) # torch module (B, C, L²) → (B,)

The kernel of ``finite`` at width → ∞ is ``kernel(..., mode="exact")`` on the same grid.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from molntk.kernels.so3.context import Discretisation
from molntk.kernels.so3.conv import GroupConv
from molntk.kernels.so3.dense import Dense
from molntk.kernels.so3.grids import SO3Grid
from molntk.kernels.so3.lift import Lift
from molntk.kernels.so3.nonlinearity import Nonlinearity
from molntk.kernels.so3.pool import Pool
from molntk.kernels.so3.state import InputPair, PooledKernel

Layer = Lift | GroupConv | Dense | Nonlinearity | Pool


@dataclass(frozen=True)
class SO3Network:
    """A serial SO(3) network: Lift first, one Pool, a Dense readout last."""

    layers: tuple[Layer, ...]

    def __post_init__(self) -> None:
        layers = self.layers
        if not layers or not isinstance(layers[0], Lift):
            raise ValueError("an SO(3) network starts with Lift")
        pools = [i for i, layer in enumerate(layers) if isinstance(layer, Pool)]
        if len(pools) != 1:
            raise ValueError(f"an SO(3) network has exactly one Pool, got {len(pools)}")
        if any(isinstance(layer, (GroupConv, Lift)) for layer in layers[pools[0] :]) or any(
            isinstance(layer, Lift) for layer in layers[1:]
        ):
            raise ValueError("Lift comes first and group convolutions come before Pool")
        if not isinstance(layers[-1], Dense):
            raise ValueError("an SO(3) network ends with a Dense readout")

    @property
    def band_limit(self) -> int:
        """Largest band limit of any layer (the Wigner tables needed)."""
        return max(layer.band_limit for layer in self.layers if isinstance(layer, (Lift, GroupConv)))

    def discretisation(self, grid: SO3Grid, mode: str, dtype=torch.float64, device="cpu") -> Discretisation:
        return Discretisation(grid=grid, band_limit=self.band_limit, mode=mode, dtype=dtype, device=device)

    def kernel(
        self,
        x1: Tensor,
        x2: Tensor | None = None,
        *,
        ctx: Discretisation,
        ntk: bool = True,
    ) -> PooledKernel:
        """NNGP and (if ``ntk``) NTK between coefficient sets x1 (n1, C, L²) and x2 (n2, C, L²)."""
        same = x2 is None
        x1 = x1.to(dtype=ctx.dtype, device=ctx.device)
        x2 = x1 if same else x2.to(dtype=ctx.dtype, device=ctx.device)
        if x1.shape[1:] != x2.shape[1:]:
            raise ValueError(f"inputs differ in channels/coefficients: {tuple(x1.shape)} vs {tuple(x2.shape)}")
        state = InputPair(x1, x2, same=same)
        layers = list(self.layers)
        while layers:
            layer = layers.pop(0)
            if isinstance(layer, GroupConv) and layers and isinstance(layers[0], Pool) and layer.pools_exactly(ctx):
                state = layer.kernel_then_pool(state, ctx, ntk=ntk)
                layers.pop(0)
            else:
                state = layer.kernel(state, ctx, ntk=ntk)
        return state

    def finite(self, in_channels: int, width: int, ctx: Discretisation) -> nn.Module:
        """The finite network at ``width`` on the nodes of ``ctx.grid`` (scalar output)."""
        modules, in_width = [], in_channels
        for i, layer in enumerate(self.layers):
            out_width = 1 if i == len(self.layers) - 1 else (width if isinstance(layer, (Lift, GroupConv, Dense)) else in_width)
            modules.append(layer.finite(in_width, out_width, ctx))
            in_width = out_width
        return FiniteSO3Network(modules)


def serial(*layers: Layer) -> SO3Network:
    """Compose layers in order (neural-tangents style)."""
    return SO3Network(tuple(layers))


class FiniteSO3Network(nn.Module):
    """Finite twin of an :class:`SO3Network`: (B, C, L²) → (B,)."""

    def __init__(self, modules: list[nn.Module]) -> None:
        super().__init__()
        self.layers = nn.ModuleList(modules)

    def forward(self, x: Tensor) -> Tensor:
        for layer in self.layers:
            x = layer(x)
        return x[:, 0]
