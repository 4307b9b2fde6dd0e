"""The compiled backward of the fused activation-then-mean (molntk.kernels.pooled_gradients).

References: autograd of the torch dual formulas (the same derivatives by another route) and
torch.autograd.gradcheck (central differences of the fused forward). Tolerances: the two
routes evaluate the same closed forms in float64 in a different order, so they agree to a
few ulp per term times the number K of summed terms (bound 1e-13 relative to the largest
gradient entry for K ≤ 257).
"""

from __future__ import annotations

import pytest
import torch

from molntk.kernels.activations import get_activation
from molntk.kernels.pooled_activations import pooled_dual
from molntk.kernels.pooled_gradients import backward_available

pytestmark = pytest.mark.usefixtures("one_thread")


def _inputs(seed: int, shape=(5, 6, 257), per_pair: bool = False):
    """K with |ρ| < 1, Θ, variances broadcast (n1, 1, 1) / (1, n2, 1) or per pair (n1, n2, 1), weights."""
    gen = torch.Generator().manual_seed(seed)
    n1, n2, k = shape
    v1 = torch.rand(n1, n2 if per_pair else 1, 1, generator=gen, dtype=torch.float64) + 0.5
    v2 = torch.rand(1, n2, 1, generator=gen, dtype=torch.float64) + 0.5
    nngp = (torch.rand(shape, generator=gen, dtype=torch.float64) * 2 - 1) * 0.9 * (v1 * v2).sqrt()
    theta = torch.rand(shape, generator=gen, dtype=torch.float64)
    w = torch.rand(k, generator=gen, dtype=torch.float64)
    return nngp, theta, v1, v2, w / w.sum()


def _gradients(activation, nngp, theta, v1, v2, w, tangent, fused):
    """Gradients of Σ (a F̄ + b Θ̄) (a, b fixed random cotangents) with respect to the inputs that
    autograd records; the torch path when ``fused`` is False."""
    leaves = [x.clone().requires_grad_(True) for x in (nngp, theta, v1, v2)]
    k, t, a, b = leaves
    ntk = {"none": None, "same": k, "separate": t}[tangent]
    if fused:
        f, th = pooled_dual(activation, k, ntk, a, b, w)
    else:
        F, Fdot = get_activation(activation).dual(k, a, b)
        f, th = F @ w, None if ntk is None else (Fdot * ntk) @ w
    gen = torch.Generator().manual_seed(7)
    total = (f * torch.rand(f.shape, generator=gen, dtype=torch.float64)).sum()
    if th is not None:
        total = total + (th * torch.rand(th.shape, generator=gen, dtype=torch.float64)).sum()
    grads = torch.autograd.grad(total, leaves, allow_unused=True)
    return [torch.zeros_like(x) if g is None else g for x, g in zip(leaves, grads)]


@pytest.mark.parametrize("activation", ["erf", "exp"])
@pytest.mark.parametrize("tangent", ["none", "same", "separate"])
@pytest.mark.parametrize("per_pair", [False, True])
def test_compiled_backward_equals_autograd_of_the_torch_formulas(activation, tangent, per_pair):
    """Gradients with respect to K, Θ and both variances (broadcast or one per pair)."""
    inputs = _inputs(1, per_pair=per_pair)
    assert backward_available(activation, inputs[0], inputs[-1])
    fused = _gradients(activation, *inputs, tangent, fused=True)
    reference = _gradients(activation, *inputs, tangent, fused=False)
    for a, b in zip(fused, reference):
        assert a.shape == b.shape
        assert (a - b).abs().max() <= 1e-13 * max(float(b.abs().max()), 1e-300)


def test_clamped_correlations_follow_autograd_of_the_clamp():
    """Where ρ = c K reaches ±1 (an environment with itself at the identity) the torch formulas
    clamp ρ, and autograd drops every term through ρ; the compiled loop does the same."""
    nngp, theta, v1, v2, w = _inputs(2, shape=(3, 4, 9))
    c = 2 / ((1 + 2 * v1) * (1 + 2 * v2)).sqrt()
    nngp[..., 0] = (1 / c[..., 0]).expand(3, 4)  # ρ = 1 exactly
    nngp[..., 1] = (-1.5 / c[..., 0]).expand(3, 4)  # ρ below −1: clamped
    for tangent in ("same", "separate"):
        fused = _gradients("erf", nngp, theta, v1, v2, w, tangent, fused=True)
        reference = _gradients("erf", nngp, theta, v1, v2, w, tangent, fused=False)
        for a, b in zip(fused, reference):
            assert (a - b).abs().max() <= 1e-12 * float(b.abs().max())


@pytest.mark.parametrize("activation", ["erf", "exp"])
def test_gradcheck_and_second_derivatives(activation):
    """gradcheck (central differences of the fused forward) and gradgradcheck: a recorded
    backward (create_graph) differentiates the torch formulas, so second derivatives are exact."""
    nngp, theta, v1, v2, w = _inputs(3, shape=(3, 4, 11))
    args = [x.clone().requires_grad_(True) for x in (nngp, theta, v1, v2)]
    fn = lambda *x: pooled_dual(activation, *x, w)  # noqa: E731
    assert torch.autograd.gradcheck(fn, args)
    assert torch.autograd.gradgradcheck(fn, args)


@pytest.mark.parametrize("activation", ["erf", "exp"])
@pytest.mark.parametrize("tangent", ["none", "same"])
def test_recorded_backward_of_a_self_kernel_counts_each_path_once(activation, tangent):
    """A self-kernel pass: the variance v is the identity entry of K itself and one tensor is
    both sides' variance. The gradient of a downstream function with respect to the leaf that
    K comes from must be the same through the compiled backward, the recorded backward
    (create_graph, as derivative kernels of deeper networks take it) and autograd of the
    torch formulas; the recorded one once added the paths through v twice."""
    gen = torch.Generator().manual_seed(5)
    n, k = 4, 12
    leaf0 = torch.rand(n, k + 1, generator=gen, dtype=torch.float64) * 0.5
    leaf0[:, -1] += 1.0  # the identity entry: the largest value, as a variance
    w = torch.rand(k + 1, generator=gen, dtype=torch.float64)
    w[-1] = 0.0  # the identity has weight 0, as in the engine's measures
    cotangent = torch.rand(n, generator=gen, dtype=torch.float64)

    def gradient(fused: bool, create_graph: bool) -> torch.Tensor:
        leaf = leaf0.clone().requires_grad_(True)
        psi = leaf.square()  # a non-leaf K, as the layers before the pool give
        var = psi[:, -1:]
        ntk = psi if tangent == "same" else None
        if fused:
            f, th = pooled_dual(activation, psi, ntk, var, var, w / w.sum())
        else:
            F, Fdot = get_activation(activation).dual(psi, var, var)
            f, th = F @ (w / w.sum()), None if ntk is None else (Fdot * ntk) @ (w / w.sum())
        out = f if th is None else f + th
        (g,) = torch.autograd.grad((out * cotangent).sum(), leaf, create_graph=create_graph)
        return g.detach()

    reference = gradient(fused=False, create_graph=False)
    for create_graph in (False, True):
        got = gradient(fused=True, create_graph=create_graph)
        assert (got - reference).abs().max() <= 1e-13 * float(reference.abs().max())


def test_other_activations_weights_and_devices_are_not_compiled():
    nngp, _, _, _, w = _inputs(4, shape=(2, 2, 5))
    assert not backward_available("relu", nngp, w)
    assert not backward_available("erf", nngp, w.clone().requires_grad_(True))
    assert not backward_available("erf", nngp.to(torch.int64), w)
