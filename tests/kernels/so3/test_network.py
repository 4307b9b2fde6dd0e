"""Proofs of the SO(3) kernel engine against independent computations (engine issue 5a–f).

Inputs are random spherical-harmonic coefficients with a decaying spectrum (the engine
sees only coefficients; real QM9 environments are used in tests/molecular/test_so3.py).
"""

from __future__ import annotations

import doctest

import numpy as np
import pytest
import torch
from e3nn import o3

import molntk.kernels.so3.network as so3_network
from molntk.kernels.activations import get_activation
from molntk.kernels.so3 import Dense, GroupConv, LayerNorm, Lift, Nonlinearity, Pool, SO3Grid, serial
from molntk.kernels.so3.wigner import coeff_slices, wigner_blocks
from molntk.kernels.empirical import empirical_ntk, monte_carlo_nngp
from tests.helpers.so3 import random_coefficients, rotate_coefficients

FULL = serial(
    Lift(3, 1.0, 0.2), Nonlinearity("relu"), GroupConv(2, 1.0, 0.2), Nonlinearity("relu"), Pool(), Dense(1.0, 0.2)
)
#: Layer norms on the group (after the lift) and after the pool, before a quadratic head.
LAYER_NORMED = serial(
    Lift(3, 1.2, 0.3), LayerNorm(), Nonlinearity("erf"), GroupConv(2, 1.0, 0.2), Nonlinearity("relu"), Pool(),
    Dense(1.3, 0.5), LayerNorm(), Nonlinearity("quadratic"), Dense(1.0, 0.1),
)


def literal_node_pair_kernel(layers, x: torch.Tensor, grid: SO3Grid) -> tuple[torch.Tensor, torch.Tensor]:
    """NNGP and NTK of the finite network on ``grid``, kernels stored on all node pairs.

    An independent, literal implementation: K[i, j, a, b] = Cov(z_i(g_a), z_j(g_b)); each
    group convolution acts on both node indices through the forward (quadrature) and
    inverse Wigner transforms of the finite layer. No invariance is assumed.
    """
    L = max(layer.band_limit for layer in layers if hasattr(layer, "band_limit"))
    D = wigner_blocks(L, *grid.angles)
    q = grid.weights
    pooled = False
    for layer in layers:
        if isinstance(layer, Lift):
            K = torch.tensor(layer.sigma_b**2, dtype=torch.float64)
            for l, s in enumerate(coeff_slices(layer.band_limit)):
                rot = torch.einsum("apm,icp->iacm", D[l], x[..., s])
                K = K + layer.sigma_w**2 / x.shape[1] * torch.einsum("iacm,jbcm->ijab", rot, rot)
            T = K.clone()
        elif isinstance(layer, Nonlinearity):
            dual = get_activation(layer.name).dual
            if pooled:
                var = torch.einsum("ii->i", K)
                K, Fd = dual(K, var[:, None], var[None, :])
            else:
                var = torch.einsum("iiaa->ia", K)
                K, Fd = dual(K, var[:, None, :, None], var[None, :, None, :])
            T = T * Fd
        elif isinstance(layer, GroupConv):
            def conv(k):
                out = 0.0
                for l in range(layer.band_limit):
                    m = torch.einsum("a,b,ijab,apq,brq->ijpr", q, q, k, D[l], D[l])
                    out = out + (2 * l + 1) * torch.einsum("ijpr,apm,brm->ijab", m, D[l], D[l])
                return layer.sigma_w**2 * out
            K, T = conv(K) + layer.sigma_b**2, None if T is None else (conv(K) + layer.sigma_b**2 + conv(T))
        elif isinstance(layer, Dense):
            K = layer.sigma_w**2 * K + layer.sigma_b**2
            T = K + layer.sigma_w**2 * T
        elif isinstance(layer, LayerNorm):
            if pooled:
                scale = torch.rsqrt(torch.outer(torch.einsum("ii->i", K), torch.einsum("ii->i", K)))
            else:
                var = torch.einsum("iiaa->ia", K)
                scale = torch.rsqrt(var[:, None, :, None] * var[None, :, None, :])
            K, T = K * scale, T * scale
        elif isinstance(layer, Pool):
            K = torch.einsum("a,b,ijab->ij", q, q, K)
            T = torch.einsum("a,b,ijab->ij", q, q, T)
            pooled = True
    return K, T


@pytest.mark.parametrize("sampling", ["gauss-legendre", "driscoll-healy", "lebedev"])
@pytest.mark.parametrize("activation", ["relu", "erf"])
def test_exact_mode_equals_literal_node_pair_kernel(sampling, activation):
    """Exact mode (pair measure) = the discretised network's kernel on node pairs, to rounding.

    ReLU's Ḟ = (π − arccos ρ)/2π has infinite slope at ρ = 1, which the self-pairs u = e
    reach: the two computations sum in different orders, so ρ differs by a few ulps,
    δρ ≤ 8·2⁻⁵³ ≈ 9e-16, which moves arccos by √(2δρ) ≈ 4e-8 and Ḟ by ≈ 7e-9; with Ḟ ≥ 1/4
    on these pairs that is ≤ 3e-8 relative (measured: 6e-9). So the ReLU NTK is checked to
    5e-8 relative; everything else to 1e-12.
    """
    net = serial(
        Lift(3, 1.1, 0.3), Nonlinearity(activation), GroupConv(3, 0.9, 0.2), Nonlinearity(activation),
        Dense(1.2, 0.1), Nonlinearity(activation), Pool(), Dense(1.0, 0.1), Nonlinearity(activation), Dense(1.0, 0.0),
    )
    x = random_coefficients(3, 2, 3, seed=1)
    grid = SO3Grid(2, sampling)
    got = net.kernel(x, ctx=net.discretisation(grid, "exact"))
    nngp, ntk = literal_node_pair_kernel(net.layers, x, grid)
    assert torch.allclose(got.nngp, nngp, rtol=1e-12, atol=1e-13)
    rtol = 5e-8 if activation == "relu" else 1e-12
    assert torch.allclose(got.ntk, ntk, rtol=rtol, atol=rtol)


@pytest.mark.parametrize("sampling", ["gauss-legendre", "lebedev"])
def test_exact_mode_with_layer_norms_equals_literal_node_pair_kernel(sampling):
    """Layer norms on the group (each node pair divided by √(K_ii(g_a, g_a) K_jj(g_b, g_b)))
    and after the pool: exact mode = the literal node-pair kernel. The ReLU's Ḟ near ρ = 1
    bounds the NTK's agreement at 5e-8 relative, as above."""
    x = random_coefficients(3, 2, 3, seed=1)
    grid = SO3Grid(2, sampling)
    got = LAYER_NORMED.kernel(x, ctx=LAYER_NORMED.discretisation(grid, "exact"))
    nngp, ntk = literal_node_pair_kernel(LAYER_NORMED.layers, x, grid)
    assert torch.allclose(got.nngp, nngp, rtol=1e-12, atol=1e-13)
    assert torch.allclose(got.ntk, ntk, rtol=5e-8, atol=5e-8)


@pytest.mark.parametrize("sampling", ["gauss-legendre", "lebedev"])
def test_exact_mode_of_exp_network_equals_literal_node_pair_kernel(sampling):
    """As above for eˣ, with one exp layer and inputs of moderate size: nested exps of the
    network above overflow (e^{e^k}), which is the network's value, not a rounding issue."""
    net = serial(Lift(3, 1.1, 0.3), Nonlinearity("exp"), GroupConv(3, 0.5, 0.2), Dense(1.2, 0.1), Pool(), Dense(1.0, 0.1))
    x = 0.4 * random_coefficients(3, 2, 3, seed=1)
    grid = SO3Grid(2, sampling)
    got = net.kernel(x, ctx=net.discretisation(grid, "exact"))
    nngp, ntk = literal_node_pair_kernel(net.layers, x, grid)
    assert torch.allclose(got.nngp, nngp, rtol=1e-12, atol=1e-13)
    assert torch.allclose(got.ntk, ntk, rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize("grid_band", [2, 3])
def test_exact_mode_of_normed_hermite_network_equals_literal_node_pair_kernel(grid_band):
    """x² − 1 after a layer norm on the lift, pooled, then a layer-normed quadratic head: on
    the grid of band limit 2 by the quadrature, on 3 (exact to degree 5 ≥ 2(L − 1)) by the
    closed form of SO3Network.pools_in_closed_form; both = the literal node-pair kernel."""
    net = serial(Lift(3, 1.2, 0.3), LayerNorm(), Nonlinearity("hermite2"), Pool(), LayerNorm(), Dense(1.3, 0.2),
                 Nonlinearity("quadratic"), Dense(1.0, 0.1))
    x = random_coefficients(3, 2, 3, seed=1)
    grid = SO3Grid(grid_band)
    ctx = net.discretisation(grid, "exact")
    assert net.pools_in_closed_form(ctx) == (grid_band == 3)
    got = net.kernel(x, ctx=ctx)
    nngp, ntk = literal_node_pair_kernel(net.layers, x, grid)
    assert torch.allclose(got.nngp, nngp, rtol=1e-12, atol=1e-13)
    assert torch.allclose(got.ntk, ntk, rtol=1e-12, atol=1e-13)


def test_lift_monte_carlo_covariance_equals_analytic_kernel():
    """(a) Cov over random finite lifting layers of z(g_a) for x_i, x_j = analytic K(g_a g_b⁻¹).

    20,000 output channels are 20,000 independent draws; the standard error of each
    covariance entry is √((K_aa K_bb + K_ab²)/n), and every entry must be within 5 of them
    (~1000 entries: a 5σ excursion has probability < 1e-3 even under a union bound).
    """
    torch.manual_seed(0)
    layer = Lift(3, 1.3, 0.4)
    net = serial(layer, Pool(), Dense())
    grid = SO3Grid(2)
    ctx = net.discretisation(grid, "exact")
    x = random_coefficients(2, 3, 3, seed=2)
    n = 20_000
    z = layer.finite(3, n, ctx)(x)  # (2, n, N)
    emp = torch.einsum("ija,kjb->ikab", z, z) / n  # (2, 2, N, N)
    # analytic kernel at node pairs from the rotation matrices of g_a g_b⁻¹
    R = torch.einsum("aij,bkj->abik", grid.matrices, grid.matrices).reshape(-1, 3, 3)
    blocks = wigner_blocks(3, *o3.matrix_to_angles(R))
    analytic = torch.full((2, 2, R.shape[0]), layer.sigma_b**2, dtype=torch.float64)
    for d, s in zip(blocks, coeff_slices(3)):
        analytic += layer.sigma_w**2 / 3 * torch.einsum("icm,umn,jcn->iju", x[..., s], d, x[..., s])
    analytic = analytic.reshape(emp.shape)
    var = torch.einsum("iiaa->ia", analytic)
    se = torch.sqrt((var[:, None, :, None] * var[None, :, None, :] + analytic**2) / n)
    assert ((emp - analytic).abs() / se).max() < 5.0


def median_empirical_ntk_errors(net, x: torch.Tensor, widths: list[int], seeds: int = 6) -> list[float]:
    """Per width, the median over ``seeds`` finite networks of ‖Θ̂_n − Θ‖/‖Θ‖, Θ the exact-mode
    NTK of ``net`` on the band-limit-2 grid."""
    ctx = net.discretisation(SO3Grid(2), "exact")
    theta = net.kernel(x, ctx=ctx).ntk
    medians = []
    for width in widths:
        errors = []
        for seed in range(seeds):
            torch.manual_seed(seed)
            emp = empirical_ntk(net.finite(tuple(x.shape[1:]), width, ctx), x)
            errors.append(float((emp - theta).norm() / theta.norm()))
        medians.append(float(np.median(errors)))
    return medians


@pytest.mark.slow
def test_empirical_ntk_converges_to_exact_kernel_like_inverse_sqrt_width():
    """(b) lift → ReLU → conv → ReLU → pool → dense: ‖Θ̂_n − Θ‖/‖Θ‖ ∝ n^(-1/2).

    Median relative error over 6 seeds at widths 64, 256, 1024, log–log slope fitted.
    The seed-to-seed coefficient of variation of the error is ≈ 0.35 (measured), so the
    median of 6 has ≈ 15 % spread, i.e. ±0.15 in log error and a slope standard error of
    ≈ 0.08 over ln(16); the slope must lie in −0.5 ± 0.2 (2.5 standard errors) and the
    widest network must be within 12 % of the analytic kernel (measured: 5–7 %).
    """
    widths = [64, 256, 1024]
    medians = median_empirical_ntk_errors(FULL, random_coefficients(5, 3, 3, seed=0), widths)
    slope = np.polyfit(np.log(widths), np.log(medians), 1)[0]
    assert -0.7 <= slope <= -0.3, (slope, medians)
    assert medians[-1] < 0.12, medians


@pytest.mark.slow
def test_empirical_ntk_with_layer_norms_converges_to_exact_kernel():
    """Layer norm's kernel rule K/√(K_aa K_bb), Θ/√(K_aa K_bb) is the infinite-width limit of
    dividing by the channels' root mean square: the term from differentiating the norm is
    O(1/width) and drops out. Proved on :data:`LAYER_NORMED` (norms on the group and after
    the pool): median over 6 seeds of ‖Θ̂_n − Θ‖/‖Θ‖, measured 0.154 / 0.078 / 0.042 at
    widths 64 / 256 / 1,024 (slope −0.47) and a 64 → 1,024 ratio of 3.1–3.7 on four input
    draws (4 for an exact n^(-1/2)). The median of 6 has ≈ 15 % spread (as above), so the
    ratio must exceed 2 and the widest network must be within 8 % of the analytic kernel
    (the largest measured 0.051 plus three spreads).
    """
    medians = median_empirical_ntk_errors(LAYER_NORMED, random_coefficients(5, 3, 3, seed=0), [64, 1024])
    assert medians[0] / medians[1] > 2.0, medians
    assert medians[1] < 0.08, medians


def test_layer_norm_gives_unit_self_kernels_and_correlations():
    """After a layer norm the self-kernels are 1 and the cross kernels are the correlations
    K_ab/√(K_aa K_bb) of the layer's input; the NTK is divided by the same √(K_aa K_bb)."""
    x = random_coefficients(4, 3, 3, seed=2)
    ctx = FULL.discretisation(SO3Grid(2), "exact")
    before = serial(*FULL.layers).kernel(x, ctx=ctx)
    normed = serial(*FULL.layers, LayerNorm(), Dense(1.0, 0.0)).kernel(x, ctx=ctx)
    norm = torch.sqrt(torch.outer(before.self1, before.self1))
    assert torch.allclose(normed.self1, torch.ones(4, dtype=torch.float64), rtol=1e-14)
    assert torch.allclose(normed.nngp, before.nngp / norm, rtol=1e-14)
    assert torch.allclose(normed.ntk, before.nngp / norm + before.ntk / norm, rtol=1e-14)


def test_layer_norm_of_a_zero_signal_is_zero():
    """Without biases an all-zero input (an atom without neighbours) has variance 0 at the
    norm: its kernels are 0 there (no NaN, in the rule or its gradient) and the finite twin
    maps it to 0, as the power spectrum's p̂ = 0 for such an environment."""
    net = serial(Lift(3, 1.2, 0.0), Nonlinearity("quadratic"), Pool(), LayerNorm(), Dense(1.0, 0.0), Nonlinearity("quadratic"), Dense(1.0, 0.0))
    x = random_coefficients(3, 3, 3, seed=4)
    x[1] = 0.0
    x.requires_grad_(True)
    ctx = net.discretisation(SO3Grid(2), "exact")
    k = net.kernel(x, ctx=ctx)
    assert torch.isfinite(k.ntk).all() and torch.isfinite(k.nngp).all()
    assert (k.ntk[1] == 0).all() and (k.ntk[:, 1] == 0).all() and (k.ntk[0, 0] > 0)
    (grad,) = torch.autograd.grad(k.ntk.sum(), x)
    assert torch.isfinite(grad).all()
    with torch.no_grad():
        out = net.finite(tuple(x.shape[1:]), 16, ctx)(x.detach())
    assert torch.isfinite(out).all() and float(out[1]) == 0.0


@pytest.mark.parametrize("mode", ["exact", "fast"])
def test_relu_gradients_of_a_zero_signals_partners_are_those_without_it(mode):
    """Without biases the ReLU kernel of an all-zero input (an atom without neighbours) with
    anything is 0 for every value of its partner, so the partners' gradients are those of
    the kernel without it. The arc-cosine formula's √(k11 k22) and 1/√(k11 k22) at k11 = 0
    once gave ∞ · 0 = NaN for every partner (forces of all same-element atoms)."""
    net = serial(Lift(3, 1.2, 0.0), Nonlinearity("relu"), Pool(), Dense(1.0, 0.0))
    ctx = net.discretisation(SO3Grid(3), mode)
    x = random_coefficients(3, 3, 3, seed=4)
    x[1] = 0.0

    def partner_gradient(left: torch.Tensor) -> torch.Tensor:
        y = random_coefficients(4, 3, 3, seed=5).requires_grad_(True)
        return torch.autograd.grad(net.kernel(left, y, ctx=ctx).ntk.sum(), y)[0]

    with_zero, without = partner_gradient(x), partner_gradient(x[[0, 2]])
    assert torch.isfinite(with_zero).all() and float(without.abs().max()) > 0.1
    torch.testing.assert_close(with_zero, without, rtol=1e-14, atol=0)


def test_nonlinearity_without_a_weight_layer_before_it_is_rejected():
    """σ of a pooled (or σ'-activated) signal is not a Gaussian pre-activation, so the dual
    activation is not its kernel: measured, the empirical NTK of ``lift erf pool quadratic
    dense`` stays 0.33 from its rule at widths 64 to 4,096. Such networks are refused."""
    with pytest.raises(ValueError, match="layer 4 \\(quadratic\\) has no weight layer between it and the input or the previous nonlinearity"):
        serial(Lift(3), Nonlinearity("erf"), Pool(), Nonlinearity("quadratic"), Dense())
    with pytest.raises(ValueError, match="layer 4 \\(relu\\)"):
        serial(Lift(3), Nonlinearity("erf"), LayerNorm(), Nonlinearity("relu"), Pool(), Dense())
    serial(Lift(3), LayerNorm(), Nonlinearity("erf"), Pool(), Dense(), LayerNorm(), Nonlinearity("erf"), Dense())


def test_monte_carlo_nngp_of_full_network_matches_exact_nngp(one_thread):
    """Average of f(x) f(x') over 400 random width-256 networks = exact-mode NNGP.

    Each entry must lie within 4 Monte Carlo standard errors plus the finite-width bias,
    which is O(1/width) relative (bounded here by 3/width of the entry's scale).
    """
    x = random_coefficients(3, 3, 3, seed=8)
    ctx = FULL.discretisation(SO3Grid(2), "exact")
    exact = FULL.kernel(x, ctx=ctx, ntk=False).nngp
    width = 256
    mean, se = monte_carlo_nngp(lambda: FULL.finite(tuple(x.shape[1:]), width, ctx), x, n_samples=400, seed=0)
    bias = 3 / width * exact.abs().max()
    assert ((mean - exact).abs() <= 4 * se + bias).all(), (mean, exact, se)


@pytest.mark.slow
def test_empirical_ntk_of_exp_network_converges_to_exact_kernel():
    """The exp activation's finite twin: lift → exp → pool → dense, ‖Θ̂_n − Θ‖/‖Θ‖ falls like n^(-1/2).

    eˣ of a pre-activation of variance k has log-normal moments growing like e^{2k}, so the
    width the empirical NTK needs grows exponentially with k; inputs are scaled so that the
    lifted variances are 1.7–6.4 (as for molecules with σ_w ≈ 1–2). Median over 6 seeds:
    measured 0.108 at width 64 and 0.033 at 1,024, a ratio of 3.3 (4 for an exact n^(-1/2)).
    The median of 6 has ≈ 15 % spread (seed coefficient of variation ≈ 0.35, as for ReLU
    above), so the ratio must exceed 2 (more than 3 spreads below 4) and the widest network
    must be within 6 % of the analytic kernel.
    """
    net = serial(Lift(3, 1.0, 0.2), Nonlinearity("exp"), Pool(), Dense(1.0, 0.1))
    medians = median_empirical_ntk_errors(net, 0.4 * random_coefficients(5, 3, 3, seed=0), [64, 1024])
    assert medians[0] / medians[1] > 2.0, medians
    assert medians[1] < 0.06, medians


@pytest.mark.parametrize("activation", ["relu", "erf"])
def test_fast_mode_approaches_exact_mode_as_grid_refines(activation, record_property):
    """(c) ‖K_fast(B) − K_exact(B)‖/‖K_exact(B)‖ falls monotonically over B = 2, 3, 4, 5.

    Measured (NTK, random inputs L = 4, conv L = 3): ReLU 8.5e-2, 4.4e-3, 6.2e-4, 2.0e-4;
    erf 2.8e-1, 1.8e-2, 3.7e-3, 8.3e-4. At the default resolution (B = 4 for this band
    limit) the gap must stay below 1 %.
    """
    net = serial(Lift(4, 1.0, 0.1), Nonlinearity(activation), GroupConv(3, 1.0, 0.1), Nonlinearity(activation), Pool(), Dense(1.0, 0.1))
    x = random_coefficients(6, 4, 4, seed=0)
    gaps = []
    for b in [2, 3, 4, 5]:
        exact = net.kernel(x, ctx=net.discretisation(SO3Grid(b), "exact")).ntk
        fast = net.kernel(x, ctx=net.discretisation(SO3Grid(b), "fast")).ntk
        gaps.append(float((fast - exact).norm() / exact.norm()))
    record_property("fast_exact_gaps", gaps)
    assert all(a > b for a, b in zip(gaps, gaps[1:])), gaps
    assert gaps[2] < 1e-2, gaps


@pytest.mark.parametrize("mode", ["fast", "exact"])
def test_pooled_kernel_rotation_invariance_improves_with_resolution(mode):
    """(d) Rotating one input's neighbourhood (f̂^l ↦ D^l(R) f̂^l) changes pooled kernels by a
    measured amount that shrinks with grid resolution; bound at B = 5: 1e-3 relative."""
    net = serial(Lift(3, 1.0, 0.1), Nonlinearity("erf"), GroupConv(3, 1.0, 0.1), Nonlinearity("erf"), Pool(), Dense(1.0, 0.1))
    x = random_coefficients(4, 3, 3, seed=3)
    rotations = _rotations(5)
    errors = []
    for b in [2, 3, 5]:
        ctx = net.discretisation(SO3Grid(b), mode)
        base = net.kernel(x, x[:1], ctx=ctx).ntk
        worst = 0.0
        for R in rotations:
            rotated = net.kernel(x, rotate_coefficients(x[:1], R, 3), ctx=ctx).ntk
            worst = max(worst, float((rotated - base).abs().max() / base.abs().max()))
        errors.append(worst)
    assert errors[0] > errors[1] > errors[2], errors
    assert errors[2] < 1e-3, errors


def test_exp_network_kernel_is_rotation_invariant_symmetric_and_psd():
    """lift → exp → pool → dense: rotating an input's neighbourhood changes the fast-mode NTK by
    < 1e-7 relative on the B = 5 grid (measured 3.3e-9: the grid is exact to Wigner degree 9
    and eˣ of a band-limited lift is entire, so the quadrature error falls spectrally; the
    bound leaves a 30× margin), and the exact-mode NTK Gram matrix of 6 inputs is symmetric
    with eigenvalues ≥ −1e-12 · the largest (a Gram matrix of the discretised network: PSD up
    to rounding; measured smallest/largest = +3e-3)."""
    net = serial(Lift(3, 1.0, 0.2), Nonlinearity("exp"), Pool(), Dense(1.0, 0.1))
    x = 0.4 * random_coefficients(6, 3, 3, seed=5)
    ctx = net.discretisation(SO3Grid(5), "fast")
    base = net.kernel(x, x[:1], ctx=ctx).ntk
    for R in _rotations(4):
        rotated = net.kernel(x, rotate_coefficients(x[:1], R, 3), ctx=ctx).ntk
        assert float((rotated - base).abs().max() / base.abs().max()) < 1e-7
    gram = net.kernel(x, ctx=net.discretisation(SO3Grid(3), "exact")).ntk
    assert torch.allclose(gram, gram.T, rtol=1e-13, atol=0)
    eigenvalues = torch.linalg.eigvalsh(gram)
    assert eigenvalues.min() >= -1e-12 * eigenvalues.max()


@pytest.mark.parametrize("mode", ["fast", "exact"])
def test_layer_normed_kernel_is_rotation_invariant_symmetric_and_psd(mode):
    """:data:`LAYER_NORMED`: rotating one input's neighbourhood changes the NTK by an amount
    that shrinks with grid resolution (measured fast 1.9e-3, 1.2e-4, 1.1e-5 and exact 2.7e-3,
    2.9e-4, 3.0e-5 at B = 2, 3, 5; bound at B = 5: 1e-4); the Gram matrices of 12 inputs are
    symmetric with eigenvalues ≥ −1e-12 · the largest (measured smallest/largest ≥ +5e-4)."""
    x = random_coefficients(4, 3, 3, seed=3)
    errors = []
    for b in [2, 3, 5]:
        ctx = LAYER_NORMED.discretisation(SO3Grid(b), mode)
        base = LAYER_NORMED.kernel(x, x[:1], ctx=ctx).ntk
        rotated = [LAYER_NORMED.kernel(x, rotate_coefficients(x[:1], R, 3), ctx=ctx).ntk for R in _rotations(5)]
        errors.append(max(float((r - base).abs().max() / base.abs().max()) for r in rotated))
    assert errors[0] > errors[1] > errors[2], errors
    assert errors[2] < 1e-4, errors
    k = LAYER_NORMED.kernel(random_coefficients(12, 3, 3, seed=5), ctx=LAYER_NORMED.discretisation(SO3Grid(3), mode))
    for m in (k.nngp, k.ntk):
        assert torch.allclose(m, m.T, rtol=1e-13, atol=0)
        eigenvalues = torch.linalg.eigvalsh(m)
        assert eigenvalues.min() >= -1e-12 * eigenvalues.max()


def _rotations(n: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    angles = torch.rand(n, 3, generator=g, dtype=torch.float64) * torch.tensor([2 * np.pi, np.pi, 2 * np.pi], dtype=torch.float64)
    return o3.angles_to_matrix(angles[:, 0], angles[:, 1], angles[:, 2])


def mlp_ntk(v1: torch.Tensor, v2: torch.Tensor, channels: int, depth_activation: str, sw=(1.0, 1.0, 1.0), sb=(0.1, 0.1, 0.1)):
    """Closed-form NTK of dense → σ → dense → σ → dense on vectors (first layer scaled by 1/C)."""
    dual = get_activation(depth_activation).dual
    def lin(k, i):
        return sw[i] ** 2 * k + sb[i] ** 2
    k12 = lin(v1 @ v2.T / channels, 0)
    k11 = lin((v1 * v1).sum(1) / channels, 0)
    k22 = lin((v2 * v2).sum(1) / channels, 0)
    t12 = k12.clone()
    f, fd = dual(k12, k11[:, None], k22[None, :])
    k11, k22 = dual(k11, k11, k11)[0], dual(k22, k22, k22)[0]
    k12 = lin(f, 1)
    t12 = k12 + sw[1] ** 2 * t12 * fd
    k11, k22 = lin(k11, 1), lin(k22, 1)
    f, fd = dual(k12, k11[:, None], k22[None, :])
    k12 = lin(f, 2)
    return k12 + sw[2] ** 2 * t12 * fd


@pytest.mark.parametrize("activation", ["relu", "erf"])
def test_augmentation_theorem_orbit_averaged_mlp_equals_gcnn(activation):
    """(e) mean over rotations of Θ_MLP(f, ρ(u) f') = Θ of lift → σ → pointwise → σ → pool → dense.

    With the same quadrature over rotations the identity holds to rounding (it is exact
    for every measure); against a finer, independent quadrature of the orbit average it
    holds to quadrature accuracy (< 1e-3 at B = 5 vs B = 12).
    """
    C, L = 3, 3
    net = serial(Lift(L, 1.0, 0.1), Nonlinearity(activation), Dense(1.0, 0.1), Nonlinearity(activation), Pool(), Dense(1.0, 0.1))
    x = random_coefficients(4, C, L, seed=4)
    flat = x.reshape(x.shape[0], -1)

    def orbit_average(grid):
        table = wigner_blocks(L, *grid.angles)
        total = 0.0
        for k in range(len(grid)):
            rotated = x.clone()
            for d, s in zip(table, coeff_slices(L)):
                rotated[..., s] = x[..., s] @ d[k].T
            total = total + grid.weights[k] * mlp_ntk(flat, rotated.reshape(x.shape[0], -1), C, activation)
        return total

    grid = SO3Grid(3)
    gcnn = net.kernel(x, ctx=net.discretisation(grid, "fast")).ntk
    assert torch.allclose(gcnn, orbit_average(grid), rtol=1e-12, atol=1e-12)
    fine = net.kernel(x, ctx=net.discretisation(SO3Grid(12), "fast")).ntk
    coarse = net.kernel(x, ctx=net.discretisation(SO3Grid(5), "fast")).ntk
    assert float((coarse - fine).abs().max() / fine.abs().max()) < 1e-3


@pytest.mark.parametrize("mode", ["fast", "exact"])
@pytest.mark.parametrize("sampling", ["gauss-legendre", "driscoll-healy", "lebedev"])
def test_kernels_are_symmetric_psd(mode, sampling):
    """(f) NNGP and NTK matrices on a random batch: symmetric, eigenvalues ≥ −1e-12·λ_max."""
    net = serial(Lift(3, 1.0, 0.2), Nonlinearity("relu"), GroupConv(3, 1.0, 0.2), Nonlinearity("erf"), Pool(), Dense(1.0, 0.1), Nonlinearity("relu"), Dense())
    x = random_coefficients(12, 3, 3, seed=5)
    k = net.kernel(x, ctx=net.discretisation(SO3Grid(3, sampling), mode))
    for m in (k.nngp, k.ntk):
        asym = float((m - m.T).abs().max() / m.abs().max())
        # DH grids are not closed under inversion: fast-mode symmetry only to quadrature accuracy
        assert asym < (1e-3 if (mode, sampling) == ("fast", "driscoll-healy") else 1e-13)
        eig = torch.linalg.eigvalsh((m + m.T) / 2)
        assert eig.min() >= -1e-12 * eig.max()


def test_cross_kernel_blocks_match_the_joint_kernel():
    """K(x1, x2) computed as a cross block equals the block of K([x1; x2]) (no hidden coupling)."""
    x = random_coefficients(7, 3, 3, seed=6)
    ctx = FULL.discretisation(SO3Grid(3), "fast")
    joint = FULL.kernel(x, ctx=ctx)
    cross = FULL.kernel(x[:3], x[3:], ctx=ctx)
    assert torch.allclose(cross.ntk, joint.ntk[:3, 3:], rtol=1e-13, atol=1e-13)
    assert torch.allclose(cross.nngp, joint.nngp[:3, 3:], rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("pairs", [1, 3, 8, 50])
@pytest.mark.parametrize("n1, n2", [(13, 13), (13, 4), (3, 17), (9, 1)])
def test_tile_shape_covers_the_pairs_within_the_budget(n1, n2, pairs):
    from molntk.kernels.so3.network import tile_shape

    for square in ((True, False) if n1 == n2 else (False,)):
        rows, cols = tile_shape(n1, n2, pairs, square=square)
        assert 1 <= rows <= n1 and 1 <= cols <= n2 and rows * cols <= max(pairs, 1)
        if square:
            assert rows == cols
        for n, part in ((n1, rows), (n2, cols)):  # parts of nearly equal length: no thin remainder
            count = -(-n // part)
            assert (count - 1) * part < n and n - (count - 1) * part >= part - count + 1


@pytest.mark.parametrize("tile_pairs", [1, 5, 12])
@pytest.mark.parametrize("sampling", ["gauss-legendre", "lebedev"])
def test_tiled_kernels_equal_the_one_tile_kernel(tile_pairs, sampling, monkeypatch):
    """Tiles of a few pairs (square for the mirrored symmetric call, rectangular otherwise)
    give the kernel of one tile over all pairs, to rounding. An erf network: its dual
    activation is smooth on the kernels' whole range (ρ ≤ 2v/(1 + 2v) < 1), so rounding
    differences of the tiles' GEMMs (≈ 1e-16) stay ≈ 1e-16. (ReLU's arccos kernel is only
    Hölder-½ at cos θ = 1, which pairs of an input with itself reach near the identity:
    there ε-rounding moves the kernel by up to √(2ε) ≈ 2e-8, whatever the tiling.)"""
    import molntk.kernels.so3.network as network

    net = serial(Lift(3, 1.0, 0.2), Nonlinearity("erf"), GroupConv(2, 1.0, 0.2), Nonlinearity("erf"), Pool(), Dense(1.0, 0.2))
    x = random_coefficients(11, 3, 3, seed=9)
    ctx = net.discretisation(SO3Grid(3, sampling), "fast")
    one = net.kernel(x, ctx=ctx), net.kernel(x[:4], x[4:], ctx=ctx)
    monkeypatch.setattr(network, "TILE_ELEMENTS", tile_pairs * ctx.support_size)
    tiled = net.kernel(x, ctx=ctx), net.kernel(x[:4], x[4:], ctx=ctx)
    for a, b in zip(one, tiled):
        for m1, m2 in ((a.nngp, b.nngp), (a.ntk, b.ntk)):
            torch.testing.assert_close(m2, m1, rtol=1e-13, atol=1e-13 * float(m1.abs().max()))


@pytest.mark.parametrize("mode", ["fast", "exact"])
def test_conv_then_pool_shortcut_equals_projection_then_mean(mode):
    """GroupConv directly before Pool skips the synthesis; the result equals P_L followed by
    the mean (layer by layer), and in exact mode the literal node-pair kernel."""
    from molntk.kernels.so3.state import InputPair

    net = serial(Lift(4, 1.0, 0.2), Nonlinearity("erf"), GroupConv(3, 1.1, 0.3), Nonlinearity("erf"), GroupConv(2, 0.9, 0.2), Pool(), Dense(1.0, 0.1))
    x = random_coefficients(4, 2, 4, seed=7)
    grid = SO3Grid(2)
    ctx = net.discretisation(grid, mode)
    fast_path = net.kernel(x, ctx=ctx)
    state = InputPair(x, x, same=True)
    for layer in net.layers:
        state = layer.kernel(state, ctx, ntk=True)
    assert torch.allclose(fast_path.ntk, state.ntk, rtol=1e-12, atol=1e-13)
    assert torch.allclose(fast_path.nngp, state.nngp, rtol=1e-12, atol=1e-13)
    if mode == "exact":
        nngp, ntk = literal_node_pair_kernel(net.layers, x, grid)
        assert torch.allclose(fast_path.ntk, ntk, rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize("mode", ["fast", "exact"])
def test_float32_kernels_agree_with_float64(mode):
    """float32 evaluation (GPU-friendly) stays within 1e-5 relative of float64 (~100 ε32)."""
    net = serial(Lift(3, 1.0, 0.1), Nonlinearity("erf"), GroupConv(2, 1.0, 0.1), Nonlinearity("erf"), GroupConv(2), Pool(), Dense())
    x = random_coefficients(6, 3, 3, seed=9)
    k64 = net.kernel(x, ctx=net.discretisation(SO3Grid(3), mode)).ntk
    k32 = net.kernel(x, ctx=net.discretisation(SO3Grid(3), mode, dtype=torch.float32)).ntk
    assert k32.dtype == torch.float32
    assert float((k32.double() - k64).abs().max() / k64.abs().max()) < 1e-5


def test_network_docstring_example_runs():
    """The example of molntk.kernels.so3.network's docstring runs and shows what it prints."""
    result = doctest.testmod(so3_network)
    assert result.attempted >= 7 and result.failed == 0
