"""The fused activation-then-mean (molntk.kernels.pooled_activations) against torch.

Independent references: libm's arcsin (through torch) for the polynomial arcsin, and the
torch dual activations followed by a weighted sum for the fused loop. Tolerances come from
rounding: the fused loop and the torch path evaluate the same formulas in float64, so for
each pair they differ by at most a few ulp per value times the size of the summed terms,
|Σ w F − fused| ≤ c · K · ε · Σ_k |w_k F_k| (c = 4: two roundings in the value, two in
the sum; K terms).
"""

from __future__ import annotations

import numba
import numpy as np
import pytest
import torch

from molntk.kernels.activations import get_activation
from molntk.kernels.pooled_activations import FusedPooledDual, asin_poly, fused_available, pooled_dual
from molntk.kernels.so3 import Dense, GroupConv, Lift, Nonlinearity, Pool, SO3Grid, serial
from molntk.kernels.so3.state import InputPair
from tests.helpers.so3 import random_coefficients

EPS = float(np.finfo(np.float64).eps)


@numba.njit
def _asin_all(xs, out):
    for i in range(xs.size):
        out[i] = asin_poly(xs[i])


def test_polynomial_arcsin_is_within_three_ulp_of_libm():
    """Dense grid over [−1, 1] plus the branch point ±1/2, the ends, tiny and signed-zero
    inputs; the fit error (≈1e-17) and the rounding of the big branch allow ≈ 2 ulp."""
    xs = np.concatenate([
        np.linspace(-1.0, 1.0, 2_000_001),
        np.nextafter(0.5, [0.0, 1.0]), -np.nextafter(0.5, [0.0, 1.0]),
        np.array([1e-300, -1e-300, 5e-324, 1e-8, -1e-8, 0.0, -0.0, 1.0 - 2**-53, -1.0]),
    ])
    out = np.empty_like(xs)
    _asin_all(xs, out)
    ref = torch.asin(torch.from_numpy(xs)).numpy()
    ulp = np.spacing(np.abs(ref))
    assert np.all(np.abs(out - ref) <= 3 * ulp)
    assert np.signbit(out[xs == 0.0]).tolist() == np.signbit(xs[xs == 0.0]).tolist()


def _inputs(shape, seed, zero_variance=False):
    """Pre-activation kernels with |K| ≤ √(v v') (a valid covariance) and variances
    broadcast as the SO(3) engine passes them: (n1, 1, 1) and (1, n2, 1) for (n1, n2, K)."""
    g = torch.Generator().manual_seed(seed)
    n1, n2, k = shape
    v1 = torch.rand(n1, 1, 1, generator=g, dtype=torch.float64) * 3 + 0.1
    v2 = torch.rand(1, n2, 1, generator=g, dtype=torch.float64) * 3 + 0.1
    if zero_variance:
        v1[0] = 0.0
    corr = torch.rand(n1, n2, k, generator=g, dtype=torch.float64) * 2 - 1
    nngp = corr * (v1 * v2).sqrt()
    theta = nngp * 1.7 + torch.rand(n1, n2, k, generator=g, dtype=torch.float64)
    w = torch.rand(k, generator=g, dtype=torch.float64)
    return nngp, theta, v1, v2, w / w.sum()


def _torch_terms(activation, nngp, ntk, v1, v2):
    """The summands F and Θ·Ḟ of the torch path (None for Θ·Ḟ without ``ntk``)."""
    f, fdot = get_activation(activation).dual(nngp, v1, v2)
    return f, (None if ntk is None else fdot * ntk)


def _assert_within_rounding(fused, terms, w):
    """|fused − Σ w t| ≤ 4 K ε Σ |w t| for each pair."""
    reference = terms @ w
    bound = 4 * terms.shape[-1] * EPS * (terms.abs() @ w.abs()) + 1e-300
    assert torch.all((fused - reference).abs() <= bound), float(((fused - reference).abs() / bound).max())


@pytest.mark.parametrize("activation", ["erf", "relu"])
@pytest.mark.parametrize("tangent", ["none", "same", "separate"])
def test_fused_loop_equals_torch_dual_then_weighted_sum(activation, tangent):
    nngp, theta, v1, v2, w = _inputs((7, 9, 257), seed=1, zero_variance=activation == "relu")
    ntk = {"none": None, "same": nngp, "separate": theta}[tangent]
    assert fused_available(activation, nngp)
    f, t = pooled_dual(activation, nngp, ntk, v1, v2, w)
    f_terms, t_terms = _torch_terms(activation, nngp, ntk, v1, v2)
    assert f.shape == (7, 9) and f.dtype == torch.float64
    _assert_within_rounding(f, f_terms, w)
    if ntk is None:
        assert t is None
    else:
        _assert_within_rounding(t, t_terms, w)


def test_fused_loop_on_self_kernels_and_float32():
    """Self-kernel shape (n, K) with variances (n, 1); float32 values are read exactly,
    computed in float64 and rounded once to float32."""
    nngp, theta, v1, v2, w = _inputs((1, 11, 64), seed=2)
    var = v2[0]  # (11, 1)
    k = nngp[0].abs().clamp(max=1.0) * var.sqrt() * var.sqrt()  # |K| ≤ v on both sides
    f, t = pooled_dual("erf", k, k, var, var, w)
    f_terms, t_terms = _torch_terms("erf", k, k, var, var)
    _assert_within_rounding(f, f_terms, w)
    _assert_within_rounding(t, t_terms, w)
    f32, t32 = pooled_dual("erf", k.float(), k.float(), var.float(), var.float(), w.float())
    assert f32.dtype == torch.float32
    f64, t64 = pooled_dual("erf", k.float().double(), k.float().double(), var.float().double(), var.float().double(), w.float().double())
    assert torch.allclose(f32.double(), f64, rtol=np.finfo(np.float32).eps, atol=0)
    assert torch.allclose(t32.double(), t64, rtol=np.finfo(np.float32).eps, atol=0)


def test_results_do_not_depend_on_grouping_alignment_or_threads():
    """The same pair gives the same bits whatever else is in the call, wherever its values
    sit in memory, and with one or two threads (blockwise = one-shot kernels)."""
    nngp, _, v1, v2, w = _inputs((40, 30, 257), seed=3)
    k = nngp.reshape(-1, 257)
    va, vb = v1.expand(40, 30, 1).reshape(-1, 1), v2.expand(40, 30, 1).reshape(-1, 1)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        f1, t1 = pooled_dual("erf", k, k, va, vb, w)
        torch.set_num_threads(2)
        f2, t2 = pooled_dual("erf", k, k, va, vb, w)
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(f1, f2) and torch.equal(t1, t2)
    for offset in (1, 3):
        buffer = torch.empty(k.numel() + offset, dtype=torch.float64)
        buffer[offset:] = k.reshape(-1)
        shifted = buffer[offset:].view_as(k)  # contiguous, misaligned by `offset` doubles
        f3, t3 = pooled_dual("erf", shifted[5:], shifted[5:], va[5:], vb[5:], w)
        assert torch.equal(f3, f1[5:]) and torch.equal(t3, t1[5:])


def test_other_activations_take_the_torch_path():
    nngp, theta, v1, v2, w = _inputs((3, 4, 16), seed=4)
    assert not fused_available("quadratic", nngp)
    f, t = pooled_dual("quadratic", nngp, theta, v1, v2, w)
    f_terms, t_terms = _torch_terms("quadratic", nngp, theta, v1, v2)
    assert torch.equal(f, f_terms @ w) and torch.equal(t, t_terms @ w)


@pytest.mark.parametrize("activation", ["erf", "relu"])
def test_network_fuses_nonlinearity_and_pool_and_matches_layer_by_layer(activation):
    """SO3Network.steps merges σ → Pool into one step; the kernel equals the layer-by-layer
    recursion (σ on the group values, then the mean) to rounding, with a GroupConv before σ
    so that Θ ≠ K at the fused step."""
    net = serial(Lift(3, 1.5, 0.5), Nonlinearity(activation), GroupConv(3, 1.2, 0.3), Nonlinearity(activation), Pool(), Dense(1.0, 0.1))
    ctx = net.discretisation(SO3Grid(3), "fast")
    assert len(net.steps(ctx)) == len(net.layers) - 2  # σ + Pool are one step
    x = random_coefficients(5, 3, 3, seed=11)
    fused = net.kernel(x, ctx=ctx)
    state = InputPair(x, x, same=True)
    for layer in net.layers:
        state = layer.kernel(state, ctx, ntk=True)
    assert torch.allclose(fused.ntk, state.ntk, rtol=1e-13, atol=0)
    assert torch.allclose(fused.nngp, state.nngp, rtol=1e-13, atol=0)


@pytest.mark.parametrize("activation", ["erf", "relu"])
def test_recorded_calls_are_differentiable(activation):
    """With inputs that autograd records, pooled_dual gives the values of the detached fused
    pass (to the fused arcsin's few ulp) and gradients that pass gradcheck: the compiled
    backward for erf (FusedPooledDual), the torch formulas for ReLU; second derivatives
    (a recorded backward) pass gradgradcheck."""
    gen = torch.Generator().manual_seed(1)
    k = ((torch.rand(6, 7, generator=gen, dtype=torch.float64) - 0.5) * 0.8).requires_grad_(True)
    theta = torch.rand(6, 7, generator=gen, dtype=torch.float64).requires_grad_(True)
    var1 = (torch.rand(6, 1, generator=gen, dtype=torch.float64) + 0.5).requires_grad_(True)
    var2 = (torch.rand(6, 1, generator=gen, dtype=torch.float64) + 0.5).requires_grad_(True)
    w = torch.rand(7, generator=gen, dtype=torch.float64)
    fused = pooled_dual(activation, k.detach(), theta.detach(), var1.detach(), var2.detach(), w)
    recorded = pooled_dual(activation, k, theta, var1, var2, w)
    assert all(r.requires_grad for r in recorded)
    for a, b in zip(fused, recorded):
        torch.testing.assert_close(b.detach(), a, rtol=1e-14, atol=0)
    assert torch.autograd.gradcheck(lambda *x: pooled_dual(activation, *x, w), (k, theta, var1, var2))
    assert torch.autograd.gradgradcheck(lambda *x: pooled_dual(activation, *x, w), (k, theta, var1, var2))


@pytest.mark.parametrize("tangent", ["same", "separate"])
def test_compiled_backward_equals_torch_gradients(tangent, monkeypatch):
    """erf's compiled backward (FusedPooledDual) against autograd through the torch formulas:
    gradients of Σ (a F̄ + b Θ̄) with respect to K, Θ and both variances (broadcast (n1, 1, 1)
    and (1, n2, 1), summed back) agree to rounding, also where ρ is clamped (K at and beyond
    the edge ±√d / 2, where both give no gradient through ρ)."""
    nngp, theta, v1, v2, w = _inputs((5, 6, 97), seed=7)
    d = (1 + 2 * v1) * (1 + 2 * v2)
    nngp[0, :, :3] = torch.tensor([1.0, -1.0, 1.5]) * d[0].sqrt() / 2  # ρ = ±1, beyond: clamped
    a, b = torch.rand(5, 6, dtype=torch.float64), torch.rand(5, 6, dtype=torch.float64)

    def gradients(fn):
        inputs = [t.clone().requires_grad_(True) for t in (nngp, theta, v1, v2)]
        k, th, va, vb = inputs
        f, t = fn(k, k if tangent == "same" else th, va, vb)
        ((a * f).sum() + (b * t).sum()).backward()
        return [x.grad for x in inputs if x.grad is not None]

    fused = gradients(lambda *x: pooled_dual("erf", *x, w))
    torch_path = gradients(lambda k, th, va, vb: tuple(t @ w for t in _torch_terms("erf", k, th, va, vb)))
    assert len(fused) == len(torch_path) == (3 if tangent == "same" else 4)
    for got, want in zip(fused, torch_path):
        assert got.shape == want.shape
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-14 * float(want.abs().max()))
    if tangent == "separate":  # no gradient through a clamped ρ
        assert torch.equal(fused[0][0, :, :3], torch.zeros(6, 3, dtype=torch.float64))
    calls = []
    monkeypatch.setattr(FusedPooledDual, "backward", staticmethod(lambda ctx, *g: calls.append(1) or (None,) * 6))
    gradients(lambda *x: pooled_dual("erf", *x, w))
    assert calls  # the compiled backward ran, not the torch formulas
