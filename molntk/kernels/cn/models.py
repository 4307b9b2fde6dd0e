"""Ready-made image networks and the augmented (orbit-averaged) kernel.

``gcnn(n=4)`` with the defaults is the published C4 GCNN NTK architecture: lifting 3×3
VALID → ReLU → group conv 3×3 VALID → ReLU → group pool → Dense → ReLU → Dense.
``gcnn(n=1)`` is the CNN with global average pooling (CNN-GAP); ``cnn_flatten`` and
``mlp`` are the other non-equivariant baselines.

The augmentation identity (DESIGN §5): for n ∈ {1, 2, 4} (exact grid rotations, square
images, any padding) the C_n GCNN kernel equals the orbit average of the matching CNN
kernel, K_aug(f, f') = (1/n) Σ_g K_CNN(f, ρ(g) f'), whenever the rotations are averaged
after the last nonlinearity: for ``gcnn(n, head=0)`` against ``augmented(gcnn(1, head=0), n)``
and for ``gcnn(n, per_rotation_head=True)`` against ``augmented(gcnn(1), n)``. With a
nonlinear head after a full group pool (the published ordering) the two differ: the
head sees the orbit-averaged covariance instead of averaging the head's outputs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from torch import Tensor

from molntk.kernels.cn.dense import Dense
from molntk.kernels.cn.group_conv import GroupConv
from molntk.kernels.cn.lifting import Lifting
from molntk.kernels.cn.network import KINDS, Network, as_images, serial
from molntk.kernels.cn.nonlinearity import Activation
from molntk.kernels.cn.pooling import Flatten, GlobalPool, RotationPool, SpatialPool
from molntk.kernels.cn.rotations import rotate_images


def _head(head: int, activation: str, sigma_w: float, sigma_b: float) -> list:
    layers = []
    for _ in range(head):
        layers += [Dense(sigma_w=sigma_w, sigma_b=sigma_b), Activation(activation)]
    return layers + [Dense(out=1, sigma_w=sigma_w, sigma_b=sigma_b)]


def _convolutions(n: int, depth: int, k: int, padding: str, activation: str, sigma_w: float, sigma_b: float) -> list:
    if depth < 1:
        raise ValueError(f"depth must be at least 1, got {depth}")
    layers = [Lifting(n, k, padding, sigma_w, sigma_b), Activation(activation)]
    for _ in range(depth - 1):
        layers += [GroupConv(n, k, padding, sigma_w, sigma_b), Activation(activation)]
    return layers


def gcnn(
    n: int = 4,
    depth: int = 2,
    *,
    k: int = 3,
    padding: str = "valid",
    activation: str = "relu",
    head: int = 1,
    per_rotation_head: bool = False,
    sigma_w: float = 1.0,
    sigma_b: float = 0.0,
) -> Network:
    """C_n GCNN: lifting, depth − 1 group convolutions, pooling, ``head`` hidden Dense layers, readout.

    ``per_rotation_head``: pool over space only, apply the head to each rotation's vector
    and average the outputs over rotations (group pooling last); else pool over space and
    rotations before the head.
    """
    layers = _convolutions(n, depth, k, padding, activation, sigma_w, sigma_b)
    if per_rotation_head:
        layers += [SpatialPool(), *_head(head, activation, sigma_w, sigma_b), RotationPool()]
    else:
        layers += [GlobalPool(), *_head(head, activation, sigma_w, sigma_b)]
    return serial(*layers)


def cnn_gap(depth: int = 2, **options) -> Network:
    """CNN with global average pooling: ``gcnn(n=1, ...)``."""
    return gcnn(1, depth, **options)


def cnn_flatten(
    depth: int = 2,
    *,
    k: int = 3,
    padding: str = "valid",
    activation: str = "relu",
    head: int = 0,
    sigma_w: float = 1.0,
    sigma_b: float = 0.0,
) -> Network:
    """CNN whose feature maps are flattened into the Dense head (no pooling)."""
    layers = _convolutions(1, depth, k, padding, activation, sigma_w, sigma_b)
    return serial(*layers, Flatten(), *_head(head, activation, sigma_w, sigma_b))


def mlp(depth: int = 2, *, activation: str = "relu", sigma_w: float = 1.0, sigma_b: float = 0.0) -> Network:
    """MLP on flattened images: depth hidden Dense layers, then the readout."""
    return serial(Flatten(), *_head(depth, activation, sigma_w, sigma_b))


@dataclass(frozen=True)
class Augmented:
    """Orbit-averaged kernel K_aug(f, f') = (1/n) Σ_{g ∈ C_n} K(f, ρ(g) f') of a network.

    ρ(g) rotates images by 2πg/n: ``rot90`` for quarter turns, bilinear interpolation
    (zero outside the image) otherwise, so K_aug is exact group averaging (and a
    symmetric kernel) only for n ∈ {1, 2, 4} on square images.
    """

    network: Network
    n: int

    def kernel_fn(
        self, x1: Tensor, x2: Tensor | None = None, get: str | Sequence[str] = KINDS, **options
    ) -> Tensor | dict[str, Tensor]:
        """Same signature and result as :meth:`Network.kernel_fn`."""
        x1 = as_images(x1, "x1")
        x2 = x1 if x2 is None else as_images(x2, "x2").to(dtype=x1.dtype, device=x1.device)
        kinds = (get,) if isinstance(get, str) else tuple(get)
        total: dict[str, Tensor] = {}
        for g in range(self.n):
            rotated = rotate_images(x2, 2 * math.pi * g / self.n)
            part = self.network.kernel_fn(x1, rotated, kinds, **options)
            for kind in kinds:
                total[kind] = total[kind] + part[kind] if kind in total else part[kind]
        out = {kind: value / self.n for kind, value in total.items()}
        return out[kinds[0]] if isinstance(get, str) else out


def augmented(network: Network, n: int) -> Augmented:
    """The C_n orbit average of ``network``'s kernel (see :class:`Augmented`)."""
    if n < 1:
        raise ValueError(f"the orbit size n must be at least 1, got {n}")
    return Augmented(network, n)
