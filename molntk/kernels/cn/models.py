"""Ready-made image networks and the augmented (orbit-averaged) kernel.

``gcnn(n=4)`` with the defaults is the published C4 GCNN NTK architecture: lifting 3×3
VALID → ReLU → group conv 3×3 VALID → ReLU → group pool → Dense → ReLU → Dense.
``gcnn(n=1)`` is the CNN with global average pooling (CNN-GAP); ``cnn_flatten`` and
``mlp`` are the other non-equivariant baselines.

The augmentation identity (docs/mathematics.md §4, "Augmentation"): for n ∈ {1, 2, 4} (exact grid rotations, square
images, any padding) the C_n GCNN kernel equals the orbit average of the matching CNN
kernel, K_aug(f, f') = (1/n) Σ_g K_CNN(f, ρ(g) f'), whenever the rotations are averaged
after the last nonlinearity: for ``gcnn(n, head=0)`` against ``augmented(gcnn(1, head=0), n)``
and for ``gcnn(n, per_rotation_head=True)`` against ``augmented(gcnn(1), n)``. With a
nonlinear head after a full group pool (the published ordering) the two differ: the
head sees the orbit-averaged covariance instead of averaging the head's outputs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from torch import Tensor

from molntk.kernels.cn.conv import GroupConv
from molntk.kernels.cn.dense import Dense
from molntk.kernels.cn.lift import Lift
from molntk.kernels.cn.network import CnNetwork, as_images, serial
from molntk.kernels.cn.nonlinearity import Nonlinearity
from molntk.kernels.cn.pool import Flatten, Pool, RotationPool, SpatialPool
from molntk.kernels.cn.rotations import rotate_images
from molntk.kernels.result import Kernels


def _head(head: int, activation: str, sigma_w: float, sigma_b: float) -> list:
    layers = []
    for _ in range(head):
        layers += [Dense(sigma_w=sigma_w, sigma_b=sigma_b), Nonlinearity(activation)]
    return layers + [Dense(out=1, sigma_w=sigma_w, sigma_b=sigma_b)]


def _convolutions(n: int, depth: int, k: int, padding: str, activation: str, sigma_w: float, sigma_b: float) -> list:
    if depth < 1:
        raise ValueError(f"depth must be at least 1, got {depth}")
    layers = [Lift(n, k, padding, sigma_w, sigma_b), Nonlinearity(activation)]
    for _ in range(depth - 1):
        layers += [GroupConv(n, k, padding, sigma_w, sigma_b), Nonlinearity(activation)]
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
) -> CnNetwork:
    """C_n GCNN: lifting, depth − 1 group convolutions, pooling, ``head`` hidden Dense layers, readout.

    ``per_rotation_head``: pool over space only, apply the head to each rotation's vector
    and average the outputs over rotations (group pooling last); else pool over space and
    rotations before the head.
    """
    layers = _convolutions(n, depth, k, padding, activation, sigma_w, sigma_b)
    if per_rotation_head:
        layers += [SpatialPool(), *_head(head, activation, sigma_w, sigma_b), RotationPool()]
    else:
        layers += [Pool(), *_head(head, activation, sigma_w, sigma_b)]
    return serial(*layers)


def cnn_gap(depth: int = 2, **options) -> CnNetwork:
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
) -> CnNetwork:
    """CNN whose feature maps are flattened into the Dense head (no pooling)."""
    layers = _convolutions(1, depth, k, padding, activation, sigma_w, sigma_b)
    return serial(*layers, Flatten(), *_head(head, activation, sigma_w, sigma_b))


def mlp(depth: int = 2, *, activation: str = "relu", sigma_w: float = 1.0, sigma_b: float = 0.0) -> CnNetwork:
    """MLP on flattened images: depth hidden Dense layers, then the readout."""
    return serial(Flatten(), *_head(depth, activation, sigma_w, sigma_b))


@dataclass(frozen=True)
class Augmented:
    """Orbit-averaged kernel K_aug(f, f') = (1/n) Σ_{g ∈ C_n} K(f, ρ(g) f') of a network.

    ρ(g) rotates images by 2πg/n: ``rot90`` for quarter turns, bilinear interpolation
    (zero outside the image) otherwise, so K_aug is exact group averaging (and a
    symmetric kernel) only for n ∈ {1, 2, 4} on square images.
    """

    network: CnNetwork
    n: int

    def kernel(self, x1: Tensor, x2: Tensor | None = None, *, ntk: bool = True, **options) -> Kernels:
        """K_aug and (if ``ntk``) Θ_aug (N1, N2); ``options`` as for :meth:`CnNetwork.kernel`."""
        x1 = as_images(x1, "x1")
        x2 = x1 if x2 is None else as_images(x2, "x2").to(dtype=x1.dtype, device=x1.device)
        nngp, theta = 0, 0
        for g in range(self.n):
            part = self.network.kernel(x1, rotate_images(x2, 2 * math.pi * g / self.n), ntk=ntk, **options)
            nngp = nngp + part.nngp
            theta = theta + part.ntk if ntk else None
        return Kernels(nngp=nngp / self.n, ntk=theta / self.n if ntk else None)


def augmented(network: CnNetwork, n: int) -> Augmented:
    """The C_n orbit average of ``network``'s kernel (see :class:`Augmented`)."""
    if n < 1:
        raise ValueError(f"the orbit size n must be at least 1, got {n}")
    return Augmented(network, n)
