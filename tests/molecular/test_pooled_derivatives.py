"""Closed-form position derivatives of the molecular NTK (molntk.molecular.pooled_derivatives)
against the autograd route of molntk.molecular.derivative_kernels (3n second-order backward
passes through the feature maps and the network's torch formulas, itself checked against
finite differences in test_derivative_kernels.py).

Both routes compute the same derivatives of the same floating-point formulas in a different
order, so they agree to rounding: measured ≤ 1.5e-15 relative to the largest entry on these
inputs; bound 1e-12 (a missing or wrong term of the chain rule is an O(1) error: a first
version that dropped every second derivative of g was off by 3 %).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from molntk.data.labelled import read_labelled
from molntk.data.molecule import Molecule
from molntk.errors import InputError
from molntk.features.environments import FeatureConfig
from molntk.features.radial import GaussianBasis
from molntk.models.so3_recipe import SO3ModelRecipe
from molntk.molecular.derivative_kernels import derivative_rows, expansion_energy_and_gradient, joint_kernel
from molntk.molecular.pooled_derivatives import (VALUE_BUDGET, _curvature_term, _curvature_through_basis, closed_form_rows,
                                                contracted_tangent_features, tangent_features, value_budget)

pytestmark = pytest.mark.usefixtures("one_thread")

SAMPLE = Path(__file__).resolve().parents[2] / "data" / "md" / "ethanol_sample.extxyz"
FEATURES = FeatureConfig(elements=(1, 6, 8), radial=GaussianBasis(n=4, r_min=0.5, r_cut=3.0))
BOUND = 1e-12


def kernel(layers: str = "lift:3 erf pool dense", **kwargs):
    return SO3ModelRecipe(layers=layers, grid_band_limit=2, features=FEATURES, sigma_w=1.5, **kwargs).molecular_kernel()


@pytest.fixture(scope="module")
def frames() -> list[Molecule]:
    """Ethanol frames and, to exercise molecules of different sizes, one frame without its
    last three hydrogens (6 atoms)."""
    molecules = read_labelled(SAMPLE, "energy").molecules
    cut = molecules[5]
    return [molecules[0], molecules[9], Molecule(cut.numbers[:6], cut.positions[:6], id="cut")]


def relative_error(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(a - b).max() / np.abs(a).max())


@pytest.mark.parametrize("activation", ["erf", "exp", "relu", "quadratic"])
@pytest.mark.parametrize("pairing", ["element", "shared"])
def test_closed_form_rows_equal_autograd(frames, activation, pairing):
    """Θ, ∂Θ/∂r', ∂Θ/∂r and ∂²Θ/∂r∂r' of a query against references of two sizes (9 and 6
    atoms: the padded reference coordinates), for the closed-form activations (erf, exp) and
    two that take the g-derivatives by autograd (relu, quadratic)."""
    k = kernel(f"lift:3 {activation} pool dense", pairing=pairing)
    auto = derivative_rows(k, frames[0], frames[1:], method="autograd")
    closed = derivative_rows(k, frames[0], frames[1:], method="closed-form")
    for name in ("theta", "d_ref", "d_query", "mixed"):
        assert relative_error(getattr(auto, name), getattr(closed, name)) < BOUND, name
    assert np.abs(closed.mixed).max() > 1e-3


def test_mean_reduction_and_a_small_query(frames):
    """``reduce="mean"`` divides every block by n n'; the 6-atom molecule as the query."""
    k = kernel(reduce="mean")
    auto = derivative_rows(k, frames[2], frames[:2], method="autograd")
    closed = derivative_rows(k, frames[2], frames[:2], method="closed-form")
    for name in ("theta", "d_ref", "d_query", "mixed"):
        assert relative_error(getattr(auto, name), getattr(closed, name)) < BOUND, name


def test_joint_kernel_equals_autograd(frames):
    """The symmetric joint matrix (tangent maps made once, each pair computed once) by both routes."""
    k = kernel()
    np.testing.assert_allclose(joint_kernel(k, frames, method="closed-form"), joint_kernel(k, frames, method="autograd"),
                               rtol=0, atol=BOUND * np.abs(joint_kernel(k, frames[:1], method="autograd")).max())


@pytest.mark.parametrize(("activation", "pairing", "reduce"), [("erf", "element", "sum"), ("exp", "shared", "sum"),
                                                               ("relu", "element", "mean"), ("quadratic", "shared", "mean")])
@pytest.mark.parametrize("query", [1, 2])
def test_expansion_equals_autograd(frames, activation, pairing, reduce, query):
    """The expansion s(M) = Σ a_j Θ + Σ b_jᵀ ∂Θ/∂r'_j and its gradient (reference tangents
    contracted with b first, every term pulled back through the lift in one pass) by both
    routes: closed-form and autograd g-derivatives, both pairings and reductions, queries of 9
    and 6 atoms against references of 9 and 6 atoms, the query among them (a self-pair, as for
    a training frame) except for relu, whose g-derivatives are infinite where an environment
    meets itself (C = v at the identity rotation, a point of the grid: both routes give NaN)."""
    k = kernel(f"lift:3 {activation} pool dense", pairing=pairing, reduce=reduce)
    refs = [m for i, m in enumerate(frames) if i != query or activation != "relu"]
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=len(refs)), rng.normal(size=3 * sum(m.n_atoms for m in refs))
    value, grad = expansion_energy_and_gradient(k, frames[query], refs, a, b, method="autograd")
    value2, grad2 = expansion_energy_and_gradient(k, frames[query], refs, a, b, method="closed-form")
    assert value2 == pytest.approx(value, rel=BOUND)
    assert relative_error(grad, grad2) < BOUND


def test_contracted_tangents_in_batches(frames):
    """contracted_tangent_features in batches of one molecule = tangent_features(...).contracted."""
    k = kernel()
    coef = torch.as_tensor(np.random.default_rng(1).normal(size=3 * (9 + 9 + 6)))
    whole = tangent_features(k, frames).contracted(coef)
    batched = contracted_tangent_features(k, frames, coef, batch=1)
    assert batched.n_atoms == whole.n_atoms
    for name in ("coeffs", "tangents", "variance", "variance_dot", "numbers", "molecule_index"):
        torch.testing.assert_close(getattr(batched, name), getattr(whole, name), rtol=0, atol=1e-15)


def test_method_is_checked(frames):
    with pytest.raises(InputError, match="method"):
        derivative_rows(kernel(), frames[0], frames[1:2], method="symbolic")
    with pytest.raises(InputError, match="method"):
        derivative_rows(kernel("lift:3 erf pool dense erf dense"), frames[0], frames[1:2], method="closed-form")


def test_chunking_does_not_change_the_rows(frames):
    """One reference molecule per chunk (budget 1) and all in one (the default) give the same
    rows to rounding (the chunks only split the sum over reference molecules)."""
    k = kernel()
    tangents = tangent_features(k, frames)
    query, refs = tangents.molecules(0, 1), tangents.molecules(0, 3)
    for one, many in zip(closed_form_rows(k, query, refs), closed_form_rows(k, query, refs, budget=1)):
        np.testing.assert_allclose(many, one, rtol=0, atol=1e-15 * np.abs(one).max())


def test_the_chunk_budget_grows_with_a_cuda_device_free_memory(monkeypatch):
    """CPU: VALUE_BUDGET; CUDA: 1/64 of the free memory in float64 values, never below VALUE_BUDGET."""
    assert value_budget("cpu") == VALUE_BUDGET
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (80 * 2**30, 141 * 2**30))
    assert value_budget(torch.device("cuda")) == 80 * 2**30 // 512
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (2**20, 141 * 2**30))
    assert value_budget("cuda:0") == VALUE_BUDGET


def test_closed_form_rows_with_mixed_elements_equal_autograd(frames):
    """With neighbour elements mixed (``element_width`` 1.5) the tangent maps carry A along the
    elements; the autograd route differentiates through the mixed feature maps."""
    features = FeatureConfig(elements=(1, 6, 8), radial=GaussianBasis(n=4, r_min=0.5, r_cut=3.0), element_width=1.5)
    k = SO3ModelRecipe(layers="lift:3 erf pool dense", grid_band_limit=2, features=features, sigma_w=1.5).molecular_kernel()
    auto = derivative_rows(k, frames[0], frames[1:], method="autograd")
    closed = derivative_rows(k, frames[0], frames[1:], method="closed-form")
    for name in ("theta", "d_ref", "d_query", "mixed"):
        assert relative_error(getattr(auto, name), getattr(closed, name)) < BOUND, name
    plain = derivative_rows(kernel(), frames[0], frames[1:], method="closed-form")
    assert relative_error(auto.mixed, plain.mixed) > 1e-3  # the mixing matters here


@pytest.mark.parametrize("grid", [2, 7])
def test_the_two_curvature_routes_agree(grid):
    """The curvature term Σ_a Σ_u h(u) (m_e · D(u)) (m'_ε · D(u)) through H = Σ_u h D Dᵀ formed in
    the measure's products basis equals its projection on the support (the route for few
    reference coordinates), on random moments and weights: two orders of the same sums, to
    rounding (bound 1e-12 of the largest entry; a wrong basis or transposed H is O(1)). Which
    route a pair takes follows the operation counts: 2 reference atoms project, 3 go through H
    on the grid of band limit 7."""
    k = SO3ModelRecipe(grid_band_limit=grid, features=FEATURES).molecular_kernel()
    table = k.ctx.measure.table(3, torch.float64, "cpu")[:-1]
    products = k.ctx.measure.support_product_basis(3, torch.float64, "cpu")
    gen = torch.Generator().manual_seed(grid)
    m_q, m_r = torch.randn(3, 4, 27, 35, generator=gen, dtype=torch.float64), torch.randn(3, 4, 12, 35, generator=gen, dtype=torch.float64)
    h = torch.randn(3, 4, table.shape[0], generator=gen, dtype=torch.float64)
    through_h = _curvature_term(m_q, m_r, h, table, products)
    projected = _curvature_term(m_q, m_r, h, table, None)
    assert through_h.shape == (4, 27, 12)
    assert relative_error(projected.numpy(), through_h.numpy()) < BOUND
    if grid == 7:
        rank = products[0].shape[1]
        assert rank == 165
        assert not _curvature_through_basis(63, 6, *table.shape, rank)
        assert _curvature_through_basis(63, 9, *table.shape, rank)
