"""Composing C_n ⋉ R² layers (like neural-tangents' ``serial``) into kernels and finite nets.

    net = serial(Lift(4), Nonlinearity("relu"), GroupConv(4), Nonlinearity("relu"),
                 Pool(), Dense(), Nonlinearity("relu"), Dense(out=1))
    k = net.kernel(x1, x2)                          # PooledKernel: k.nngp, k.ntk (N1, N2)
    f = net.finite((C, H, W), width=256, seed=0)    # torch module (N, C, H, W) → (N, 1)

The kernel of ``finite`` as width → ∞ is ``kernel``. Evaluation: the self-pair
states (f, f) of every image are run first and give the self-variances that the
nonlinearities need; then the cross pairs run in chunks whose size follows a memory
budget. By default the states are orbit blocks under the exact grid rotations
(:mod:`molntk.kernels.cn.state`); ``symmetry=False`` runs the unreduced recursion.
Works on CPU and CUDA, float32 and float64 (those of x1).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from molntk.errors import InputError
from molntk.kernels.activations import check_gaussian_inputs
from molntk.kernels.cn.conv import GroupConv
from molntk.kernels.cn.dense import Dense
from molntk.kernels.cn.lift import Lift
from molntk.kernels.cn.nonlinearity import Nonlinearity
from molntk.kernels.cn.pool import Flatten, Pool, RotationPool, SpatialPool
from molntk.kernels.cn.state import Buffers, InputPair, KernelState
from molntk.kernels.result import PooledKernel

Layer = Lift | GroupConv | Nonlinearity | Dense | Pool | SpatialPool | RotationPool | Flatten
#: Simultaneously live site-pair tensors per image pair (state, duals, sums, padding).
_LIVE_TENSORS = 8


def as_images(x: object, name: str) -> Tensor:
    """``x`` as a floating tensor of images (N, C, H, W); InputError naming ``name`` otherwise."""
    x = torch.as_tensor(x)
    if x.ndim != 4:
        raise InputError(name, f"expected images of shape (N, C, H, W), got shape {tuple(x.shape)}")
    if not x.is_floating_point():
        raise InputError(name, f"expected floating-point images, got {x.dtype}")
    if x.numel() and not torch.isfinite(x).all():
        raise InputError(name, "images contain NaN or infinite values")
    return x


def _chunks(n: int, size: int) -> Iterator[slice]:
    for start in range(0, n, size):
        yield slice(start, min(start + size, n))


@dataclass(frozen=True)
class CnNetwork:
    """A serial network: Lift or Flatten first, a pooled (or flattened) Dense readout last."""

    layers: tuple[Layer, ...]

    def __post_init__(self) -> None:
        layers = self.layers
        if not layers or not isinstance(layers[0], (Lift, Flatten)):
            raise ValueError("a network starts with Lift (images → feature maps) or Flatten (images → vectors)")
        if any(isinstance(layer, Lift) for layer in layers[1:]):
            raise ValueError("Lift can only be the first layer")
        bad = [layer.n for layer in layers if isinstance(layer, GroupConv) and layer.n != self.n]
        if bad:
            raise ValueError(f"GroupConv(n={bad[0]}) in a network lifted to n = {self.n}")
        check_gaussian_inputs(layers, (Lift, GroupConv, Dense), Nonlinearity)

    @property
    def n(self) -> int:
        """Order of the rotation group of the feature maps (1 for CNNs and MLPs)."""
        return self.layers[0].n if isinstance(self.layers[0], Lift) else 1

    def orbit(self, h: int, w: int, symmetry: bool = True) -> int:
        """q₀ = gcd(n, 4) on square grids, gcd(n, 2) otherwise; 1 without ``symmetry``."""
        if not symmetry:
            return 1
        return math.gcd(self.n, 4 if h == w else 2)

    def _check_size(self, h: int, w: int) -> None:
        """InputError if (h, w) images shrink to nothing under the VALID convolutions."""
        size = (h, w)
        for layer in self.layers:
            if isinstance(layer, (Lift, GroupConv)):
                size = layer.out_spatial(*size)
                if min(size) < 1:
                    raise InputError("x1", f"images of {h}×{w} pixels are too small for the network's convolutions")

    def _site_pairs(self, h: int, w: int, orbit: int) -> int:
        """Largest number of site-pair entries per image pair (right after lifting)."""
        first = self.layers[0]
        if not isinstance(first, Lift):
            return 1
        p = self.n // orbit
        sites = math.prod(first.out_spatial(h, w))
        return orbit * p * p * sites**2

    def _run(self, inputs: InputPair, ntk: bool, variances: Callable[[int, KernelState], KernelState]) -> KernelState:
        state = self.layers[0].kernel_inputs(inputs, ntk)
        for i, layer in enumerate(self.layers[1:], start=1):
            state = variances(i, state) if isinstance(layer, Nonlinearity) else state
            state = layer.kernel(state.with_(buffers=inputs.buffers, layer=i))
        if state.spatial or state.nngp.shape[2:] != (1, 1, 1):
            raise ValueError("the network output is not one vector per image: end with a pooled Dense readout")
        return state

    def _self_kernels(self, x: Tensor, orbit: int, chunk: int) -> tuple[list[Tensor], Tensor]:
        """The self-pair states (f, f) of every image, run once: per layer i ≥ 1 the
        self-variances K_{f,f}((x, s), (x, s)) (N, p, *S) of its input, and the output
        self-kernel K(f, f) (N,)."""
        parts: list[list[Tensor]] = [[] for _ in self.layers]
        outputs = []

        def record(i: int, state: KernelState) -> KernelState:
            diagonal = state.diagonal()
            parts[i].append(diagonal[:, 0])
            return state.with_variances(diagonal, diagonal)

        buffers = Buffers()
        for rows in _chunks(x.shape[0], chunk):
            images = x[rows, None]
            state = self._run(InputPair(images, images, orbit, buffers), ntk=False, variances=record)
            outputs.append(state.nngp.reshape(-1).clone())
        variances = [torch.cat(p) if p else x.new_empty(0) for p in parts]
        return variances, torch.cat(outputs) if outputs else x.new_empty(0)

    def kernel(
        self,
        x1: Tensor,
        x2: Tensor | None = None,
        *,
        ntk: bool = True,
        symmetry: bool = True,
        memory_mb: float = 768.0,
    ) -> PooledKernel:
        """Infinite-width NNGP and (if ``ntk``) NTK between images x1 (N1, C, H, W) and
        x2 (N2, C, H, W), each (N1, N2), with the output self-kernels (N1,), (N2,).

        On x1's device, in x1's dtype. x2 = None means x2 = x1 (symmetric, each pair
        computed once). ``symmetry=False`` runs the unreduced recursion. ``memory_mb``
        bounds the working memory of one chunk of image pairs (the buffers of all layers,
        reused from chunk to chunk).
        """
        x1 = as_images(x1, "x1")
        same = x2 is None
        x2 = x1 if same else as_images(x2, "x2").to(dtype=x1.dtype, device=x1.device)
        if x1.shape[1:] != x2.shape[1:]:
            raise InputError("x2", f"images of shape {tuple(x2.shape[1:])} do not match x1's {tuple(x1.shape[1:])}")
        h, w = x1.shape[-2:]
        self._check_size(h, w)
        orbit = self.orbit(h, w, symmetry)
        per_pair = _LIVE_TENSORS * x1.element_size() * self._site_pairs(h, w, orbit)
        pairs = max(1, int(memory_mb * 2**20 // per_pair))
        var1, self1 = self._self_kernels(x1, orbit, pairs)
        var2, self2 = (var1, self1) if same else self._self_kernels(x2, orbit, pairs)
        n1, n2 = x1.shape[0], x2.shape[0]
        kinds = ("nngp", "ntk") if ntk else ("nngp",)
        out = {kind: x1.new_empty(n1, n2) for kind in kinds}
        buffers = Buffers()
        cols = min(n2, pairs)
        rows = max(1, pairs // cols)
        if same:
            rows = cols = max(1, math.isqrt(pairs))
        for r in _chunks(n1, rows):
            for c in _chunks(n2, cols):
                if same and c.start < r.start:
                    continue

                def attach(i: int, state: KernelState, r: slice = r, c: slice = c) -> KernelState:
                    return state.with_variances(var1[i][r, None], var2[i][None, c])

                state = self._run(InputPair(x1[r, None], x2[None, c], orbit, buffers), ntk, attach)
                for kind in kinds:
                    block = getattr(state, kind).reshape(r.stop - r.start, c.stop - c.start)
                    out[kind][r, c] = block
                    if same:
                        out[kind][c, r] = block.T
        if same:  # diagonal blocks computed (i, j) and (j, i) separately: equal up to rounding
            out = {kind: (k + k.T) / 2 for kind, k in out.items()}
        return PooledKernel(nngp=out["nngp"], ntk=out.get("ntk"), self1=self1, self2=self2)

    def finite(
        self, in_shape: tuple[int, int, int], width: int, *, seed: int = 0, dtype: torch.dtype = torch.float64
    ) -> nn.Sequential:
        """The finite network at ``width`` (channels per rotation) with N(0, 1) parameters from ``seed``."""
        generator = torch.Generator().manual_seed(seed)
        modules, shape = [], tuple(in_shape)
        for layer in self.layers:
            module, shape = layer.finite(shape, width, generator, dtype)
            modules.append(module)
        return nn.Sequential(*modules)


def serial(*layers: Layer) -> CnNetwork:
    """Compose layers into a :class:`CnNetwork`."""
    return CnNetwork(tuple(layers))
