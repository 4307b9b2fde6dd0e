"""Dual activations against numerical Gaussian integration.

E[σ(u)σ(v)] and E[σ'(u)σ'(v)] for (u, v) ~ N(0, [[k11, k12], [k12, k22]]) are computed by
a 2-d Gauss–Hermite product rule (200 nodes per axis) after a Cholesky transform for the
smooth activations (erf, x², x), which it integrates to ~1e-12. ReLU's kink and its
derivative's step defeat Gauss–Hermite, so for ReLU the expectations are integrals over
the positive quadrant, ∫∫_{u,v>0} u v p(u, v) and ∫∫_{u,v>0} p(u, v), done by adaptive
quadrature (scipy dblquad, smooth integrands, absolute error < 1e-10).
"""

import math

import numpy as np
import pytest
import torch
from scipy import integrate, stats

from molntk.kernels.activations import ACTIVATIONS

NODES = 200


def gauss_expectation(fn, k11, k12, k22, n=NODES):
    x, w = np.polynomial.hermite_e.hermegauss(n)  # weight exp(-x^2/2)
    w = w / math.sqrt(2 * math.pi)
    a = math.sqrt(k11)
    b = k12 / a
    c = math.sqrt(max(k22 - b * b, 0.0))
    X, Y = np.meshgrid(x, x, indexing="ij")
    W = np.outer(w, w)
    u = a * X
    v = b * X + c * Y
    return float((W * fn(u) * fn(v)).sum())


def relu_expectations(k11, k12, k22):
    density = stats.multivariate_normal(mean=[0, 0], cov=[[k11, k12], [k12, k22]]).pdf
    opts = dict(epsabs=1e-12, epsrel=1e-10)
    f = integrate.dblquad(lambda v, u: u * v * density([u, v]), 0, np.inf, 0, np.inf, **opts)[0]
    fdot = integrate.dblquad(lambda v, u: density([u, v]), 0, np.inf, 0, np.inf, **opts)[0]
    return f, fdot


NUMPY = {
    "relu": (lambda x: np.maximum(x, 0), lambda x: (x > 0).astype(float)),
    "erf": (lambda x: np.vectorize(math.erf)(x), lambda x: 2 / math.sqrt(math.pi) * np.exp(-x * x)),
    "quadratic": (lambda x: x * x, lambda x: 2 * x),
    "hermite2": (lambda x: x * x - 1, lambda x: 2 * x),
    "exp": (np.exp, np.exp),
    "identity": (lambda x: x, lambda x: np.ones_like(x)),
}
TOL = {"relu": (1e-8, 1e-8), "erf": (1e-9, 1e-9), "quadratic": (1e-9, 1e-9), "hermite2": (1e-9, 1e-9), "exp": (1e-9, 1e-9), "identity": (1e-9, 1e-9)}
COVS = [(1.0, 0.3, 2.0), (0.5, -0.4, 0.7), (2.0, 1.9, 2.0), (0.1, 0.0, 3.0), (1.3, -1.2, 1.2)]


@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
@pytest.mark.parametrize("cov", COVS)
def test_dual_matches_gaussian_quadrature(name, cov):
    k11, k12, k22 = cov
    f_np, df_np = NUMPY[name]
    t = lambda v: torch.tensor(v, dtype=torch.float64)  # noqa: E731
    f, fdot = ACTIVATIONS[name].dual(t(k12), t(k11), t(k22))
    if name == "relu":
        ref_f, ref_fdot = relu_expectations(k11, k12, k22)
    else:
        ref_f = gauss_expectation(f_np, k11, k12, k22)
        ref_fdot = gauss_expectation(df_np, k11, k12, k22)
    tol_f, tol_fdot = TOL[name]
    scale = math.sqrt(k11 * k22)
    assert abs(float(f) - ref_f) <= tol_f * max(1.0, scale, abs(ref_f))
    assert abs(float(fdot) - ref_fdot) <= tol_fdot * max(1.0, abs(ref_fdot))


@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
def test_finite_apply_matches_numpy(name):
    x = torch.linspace(-3, 3, 13, dtype=torch.float64)
    np.testing.assert_allclose(ACTIVATIONS[name].apply(x).numpy(), NUMPY[name][0](x.numpy()), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", ["relu", "erf"])
def test_dual_on_diagonal_is_finite(name):
    k = torch.tensor([0.0, 1e-30, 1.0, 7.0], dtype=torch.float64)
    f, fdot = ACTIVATIONS[name].dual(k, k, k)
    assert torch.isfinite(f).all() and torch.isfinite(fdot).all()


@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
def test_dual_is_differentiable_and_equals_the_in_place_evaluation(name):
    """While autograd records (forces), each dual makes fresh tensors instead of updating the
    ones autograd saved: its values equal the in-place evaluation's bit for bit, and its
    gradients with respect to k12, k11, k22 pass torch's gradcheck (central differences,
    float64). ReLU is evaluated away from its kink at cos θ = ±1."""
    gen = torch.Generator().manual_seed(0)
    k11 = (torch.rand(3, 1, 1, generator=gen, dtype=torch.float64) + 0.5).requires_grad_(True)
    k22 = (torch.rand(1, 4, 1, generator=gen, dtype=torch.float64) + 0.5).requires_grad_(True)
    k12 = ((torch.rand(3, 4, 5, generator=gen, dtype=torch.float64) - 0.5) * 0.8).requires_grad_(True)
    dual = ACTIVATIONS[name].dual
    with torch.no_grad():
        f0, fdot0 = dual(k12, k11, k22)
    f, fdot = dual(k12, k11, k22)
    assert torch.equal(f, f0) and torch.equal(fdot, fdot0)
    assert torch.autograd.gradcheck(lambda a, b, c: dual(a, b, c), (k12, k11, k22))
