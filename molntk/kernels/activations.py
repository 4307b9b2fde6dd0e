"""Pointwise nonlinearities with their dual activations.

For a centred Gaussian pair (u, v) with covariance [[k11, k12], [k12, k22]] the dual
activation of σ is

    F(k12; k11, k22)  = E[σ(u) σ(v)]            (NNGP rule)
    Ḟ(k12; k11, k22)  = E[σ'(u) σ'(v)]          (NTK rule: Θ' = Θ · Ḟ)

Each :class:`DualActivation` carries the finite-width function (``apply``, used by the
finite networks that test the kernels) next to these closed forms (``dual``). A dual
never modifies its arguments, k11 and k22 broadcast against k12, and the Ḟ it returns is
a fresh tensor (callers may update it in place unless autograd records through it:
:func:`recording`). The duals update their big temporaries in place, except where autograd
records (forces: gradients of kernels with respect to their inputs), where each step makes
a fresh tensor so that the values autograd saved stay intact.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Sequence

import torch
from torch import Tensor

#: Correlations are clamped to [-1 + CLAMP, 1 - CLAMP] before arcsin-type formulas, so that
#: rounding never produces NaN on the diagonal (where the exact value is ±1). The fused
#: passes (:mod:`molntk.kernels.pooled_activations`, its Triton kernel) use the same clamp.
CLAMP = 1e-12


def recording(*tensors: Tensor | None) -> bool:
    """Whether autograd records a graph through any of ``tensors`` (then no tensor that a
    recorded operation saved may be updated in place)."""
    return torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors)


def inverse_sqrt(v: Tensor) -> Tensor:
    """v^{-1/2}, and 0 where v = 0 (a zero-variance input, whose covariances are 0 too); its
    gradient is finite everywhere."""
    return torch.where(v > 0, v, torch.ones_like(v)).rsqrt() * (v > 0)


def _relu_dual(k12: Tensor, k11: Tensor, k22: Tensor) -> tuple[Tensor, Tensor]:
    """Arc-cosine kernel of degree 1 (Cho & Saul 2009), θ = arccos(k12 / √(k11 k22)):

    F = √(k11 k22) / (2π) · (sin θ + (π − θ) cos θ) = √(k11 k22) sin θ / (2π) + k12 Ḟ,
    Ḟ = (π − θ) / (2π).

    sin θ = √(1 − cos² θ) is taken from the same clamped cos θ as θ, so F stays a smooth
    function of the rounded correlation near cos θ = ±1. Nine passes over the big tensor,
    two of them allocating.
    """
    prod = k11 * k22  # broadcast shape of the variances, usually small
    # a zero-variance input has k12 = 0: cos = 0, θ = π/2, F = 0, Ḟ = 1/4 (the limit); √prod
    # is prod · prod^{-1/2} so that its gradient there is 0, not ∞ · 0 = NaN for every pair
    inv_norm = inverse_sqrt(prod)
    cos = torch.mul(k12, inv_norm).clamp_(-1.0, 1.0)
    sin = torch.addcmul(cos.new_ones(()), cos, cos, value=-1.0).sqrt_()  # 1 − cos² ≥ 0 as |cos| ≤ 1
    scale = prod * inv_norm * (1 / (2 * math.pi))
    if recording(k12, k11, k22):  # cos and sin are saved for the gradient: fresh tensors
        fdot = torch.acos(cos).mul_(-1 / (2 * math.pi)).add_(0.5)
        return (sin * scale).addcmul_(k12, fdot), fdot
    fdot = cos.acos_().mul_(-1 / (2 * math.pi)).add_(0.5)
    f = sin.mul_(scale).addcmul_(k12, fdot)
    return f, fdot


def _erf_dual(k12: Tensor, k11: Tensor, k22: Tensor) -> tuple[Tensor, Tensor]:
    """Dual of erf (Williams 1997), with d = (1 + 2 k11)(1 + 2 k22) and ρ = 2 k12 / √d:

    F = (2/π) arcsin ρ,   Ḟ = (4/π) / √(d − 4 k12²) = (4/π) d^{-1/2} (1 − ρ²)^{-1/2}.
    """
    inv_sqrt_d = torch.rsqrt((1 + 2 * k11) * (1 + 2 * k22))  # broadcast shape, usually small
    rho = torch.mul(k12, 2 * inv_sqrt_d).clamp_(-1 + CLAMP, 1 - CLAMP)
    fdot = torch.addcmul(rho.new_ones(()), rho, rho, value=-1.0).clamp_(min=CLAMP).rsqrt_()
    if recording(k12, k11, k22):  # rho and the rsqrt are saved for the gradient: fresh tensors
        return torch.asin(rho) * (2 / math.pi), fdot * ((4 / math.pi) * inv_sqrt_d)
    fdot.mul_((4 / math.pi) * inv_sqrt_d)
    f = rho.asin_().mul_(2 / math.pi)
    return f, fdot


def _quadratic_dual(k12: Tensor, k11: Tensor, k22: Tensor) -> tuple[Tensor, Tensor]:
    """σ(x) = x²: F = k11 k22 + 2 k12² (Isserlis), Ḟ = E[2u · 2v] = 4 k12."""
    return k11 * k22 + 2 * k12 * k12, 4 * k12


def _hermite2_dual(k12: Tensor, k11: Tensor, k22: Tensor) -> tuple[Tensor, Tensor]:
    """σ(x) = x² − 1, the probabilists' Hermite polynomial He₂: F = (k11 − 1)(k22 − 1) + 2 k12²,
    Ḟ = 4 k12. On unit variances (after a layer norm) F = 2 k12², the square without the
    quadratic's constant k11 k22, so its Haar mean is the normalised power spectrum alone."""
    return (k11 - 1) * (k22 - 1) + 2 * k12 * k12, 4 * k12


def _exp_dual(k12: Tensor, k11: Tensor, k22: Tensor) -> tuple[Tensor, Tensor]:
    """σ(x) = eˣ (log-normal moments): F = E[e^{u+v}] = exp((k11 + k22)/2 + k12), Ḟ = F (σ' = σ).

    Its pooled kernel is the "kernel exponential" of the lift: with the variances fixed,
    F = e^{(k11 + k22)/2} Σ_ν k12^ν / ν!, so the Haar mean weights the (ν+1)-body term
    ∫ K(u)^ν du by 1/ν! (σ_w² scales K, hence sets the body-order weights c^ν/ν!); the Wigner
    kernel family of Bigi et al. (JCP 161, 044116, 2024) sums the same series.
    """
    f = torch.exp(k12 + 0.5 * (k11 + k22))
    return f, f.clone()


def _identity_dual(k12: Tensor, k11: Tensor, k22: Tensor) -> tuple[Tensor, Tensor]:
    """σ(x) = x: F = k12, Ḟ = 1."""
    return k12, torch.ones_like(k12)


@dataclass(frozen=True)
class DualActivation:
    """A nonlinearity: finite ``apply`` and its ``dual`` (F, Ḟ) for kernels."""

    name: str
    apply: Callable[[Tensor], Tensor]
    dual: Callable[[Tensor, Tensor, Tensor], tuple[Tensor, Tensor]]


ACTIVATIONS: dict[str, DualActivation] = {
    "relu": DualActivation("relu", torch.relu, _relu_dual),
    "erf": DualActivation("erf", torch.erf, _erf_dual),
    "quadratic": DualActivation("quadratic", torch.square, _quadratic_dual),
    "hermite2": DualActivation("hermite2", lambda x: torch.square(x) - 1, _hermite2_dual),
    "exp": DualActivation("exp", torch.exp, _exp_dual),
    "identity": DualActivation("identity", lambda x: x, _identity_dual),
}


def check_gaussian_inputs(layers: Sequence[object], weight_layers: tuple[type, ...], nonlinearity: type) -> None:
    """ValueError unless every ``nonlinearity`` in ``layers`` has a Gaussian input at infinite width.

    The dual activation is E[σ(u)σ(v)] for a centred Gaussian pair (u, v). A weight layer
    (one of ``weight_layers``: lift, convolution, dense) sums over infinitely many channels
    and gives one; pooling and layer norm are linear (the norm's divisor is deterministic in
    the limit) and keep it; a nonlinearity does not, and neither does a network's raw input.
    σ applied to σ'(z), or to the pool of σ'(z), is not the dual's expectation, and its finite
    twin does not converge to that kernel.
    """
    gaussian = False
    for i, layer in enumerate(layers):
        if isinstance(layer, nonlinearity) and not gaussian:
            raise ValueError(
                f"layer {i + 1} ({layer.name}) has no weight layer between it and the input or the "
                "previous nonlinearity: put lift, conv or dense before it "
                "(e.g. '… pool dense quadratic dense', not '… pool quadratic dense')"
            )
        if isinstance(layer, weight_layers):
            gaussian = True
        elif isinstance(layer, nonlinearity):
            gaussian = False


def get_activation(name: str) -> DualActivation:
    """Look up an activation by name (``relu``, ``erf``, ``quadratic``, ``hermite2``, ``exp``, ``identity``)."""
    try:
        return ACTIVATIONS[name]
    except KeyError:
        raise ValueError(f"unknown activation {name!r}; choose one of {sorted(ACTIVATIONS)}") from None
