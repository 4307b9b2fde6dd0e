"""Per-atom MLP NTK on the environment feature maps (not rotation invariant).

Each atom environment is the flattened coefficient vector v = vec(f̂) ∈ R^{C·L²} of its
feature map (:func:`molntk.features.environments.environment_features`). The per-atom
network has ``depth`` hidden layers, each dense → σ, and a dense scalar readout, in the NTK
parametrisation (all weights and biases N(0, 1)):

    z¹ = σ_w/√C · W¹ v + σ_b b¹,      z^{ℓ+1} = σ_w/√n · W^{ℓ+1} σ(z^ℓ) + σ_b b^{ℓ+1}.

First-layer scaling 1/C (C = channels), not 1/(C·L²): by Parseval ⟨v, v'⟩ = Σ_c ∫_{S²}
f_c f'_c, so the first layer sees the channel-averaged L² inner product of the smeared
densities, independent of the band limit L — exactly the normalisation of the SO(3)
lifting layer (:mod:`molntk.kernels.so3.lift`), so that an MLP and an SO(3) network with the
same σ_w, σ_b are directly comparable (and the orbit average of this kernel is the SO(3)
GCNN kernel, :mod:`molntk.molecular.baselines.augmented`). It equals the standard fan-in
parametrisation applied to the rescaled input L·v.

Infinite-width kernels (F, Ḟ the dual activations of :mod:`molntk.kernels.activations`):

    K¹ = σ_w²/C ⟨v, v'⟩ + σ_b²,                           Θ¹ = K¹
    K^{ℓ+1} = σ_w² F(K^ℓ; K^ℓ_vv, K^ℓ_v'v') + σ_b²,        Θ^{ℓ+1} = K^{ℓ+1} + σ_w² Θ^ℓ Ḟ(K^ℓ; …)

for ℓ = 1 … depth; the NNGP and NTK of the network are K^{depth+1} and Θ^{depth+1}.
The molecular kernel is the element-resolved pair sum of :mod:`molntk.molecular.pair_sum`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import ClassVar

import torch
from torch import Tensor, nn

from molntk.features.environments import EnvironmentBatch, FeatureConfig
from molntk.kernels.activations import get_activation
from molntk.kernels.pooled_activations import pooled_dual
from molntk.molecular.baselines.local import FeatureMapKernel
from molntk.molecular.descriptors import AtomDescriptors


def mlp_kernels(
    k1: Tensor, var1: Tensor, var2: Tensor, *, depth: int, activation: str, sigma_w: float, sigma_b: float
) -> tuple[Tensor, Tensor]:
    """(K^{depth+1}, Θ^{depth+1}) from the first-layer kernel K¹ (recursion in the module doc).

    ``var1``, ``var2``: first-layer variances K¹_vv, K¹_v'v' of the two inputs, broadcastable
    against ``k1`` (e.g. shapes (n1, 1) and (1, n2) for k1 of shape (n1, n2)).
    """
    dual = get_activation(activation).dual
    w2, b2 = sigma_w**2, sigma_b**2
    k, theta = k1, k1
    for _ in range(depth):
        f, fdot = dual(k, var1, var2)
        f1 = dual(var1, var1, var1)[0]
        f2 = f1 if var2 is var1 else dual(var2, var2, var2)[0]
        k = w2 * f + b2
        theta = k + w2 * theta * fdot
        var1 = w2 * f1 + b2
        var2 = var1 if f2 is f1 else w2 * f2 + b2
    return k, theta


def first_layer(x1: Tensor, x2: Tensor | None, sigma_w: float, sigma_b: float) -> tuple[Tensor, Tensor, Tensor]:
    """K¹ (n1, n2) and the variances K¹_vv (n1,), K¹_v'v' (n2,) of coefficients (n, C, L²)."""
    scale = sigma_w**2 / x1.shape[1]
    v1 = x1.flatten(1)
    if x2 is None:
        gram = v1 @ v1.T
        var = scale * torch.diagonal(gram) + sigma_b**2
        return scale * gram + sigma_b**2, var, var
    if x2.shape[1:] != x1.shape[1:]:
        raise ValueError(f"inputs differ in channels/coefficients: {tuple(x1.shape)} vs {tuple(x2.shape)}")
    v2 = x2.flatten(1)
    return (
        scale * (v1 @ v2.T) + sigma_b**2,
        scale * (v1 * v1).sum(1) + sigma_b**2,
        scale * (v2 * v2).sum(1) + sigma_b**2,
    )


@dataclass(frozen=True)
class MLPArchitecture:
    """``depth`` hidden layers dense → σ, then a dense readout; σ_w, σ_b shared by all layers."""

    depth: int = 2
    activation: str = "relu"
    sigma_w: float = 1.0
    sigma_b: float = 0.0

    def __post_init__(self) -> None:
        if self.depth < 1:
            raise ValueError(f"depth must be >= 1, got {self.depth}")
        get_activation(self.activation)

    def kernels(self, k1: Tensor, var1: Tensor, var2: Tensor) -> tuple[Tensor, Tensor]:
        return mlp_kernels(
            k1, var1, var2, depth=self.depth, activation=self.activation, sigma_w=self.sigma_w, sigma_b=self.sigma_b
        )

    def mean_kernels(self, k1: Tensor, var1: Tensor, var2: Tensor, weights: Tensor) -> tuple[Tensor, Tensor]:
        """Σ_k w_k K^{depth+1}(k1[..., k]) and Σ_k w_k Θ^{depth+1}(k1[..., k]) over the last axis.

        Depth 1 in one pass (:func:`~molntk.kernels.pooled_activations.pooled_dual`):
        Σ w K² = σ_w² Σ w F + σ_b² Σ w, Σ w Θ² = Σ w K² + σ_w² Σ w K¹ Ḟ."""
        if self.depth > 1:
            k, theta = self.kernels(k1, var1, var2)
            return k @ weights, theta @ weights
        f, t = pooled_dual(self.activation, k1, k1, var1, var2, weights)
        k = f.mul_(self.sigma_w**2).add_(self.sigma_b**2 * float(weights.sum()))
        return k, torch.add(k, t, alpha=self.sigma_w**2)


@dataclass(frozen=True, kw_only=True)
class FeatureMapNTK(FeatureMapKernel):
    """What the NTK baselines on molntk's feature maps share: the flattened coefficients as
    descriptors, an ``architecture``, and calls returning ``{"nngp", "ntk"}`` like the SO(3)
    molecular kernel."""

    architecture: MLPArchitecture
    outputs: ClassVar[tuple[str, ...]] = ("nngp", "ntk")

    def from_environments(self, batch: EnvironmentBatch) -> AtomDescriptors:
        return AtomDescriptors.from_batch(batch)


@dataclass(frozen=True)
class MLPNTK(FeatureMapNTK):
    """Molecular NNGP/NTK of per-atom MLPs on the flattened environment feature maps.

    ``kern(a, b)`` → ``{"nngp", "ntk"}``, each (M1, M2), for molecules / an EnvironmentBatch /
    :meth:`describe` output.
    """

    features: FeatureConfig = field(default_factory=FeatureConfig)
    architecture: MLPArchitecture = field(default_factory=MLPArchitecture)
    name: ClassVar[str] = "mlp-ntk"

    def env_kernel(self, x1: Tensor, x2: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """(NNGP, NTK) of the per-atom network between coefficient sets (n1, C, L²), (n2, C, L²)."""
        k1, var1, var2 = first_layer(x1, x2, self.architecture.sigma_w, self.architecture.sigma_b)
        return self.architecture.kernels(k1, var1[:, None], var2[None, :])

    def finite(self, in_channels: int, n_coeffs: int, width: int, *, dtype: torch.dtype = torch.float64) -> FiniteMLP:
        """The finite per-atom network of width ``width`` whose kernels these are at width → ∞."""
        return FiniteMLP(self.architecture, in_channels, n_coeffs, width, dtype=dtype)


class FiniteMLP(nn.Module):
    """Finite twin of :class:`MLPNTK`'s per-atom network: (B, C, L²) → (B,), NTK parametrisation."""

    def __init__(self, arch: MLPArchitecture, in_channels: int, n_coeffs: int, width: int, *, dtype: torch.dtype) -> None:
        super().__init__()
        self.arch = arch
        self.act = get_activation(arch.activation).apply
        fan_in = [in_channels * n_coeffs] + [width] * arch.depth
        fan_out = [width] * arch.depth + [1]
        shapes = zip(fan_out, fan_in, strict=True)
        self.weights = nn.ParameterList([nn.Parameter(torch.randn(o, i, dtype=dtype)) for o, i in shapes])
        self.biases = nn.ParameterList([nn.Parameter(torch.randn(o, dtype=dtype)) for o in fan_out])
        # first layer: 1/√C (see module doc); later layers: 1/√fan-in
        self.scales = [arch.sigma_w / math.sqrt(in_channels)] + [arch.sigma_w / math.sqrt(width)] * arch.depth

    def forward(self, x: Tensor) -> Tensor:
        h = x.flatten(1)
        for i, (w, b, s) in enumerate(zip(self.weights, self.biases, self.scales, strict=True)):
            if i > 0:
                h = self.act(h)
            h = s * h @ w.T + self.arch.sigma_b * b
        return h[:, 0]
