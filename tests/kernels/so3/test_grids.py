"""SO(3) quadrature grids and measures: exactness, symmetry, s2fft-compatible sampling."""

import math

import numpy as np
import pytest
import torch

from molntk.kernels.so3.grids import SO3Grid
from molntk.kernels.so3.measures import grid_measure, pair_measure


@pytest.mark.parametrize("sampling", ["gauss-legendre", "driscoll-healy", "lebedev"])
@pytest.mark.parametrize("band_limit", [2, 3, 5])
def test_grid_integrates_wigner_functions_exactly(sampling, band_limit):
    """Σ_a q_a D^l(g_a) = δ_{l0} for every l ≤ exact_degree (≥ 2B − 2: the Haar mean of D^l)."""
    grid = SO3Grid(band_limit, sampling)
    assert grid.exact_degree >= 2 * band_limit - 2
    measure = grid_measure(grid, grid.exact_degree + 1)
    table = measure.table(grid.exact_degree + 1, torch.float64, "cpu")[:-1]
    mean = measure.weights @ table
    expected = torch.zeros_like(mean)
    expected[0] = 1.0
    assert torch.allclose(mean, expected, atol=1e-13)


@pytest.mark.parametrize("sampling", ["gauss-legendre", "driscoll-healy", "lebedev"])
def test_grid_is_not_exact_beyond_its_degree(sampling):
    """The degree bound is sharp: some Wigner entry of degree exact_degree + 1 is not integrated to 0."""
    grid = SO3Grid(3, sampling)
    top_degree = grid.exact_degree + 1
    measure = grid_measure(grid, top_degree + 1)
    table = measure.table(top_degree + 1, torch.float64, "cpu")[:-1]
    top = slice(sum((2 * l + 1) ** 2 for l in range(top_degree)), None)
    assert (measure.weights @ table[:, top]).abs().max() > 1e-3


def test_driscoll_healy_matches_s2fft_sampling():
    """s2fft 'dh' SO(3) sampling for L = N = B: 2B polar angles π(2j+1)/(4B), 2B−1 α and γ."""
    grid = SO3Grid(4, "driscoll-healy")
    assert (grid.n_alpha, grid.n_beta, grid.n_gamma) == (7, 8, 7)
    beta = torch.unique(grid.angles[1])
    np.testing.assert_allclose(beta.numpy(), math.pi * (2 * np.arange(8) + 1) / 16, rtol=0, atol=1e-15)
    assert abs(float(grid.weights.sum()) - 1) < 1e-14


def test_gauss_legendre_grid_is_closed_under_inversion():
    grid = SO3Grid(3)
    mats = grid.matrices
    inverses = mats.transpose(1, 2)
    dist = (inverses[:, None] - mats[None]).abs().amax(dim=(2, 3))
    nearest = dist.min(dim=1)
    assert nearest.values.max() < 1e-12
    assert torch.allclose(grid.weights[nearest.indices], grid.weights, atol=1e-16)


def test_pair_measure_is_the_distribution_of_ga_gb_inverse():
    """The reduced pair measure integrates every function like the full N² node-pair sum."""
    grid = SO3Grid(2)
    reduced = pair_measure(grid, 3)
    mats = grid.matrices
    q = grid.weights
    full_u = torch.einsum("aij,bkj->abik", mats, mats).reshape(-1, 3, 3)
    full_w = (q[:, None] * q[None, :]).reshape(-1)
    # test functions: a few smooth class and non-class functions of the rotation matrix
    def fns(u):
        return torch.stack([u[:, 0, 0] ** 3, u[:, 1, 2] * u[:, 2, 0], torch.exp(u[:, 2, 2]), u.diagonal(dim1=1, dim2=2).sum(-1) ** 2], 1)
    table = reduced.table(3, torch.float64, "cpu")[:-1]
    # e3nn's l = 1 real basis is (x, y, z): D^1(u) is the rotation matrix itself
    u_reduced = table[:, 1:10].reshape(-1, 3, 3)
    assert torch.allclose(full_w @ fns(full_u), reduced.weights @ fns(u_reduced), atol=1e-13)
    assert abs(float(reduced.weights.sum()) - 1) < 1e-13


def test_lebedev_grid_matches_gauss_legendre_exactness_with_fewer_nodes():
    """Lebedev × γ: same exact degree 2B − 1 as Gauss–Legendre with 3/4 of the nodes (B = 5:
    38 × 10 = 380 vs 500), and the fast-mode quadrature of a smooth (erf) network agrees
    with a fine Gauss–Legendre reference about as well as the GL grid of the same degree."""
    from molntk.kernels.so3 import Dense, Lift, Nonlinearity, Pool, serial
    from tests.helpers.so3 import random_coefficients

    leb, gl = SO3Grid(5, "lebedev"), SO3Grid(5)
    assert (leb.n_sphere, leb.n_gamma, len(leb), leb.exact_degree) == (38, 10, 380, gl.exact_degree)
    assert abs(float(leb.weights.sum()) - 1) < 1e-14
    net = serial(Lift(3, 1.0, 1.0), Nonlinearity("erf"), Pool(), Dense(1.0, 0.1))
    x = random_coefficients(6, 4, 3, seed=3, decay=0.7)
    ref = net.kernel(x, ctx=net.discretisation(SO3Grid(10), "fast")).ntk
    errors = {}
    for name, grid in (("lebedev", leb), ("gl", gl), ("gl4", SO3Grid(4))):
        k = net.kernel(x, ctx=net.discretisation(grid, "fast")).ntk
        errors[name] = float((k - ref).abs().max() / ref.abs().max())
    # measured: 3.4e-5 (Lebedev), 6.5e-5 (GL, B = 5), 2.4e-4 (GL, B = 4)
    assert errors["lebedev"] < 2 * errors["gl"] < errors["gl4"]
    with pytest.raises(AttributeError, match="sphere points"):
        leb.n_alpha


@pytest.mark.parametrize("make, full_rank", [(lambda: grid_measure(SO3Grid(7, "lebedev"), 3), True),
                                             (lambda: pair_measure(SO3Grid(2), 3), False),
                                             (lambda: grid_measure(SO3Grid(1, "lebedev"), 3), False)],
                         ids=["lebedev-7", "pairs-2", "lebedev-1"])
def test_support_product_basis_reproduces_the_products_of_wigner_entries(make, full_rank):
    """The products D(u)_i D(u)_j of the band-limit-3 entries (35 columns, 1,225 products) lie in
    the span of the D^λ entries with λ ≤ 4 (Clebsch–Gordan): on the 1,036 points of the
    Lebedev grid of band limit 7 the basis has rank Σ_{λ≤4}(2λ+1)² = 165; on smaller supports
    (a pair measure's repeated structure, a coarse grid) at most that. Either way it reproduces
    every product at every support point to rounding (float64 SVD: ≤ 1e-13 of the largest
    product; the basis less its last direction misses O(1)), and the curvature matrix
    Σ_k h_k D Dᵀ it gives is exactly symmetric and equals the direct sum to the same bound."""
    measure = make()
    table = measure.table(3, torch.float64, "cpu")[:-1]
    products = (table[:, :, None] * table[:, None, :]).flatten(1)
    basis, coefficients = measure.support_product_basis(3, torch.float64, "cpu")
    rank = basis.shape[1]
    assert rank == 165 if full_rank else rank <= min(measure.size, 165)
    assert (basis @ coefficients - products).abs().max() <= 1e-13 * products.abs().max()
    short = basis[:, :-1] @ coefficients[:-1]
    assert (short - products).abs().max() > 1e-3 * products.abs().max()
    h = torch.randn(4, measure.size, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    direct = torch.einsum("nk,ki,kj->nij", h, table, table)
    factored = ((h @ basis) @ coefficients).view(4, 35, 35)
    assert torch.equal(factored, factored.transpose(1, 2))
    assert (factored - direct).abs().max() <= 1e-13 * direct.abs().max()
