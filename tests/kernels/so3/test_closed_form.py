"""The closed-form first step Lift → quadratic → Pool (SO3Network.pools_in_closed_form).

Proved against independent computations: the Haar mean of the squared lift kernel against a
brute-force product quadrature of the literally rotated inputs (numpy Gauss–Legendre in
cos β, uniform α and γ: exact for the degree-4 integrand, so the bound is rounding, 1e-12),
and whole networks against the engine's quadrature route on grids that integrate the
square exactly (the same kernel; only the order of the sums differs: measured ≤ 1e-15
relative, bound 1e-12). A wrong factor in the Schur orthogonality or the dual is an O(1)
error.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from e3nn import o3

from molntk.kernels.so3 import Dense, LayerNorm, Lift, Nonlinearity, Pool, SO3Grid, serial
from molntk.kernels.so3.lift import lift_moments
from molntk.kernels.so3.network import SO3Network
from tests.helpers.so3 import random_coefficients, rotate_coefficients

BOUND = 1e-12

NETWORKS = {
    "quadratic lift": serial(Lift(3, 1.3, 0.4), Nonlinearity("quadratic"), Pool(), Dense(1.1, 0.2)),
    "layer-normed quadratic head": serial(Lift(3, 1.3, 0.0), Nonlinearity("quadratic"), Pool(), LayerNorm(), Dense(1.0, 0.0),
                                          Nonlinearity("quadratic"), Dense(1.0, 0.0)),
    "layer norm before the square": serial(Lift(3, 1.3, 0.4), LayerNorm(), Nonlinearity("quadratic"), Pool(), Dense(1.1, 0.2)),
    "normalised power spectrum head": serial(Lift(3, 1.3, 0.0), LayerNorm(), Nonlinearity("hermite2"), Pool(), LayerNorm(),
                                             Dense(1.0, 0.0), Nonlinearity("quadratic"), Dense(1.0, 0.0)),
    "hermite square without the norm": serial(Lift(3, 0.9, 0.5), Nonlinearity("hermite2"), Pool(), Dense(1.0, 0.3)),
    "deeper head with bias": serial(Lift(4, 0.9, 0.7), Nonlinearity("quadratic"), Pool(), Dense(1.2, 0.3), Nonlinearity("erf"),
                                    Dense(1.0, 0.1)),
}


def brute_force_mean_square(lift: Lift, x1: torch.Tensor, x2: torch.Tensor, n: int = 10) -> torch.Tensor:
    """∫ K(g)² dg with K(g) = σ_w²/C Σ_c ⟨D(g) f̂_c, f̂'_c⟩ + σ_b² (the lift kernel of the rotated
    first input), by the product rule of n Gauss–Legendre nodes in cos β and n uniform α, γ."""
    x, w = np.polynomial.legendre.leggauss(n)
    uniform = 2 * math.pi * np.arange(n) / n
    a, b, g = (torch.as_tensor(t.reshape(-1)) for t in np.meshgrid(uniform, np.arccos(x), uniform, indexing="ij"))
    weights = torch.as_tensor(np.repeat(np.tile(w / 2, n), n) / n**2)
    rotations = o3.angles_to_matrix(a, b, g)
    L2 = lift.band_limit**2
    out = torch.zeros(x1.shape[0], x2.shape[0], dtype=torch.float64)
    for R, q in zip(rotations, weights):
        turned = rotate_coefficients(x1[..., :L2], R, lift.band_limit)
        K = lift.sigma_w**2 / x1.shape[1] * torch.einsum("icm,jcm->ij", turned, x2[..., :L2]) + lift.sigma_b**2
        out += q * K * K
    return out


@pytest.mark.parametrize("lift", [Lift(3, 1.3, 0.4), Lift(4, 0.8, 0.0)])
def test_haar_mean_square_is_the_integral_of_the_squared_lift_kernel(lift):
    x1, x2 = random_coefficients(4, 3, 4, seed=1), random_coefficients(5, 3, 4, seed=2)
    got = lift.haar_mean_square(lift_moments(x1, x2, lift.band_limit), x1.shape[1])
    expected = brute_force_mean_square(lift, x1, x2)
    torch.testing.assert_close(got, expected, rtol=BOUND, atol=0)


def grid_route(net: SO3Network, monkeypatch: pytest.MonkeyPatch, *args, **kwargs):
    """``net.kernel`` with the closed form switched off (the measure's quadrature)."""
    with monkeypatch.context() as patch:
        patch.setattr(SO3Network, "pools_in_closed_form", lambda self, ctx: False)
        return net.kernel(*args, **kwargs)


@pytest.mark.parametrize("name", NETWORKS)
@pytest.mark.parametrize(("grid", "mode"), [(SO3Grid(4), "exact"), (SO3Grid(4, "lebedev"), "fast"),
                                            (SO3Grid(5, "driscoll-healy"), "fast")])
def test_closed_form_is_the_quadrature_it_replaces(name, grid, mode, monkeypatch):
    """NNGP, NTK and self-kernels of whole networks (heads after the pool read the closed-form
    pooled self-kernels) equal the grid route's, cross and symmetric calls."""
    net = NETWORKS[name]
    ctx = net.discretisation(grid, mode)
    assert net.pools_in_closed_form(ctx)
    x1, x2 = random_coefficients(6, 4, 4, seed=3), random_coefficients(5, 4, 4, seed=4)
    for args in ((x1, x2), (x1,)):
        closed, quadrature = net.kernel(*args, ctx=ctx), grid_route(net, monkeypatch, *args, ctx=ctx)
        for field in ("nngp", "ntk", "self1", "self2"):
            torch.testing.assert_close(getattr(closed, field), getattr(quadrature, field), rtol=BOUND, atol=0)


def test_coarse_grids_and_other_networks_keep_the_quadrature():
    """A grid that does not integrate degree 2(L − 1) exactly keeps its quadrature (the kernel
    asked for), and so does every network that does not start Lift → quadratic → Pool."""
    quad = NETWORKS["quadratic lift"]
    assert SO3Grid(2).exact_degree < 4 and not quad.pools_in_closed_form(quad.discretisation(SO3Grid(2), "fast"))
    assert quad.pools_in_closed_form(quad.discretisation(SO3Grid(3), "fast"))
    fine = SO3Grid(5)
    for other in (serial(Lift(3), Nonlinearity("erf"), Pool(), Dense()),
                  serial(Lift(3), Nonlinearity("quadratic"), Dense(), Nonlinearity("quadratic"), Pool(), Dense())):
        assert not other.pools_in_closed_form(other.discretisation(fine, "fast"))


def test_closed_form_gradients_are_the_quadratures(monkeypatch):
    """Autograd through the closed form (forces of models that use it) gives the grid route's
    input gradients of the NTK, cross and self terms."""
    net, ctx = NETWORKS["layer-normed quadratic head"], NETWORKS["layer-normed quadratic head"].discretisation(SO3Grid(3), "fast")
    x1, x2 = random_coefficients(3, 4, 3, seed=5), random_coefficients(4, 4, 3, seed=6)
    weights = torch.randn(3, 4, generator=torch.Generator().manual_seed(7), dtype=torch.float64)

    def gradient(route) -> torch.Tensor:
        x = x1.clone().requires_grad_(True)
        out = route(x, x2, ctx=ctx)
        return torch.autograd.grad((out.ntk * weights).sum() + out.self1.sum(), x)[0]

    closed = gradient(net.kernel)
    quadrature = gradient(lambda *a, **k: grid_route(net, monkeypatch, *a, **k))
    torch.testing.assert_close(closed, quadrature, rtol=BOUND, atol=BOUND * float(quadrature.abs().max()))
