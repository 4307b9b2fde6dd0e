"""Composing SO(3) layers (like neural-tangents' ``serial``) into kernels and finite nets.

For inputs given by spherical-harmonic coefficients x (n, C, L²):

>>> import torch
>>> from molntk.kernels.so3 import Dense, GroupConv, Lift, Nonlinearity, Pool, SO3Grid, serial
>>> net = serial(Lift(4), Nonlinearity("erf"), GroupConv(3), Nonlinearity("erf"), Pool(), Dense())
>>> x1, x2 = torch.randn(2, 5, 16, dtype=torch.float64), torch.randn(3, 5, 16, dtype=torch.float64)
>>> k = net.kernel(x1, x2, ctx=net.discretisation(SO3Grid(4), mode="fast"))  # PooledKernel
>>> tuple(k.nngp.shape), tuple(k.ntk.shape), tuple(k.self1.shape)
((2, 3), (2, 3), (2,))
>>> exact = net.discretisation(SO3Grid(4), mode="exact")
>>> f = net.finite(tuple(x1.shape[1:]), width=64, ctx=exact)  # torch module (B, C, L²) → (B,)
>>> tuple(f(x1).shape)
(2,)

The kernel of ``finite`` at width → ∞ is ``kernel(..., ctx=exact)`` on the same grid.

Evaluation: the nonlinearities need only the variances ψ^{ff}(e) of each input, so
``kernel`` first runs the recursion on each input with itself (:meth:`SO3Network.self_kernels`,
O(n) work, reusable across calls) and then the cross recursion on tiles of pairs
(:meth:`SO3Network.cross_kernel`), each layer's rule applied to whole tiles.

A network that starts ``Lift → [LayerNorm →] σ → Pool`` with σ(x) = x² + c (:data:`SQUARES`)
on a grid that integrates the lift kernel's square exactly has those steps in closed form
(:meth:`SO3Network.pools_in_closed_form`): the Haar mean of the square from the moments
(:meth:`Lift.haar_mean_square`), the same kernel to rounding without the group values.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from molntk.kernels.activations import check_gaussian_inputs, get_activation, inverse_sqrt
from molntk.kernels.result import PooledKernel
from molntk.kernels.so3.context import Discretisation
from molntk.kernels.so3.conv import GroupConv
from molntk.kernels.so3.dense import Dense
from molntk.kernels.so3.grids import SO3Grid
from molntk.kernels.so3.layernorm import LayerNorm
from molntk.kernels.so3.lift import Lift, lift_moments, self_lift_moments
from molntk.kernels.so3.nonlinearity import Nonlinearity
from molntk.kernels.so3.pool import Pool
from molntk.kernels.so3.state import Rule, pair_variances, self_variances, variance
from molntk.kernels.so3.wigner import n_wigner

Layer = Lift | GroupConv | Dense | Nonlinearity | LayerNorm | Pool

#: Group values (pairs × (K+1)) per tile of the cross-kernel recursion: 2¹⁹ float64 values
#: (4 MiB) keep a tile's temporaries in the CPU caches. Measured on the benchmark's
#: configurations (one thread): per-pair cost flat for 2¹⁶–2²⁰, while whole 256 × 256 × 109
#: blocks (2²³) cost 5× more per pair (docs/benchmarks.md "SO(3) kernel speed").
TILE_ELEMENTS = 2**19
#: The same on CUDA: 2²⁶ values (512 MiB per temporary), so that a tile's kernel launches
#: and its Python work are amortised over ~176,000 environment pairs. Measured on an H200
#: (2026-11-23, ``benchmarks/so3_cuda.py --part tiles``: sparse QM9 kernel of 4,000
#: molecules × 2,000 environments, Lebedev grid of 381 points, Triton dual activation):
#: 1.3 / 4.5 / 11.5 / 12.2 / 12.5e7 environment pairs/s at 2²¹ / 2²³ / 2²⁵ / 2²⁶ / 2²⁷
#: values per tile; 2²⁶ (GPU peak 1.4 GB) rather than 2²⁷ (+2 %, 1.9 GB).
TILE_ELEMENTS_CUDA = 2**26


def tile_elements(device: torch.device | str) -> int:
    """Group values per tile on ``device``: :data:`TILE_ELEMENTS_CUDA` on CUDA, else
    :data:`TILE_ELEMENTS`."""
    return TILE_ELEMENTS_CUDA if torch.device(device).type == "cuda" else TILE_ELEMENTS


#: Activations σ(x) = x² + c, whose duals are F = F(0; k11, k22) + 2 k12² and Ḟ = 4 k12.
SQUARES = ("quadratic", "hermite2")


def _even(n: int, at_most: int) -> int:
    """Part length that splits n into ⌈n / at_most⌉ parts of (nearly) equal length."""
    return -(-n // -(-n // at_most)) if n else 1


def tile_shape(n1: int, n2: int, pairs: int, *, square: bool) -> tuple[int, int]:
    """Rows and columns of the tiles that cover n1 × n2 pairs with at most ``pairs`` each.

    ``square`` (mirrored symmetric kernels): the same partition of both sides, parts of at
    most side = ⌊√pairs⌋. Otherwise a side shorter than that is taken whole and the other
    gets the rest of the budget (an environment block against a few hundred inducing
    environments is one row of tiles, not many narrow ones), and each side is split into
    parts of nearly equal length (no thin remainder tiles).
    """
    side = max(1, math.isqrt(pairs))
    if square:
        part = _even(max(n1, n2), side)
        return part, part
    if n1 <= side:
        return max(n1, 1), _even(n2, max(1, pairs // max(n1, 1)))
    cols = n2 if n2 <= side else _even(n2, side)
    return _even(n1, max(1, pairs // max(cols, 1))), max(cols, 1)


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
        check_gaussian_inputs(layers, (Lift, GroupConv, Dense), Nonlinearity)

    @property
    def band_limit(self) -> int:
        """Largest band limit of any layer (the Wigner tables needed)."""
        return max(layer.band_limit for layer in self.layers if isinstance(layer, (Lift, GroupConv)))

    def discretisation(self, grid: SO3Grid, mode: str, dtype=torch.float64, device="cpu") -> Discretisation:
        return Discretisation(grid=grid, band_limit=self.band_limit, mode=mode, dtype=dtype, device=device)

    def square_head(self) -> int:
        """Steps of :meth:`steps` that start the network as Lift → [LayerNorm →] σ → Pool with
        σ ∈ :data:`SQUARES` (2 with the norm, 1 without; 0 when it starts otherwise)."""
        layers = self.layers[1:]
        normed = int(bool(layers) and isinstance(layers[0], LayerNorm))
        head = layers[normed : normed + 2]
        squares = len(head) == 2 and isinstance(head[0], Nonlinearity) and head[0].name in SQUARES and isinstance(head[1], Pool)
        return 1 + normed if squares else 0

    def pools_in_closed_form(self, ctx: Discretisation) -> bool:
        """Whether the :meth:`square_head` steps are evaluated in closed form
        (:meth:`Lift.haar_mean_square`, :meth:`_pooled_square`): when ``ctx``'s grid integrates
        Wigner degree 2(L−1) exactly (:attr:`SO3Grid.exact_degree`), both measures integrate
        K(u)² exactly (the pair measure's inner sum Σ_b q_b K(g_a g_b⁻¹)² is the grid's
        quadrature of a function of that degree), so the closed form is the same kernel
        without the group values. On coarser grids the quadrature is the kernel asked for, and
        is kept."""
        return self.square_head() > 0 and ctx.grid.exact_degree >= 2 * (self.layers[0].band_limit - 1)

    def _pooled_square(self, mean_square: Tensor, v1: Tensor, v2: Tensor, w1: Tensor, w2: Tensor,
                       ntk: bool) -> tuple[Tensor, Tensor | None]:
        """The :meth:`square_head` steps in closed form, from the lift's ∫ K(u)² du, its
        variances v1, v2 and the variances w1, w2 that σ reads (v, or after the norm 1, and 0
        for a zero signal), all broadcast against each other. The norm divides K by √(v1 v2),
        hence K² by v1 v2; the kernel σ reads is then the lift's (or the norm's), so Θ = K, and
        F = F(0; w1, w2) + 2K² and Θ Ḟ = K · 4K are affine in K²:

            mean F = F(0; w1, w2) + 2 ∫ K²,    mean Θ Ḟ = 4 ∫ K²."""
        head = self.square_head()
        if head == 2:
            mean_square = mean_square * inverse_sqrt(v1) ** 2 * inverse_sqrt(v2) ** 2
        constant = get_activation(self.layers[head].name).dual(mean_square.new_zeros(()), w1, w2)[0]
        return constant + 2 * mean_square, 4 * mean_square if ntk else None

    def values_per_pair(self, ctx: Discretisation) -> int:
        """Values of the widest temporary per input pair: the moments (L3) in closed form,
        else the group values on the measure's support (K + 1). Sets the tile sizes."""
        return n_wigner(self.layers[0].band_limit) if self.pools_in_closed_form(ctx) else ctx.support_size

    def steps(self, ctx: Discretisation) -> list[tuple[Rule, bool]]:
        """(kernel rule, pools) of every layer after Lift. A layer directly before Pool becomes
        one step with it: a GroupConv without the synthesis (when ``ctx``'s measure allows it),
        a nonlinearity as one pass over the group values."""
        out, layers = [], list(self.layers[1:])
        while layers:
            layer = layers.pop(0)
            before_pool = bool(layers) and isinstance(layers[0], Pool)
            if before_pool and (
                isinstance(layer, Nonlinearity) or (isinstance(layer, GroupConv) and layer.pools_exactly(ctx))
            ):
                out.append((layer.pool_rule, True))
                layers.pop(0)
            else:
                out.append((layer.rule, isinstance(layer, Pool)))
        return out

    def self_kernels(self, x: Tensor, *, ctx: Discretisation) -> list[Tensor]:
        """Self-kernels of each input (n, C, L²) along the network, computed once per input:
        entry s is the variance ψ^{ff}(e), shape (n,), at the input of step s of
        :meth:`steps`; the last entry is the output self-kernel K(f, f). Evaluated in chunks
        of at most :func:`tile_elements` group values."""
        x = x.to(dtype=ctx.dtype, device=ctx.device)
        steps, lift = self.steps(ctx), self.layers[0]
        skipped, chunks = self.square_head() if self.pools_in_closed_form(ctx) else 0, []
        for part in x.split(max(1, tile_elements(ctx.device) // self.values_per_pair(ctx))):
            psi, on_group, trace = lift.self_kernel(part, ctx), True, []
            if skipped:
                trace.append(variance(psi, on_group))
                if skipped == 2:  # the layer norm's output variance (1, or 0 for a zero signal)
                    trace.append(steps[0][0](trace[0], None, trace[0], trace[0], ctx)[0])
                mean_square = lift.haar_mean_square(self_lift_moments(part, lift.band_limit), part.shape[1])
                psi, on_group = self._pooled_square(mean_square, trace[0], trace[0], trace[-1], trace[-1], ntk=False)[0], False
            for rule, pools in steps[skipped:]:
                trace.append(variance(psi, on_group))
                psi = rule(psi, None, *self_variances(trace[-1], on_group), ctx)[0]
                on_group = on_group and not pools
            chunks.append(trace + [psi])
        return [torch.cat(parts) for parts in zip(*chunks)] if chunks else [x.new_zeros(0)] * (len(steps) + 1)

    def cross_kernel(
        self,
        x1: Tensor,
        x2: Tensor,
        self1: list[Tensor],
        self2: list[Tensor],
        *,
        ctx: Discretisation,
        ntk: bool = True,
        symmetric: bool = False,
    ) -> tuple[Tensor, Tensor | None]:
        """NNGP and NTK (n1, n2) between x1 and x2 given their :meth:`self_kernels`.

        Pairs are evaluated in tiles of at most :func:`tile_elements` group values
        (:func:`tile_shape`; cache-sized on CPU; memory does not grow with n1·n2 beyond the output). ``symmetric``
        (x2 is x1, same self-kernels): on a mirrored ``ctx`` (:attr:`Discretisation.symmetric`)
        only tiles on or above the diagonal are computed, and the upper triangle is mirrored.
        """
        x1 = x1.to(dtype=ctx.dtype, device=ctx.device)
        x2 = x2.to(dtype=ctx.dtype, device=ctx.device)
        n1, n2 = x1.shape[0], x2.shape[0]
        nngp = x1.new_empty(n1, n2)
        theta = torch.empty_like(nngp) if ntk else None
        steps = self.steps(ctx)
        mirror = symmetric and ctx.symmetric
        height, width = tile_shape(n1, n2, max(1, tile_elements(ctx.device) // self.values_per_pair(ctx)), square=mirror)
        for i in range(0, n1, height):
            rows = slice(i, i + height)
            for j in range(i if mirror else 0, n2, width):
                cols = slice(j, j + width)
                k, t = self._tile(x1[rows], x2[cols], [s[rows] for s in self1], [s[cols] for s in self2], steps, ctx, ntk)
                for target, value in ((nngp, k), (theta, t)):
                    if target is not None:
                        if mirror and j == i:  # the tile's upper triangle, mirrored
                            value = value.triu() + value.triu(1).T
                        target[rows, cols] = value
                        if mirror and j > i:
                            target[cols, rows] = value.T
        return nngp, theta

    def _tile(
        self,
        x1: Tensor,
        x2: Tensor,
        var1: list[Tensor],
        var2: list[Tensor],
        steps: list[tuple[Rule, bool]],
        ctx: Discretisation,
        ntk: bool,
    ) -> tuple[Tensor, Tensor | None]:
        """Cross kernels of one tile through all layers (variances from the self-kernels)."""
        lift = self.layers[0]
        if self.pools_in_closed_form(ctx):
            skipped = self.square_head()
            mean_square = lift.haar_mean_square(lift_moments(x1, x2, lift.band_limit), x1.shape[1])
            v, w = pair_variances(var1[0], var2[0], False), pair_variances(var1[skipped - 1], var2[skipped - 1], False)
            nngp, theta = self._pooled_square(mean_square, *v, *w, ntk)
            steps, var1, var2, on_group = steps[skipped:], var1[skipped:], var2[skipped:], False
        else:
            nngp = lift.cross(x1, x2, ctx)
            theta, on_group = (nngp if ntk else None), True
        for (rule, pools), v1, v2 in zip(steps, var1, var2):
            nngp, theta = rule(nngp, theta, *pair_variances(v1, v2, on_group), ctx)
            on_group = on_group and not pools
        return nngp, theta

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
        self1 = self.self_kernels(x1, ctx=ctx)
        self2 = self1 if same else self.self_kernels(x2, ctx=ctx)
        nngp, theta = self.cross_kernel(x1, x2, self1, self2, ctx=ctx, ntk=ntk, symmetric=same)
        return PooledKernel(nngp=nngp, ntk=theta, self1=self1[-1], self2=self2[-1])

    def finite(self, in_shape: tuple[int, int], width: int, ctx: Discretisation) -> FiniteSO3Network:
        """The finite network at ``width`` on the nodes of ``ctx.grid`` (scalar output) for
        inputs of shape ``in_shape`` = (C, L²) each, with N(0, 1) parameters drawn from
        torch's global generator."""
        channels, coeffs = in_shape
        if coeffs < self.band_limit**2:
            raise ValueError(f"band limit {self.band_limit} needs {self.band_limit**2} coefficients per channel, got {coeffs}")
        modules, in_width = [], channels
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
