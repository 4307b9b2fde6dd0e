"""Each C_n ⋉ R² kernel rule against its finite twin, exactly.

A linear layer z = Σ_θ θ ∂z/∂θ with i.i.d. N(0, 1) parameters θ (weights and bias of one
output channel) has E[z(a) z(b)] = Σ_θ ∂z(a)/∂θ ∂z(b)/∂θ = (J Jᵀ)(a, b). So the rule of a
lifting or group-convolution layer, applied to the empirical covariance of fixed input
features, must equal J Jᵀ of the finite layer with one output channel — to float
precision, for interpolated rotations (n = 3, 8) as for exact ones, in every padding.
The rules run unreduced here (orbit 1, all n² rotation blocks: docs/mathematics.md §4 verbatim); the
orbit-block reduction is checked against them in test_network.py.
"""

import math

import pytest
import torch
from torch.func import functional_call, jacrev

from molntk.kernels.activations import get_activation
from molntk.kernels.cn import Nonlinearity, GroupConv, Lift, filter_rotations
from molntk.kernels.cn.nonlinearity import relu_maps
from molntk.kernels.cn.state import InputPair, KernelState

DT = torch.float64


pytestmark = pytest.mark.usefixtures("one_thread")


def finite_covariance(module, x):
    """E[z(a) z(b)] = J Jᵀ over all parameters of a linear module with one output channel,
    as an (N, n, H', W', N, n, H', W') tensor."""
    params = dict(module.named_parameters())
    ndim = functional_call(module, params, (x,)).ndim
    jac = jacrev(lambda p: functional_call(module, p, (x,)))(params)
    j = torch.cat([t.reshape(*t.shape[:ndim], -1) for t in jac.values()], dim=-1)[:, 0]
    return torch.einsum("arijp,bskmp->arijbskm", j, j)


def state_from_features(y: torch.Tensor) -> KernelState:
    """Empirical covariance (1/C) Σ_c y_c(a) y_c(b) of features y (N, C, n, H, W), unreduced layout."""
    c = torch.einsum("acrij,bcskl->abrsikjl", y, y) / y.shape[1]
    n, (h, w) = y.shape[2], y.shape[-2:]
    return KernelState(nngp=c.reshape(y.shape[0], y.shape[0], 1, n, n, h, h, w, w), ntk=None, orbit=1, spatial=(h, w))


def unreduced(state: KernelState) -> torch.Tensor:
    """(N, n, H, W, N, n, H, W) covariance from an orbit-1 state."""
    return state.nngp[:, :, 0].permute(0, 2, 4, 6, 1, 3, 5, 7)


@pytest.mark.parametrize("n", [1, 2, 3, 4, 8])
@pytest.mark.parametrize("padding", ["valid", "same", "circular"])
def test_lifting_rule_is_the_finite_covariance(n, padding):
    x = torch.randn(3, 2, 7, 7, generator=torch.Generator().manual_seed(n), dtype=DT)
    layer = Lift(n, 3, padding, sigma_w=1.3, sigma_b=0.4)
    module, _ = layer.finite((2, 7, 7), 1, torch.Generator().manual_seed(0), DT)
    state = layer.kernel_inputs(InputPair(x[:, None], x[None], orbit=1), ntk=True)
    expected = finite_covariance(module, x)
    rule = state.nngp[:, :, 0].permute(0, 2, 4, 6, 1, 3, 5, 7)
    torch.testing.assert_close(rule, expected, rtol=1e-12, atol=1e-12)
    assert state.ntk is state.nngp  # Θ = K for the first layer


@pytest.mark.parametrize("n", [1, 3, 4, 8])
@pytest.mark.parametrize("padding", ["valid", "same", "circular"])
def test_group_conv_rule_is_the_finite_covariance(n, padding):
    g = torch.Generator().manual_seed(10 + n)
    y = torch.randn(3, 4, n, 6, 6, generator=g, dtype=DT)
    layer = GroupConv(n, 3, padding, sigma_w=0.9, sigma_b=0.3)
    module, _ = layer.finite((4, n, 6, 6), 1, torch.Generator().manual_seed(1), DT)
    expected = finite_covariance(module, y)
    out = layer.kernel(state_from_features(y))
    torch.testing.assert_close(unreduced(out), expected, rtol=1e-12, atol=1e-12)


def test_interpolated_rotation_covariance_is_not_a_permutation():
    """For n = 8 the filter covariance A_{r,r'} = I_r I_r'ᵀ is what the finite twin has:
    rows of I_1 sum to 1 except at the corners, which partly leave the 3×3 support."""
    rot = filter_rotations(8, 3)
    a = rot[1] @ rot[1].T
    assert not torch.equal(a, torch.eye(9, dtype=DT))
    corners = [0, 2, 6, 8]
    torch.testing.assert_close(rot[1].sum(1)[corners], torch.full((4,), 2 - math.sqrt(2), dtype=DT))
    for r in range(0, 8, 2):
        assert torch.equal(rot[r] @ rot[r].T, torch.eye(9, dtype=DT))


@pytest.mark.parametrize("name", ["relu", "erf", "quadratic"])
def test_activation_rule_matches_dual(name):
    y = torch.randn(3, 5, 2, 4, 4, generator=torch.Generator().manual_seed(3), dtype=DT)
    diag = (y**2).mean(1)
    state = state_from_features(y)
    state = state.with_(ntk=0.7 * state.nngp).with_variances(diag[:, None], diag[None])
    v1, v2 = state.variance_factors()
    f, fdot = get_activation(name).dual(state.nngp, v1, v2)
    expected_ntk = state.ntk * fdot
    cos = state.nngp / (v1 * v2).sqrt()
    out = Nonlinearity(name).kernel(state.with_(nngp=state.nngp.clone(), ntk=state.ntk.clone()))
    torch.testing.assert_close(out.nngp, f, rtol=1e-13, atol=1e-13)
    regular = cos.abs() < 1 - 1e-6  # ReLU's Ḟ has a square-root singularity at |cos ψ| = 1
    torch.testing.assert_close(out.ntk[regular], expected_ntk[regular], rtol=1e-13, atol=1e-13)
    torch.testing.assert_close(out.ntk, expected_ntk, rtol=1e-6, atol=1e-9)


def test_fast_relu_accurate_near_the_diagonal():
    """cos ψ = 1 − δ: the in-place ReLU keeps full accuracy (sin² ψ = (1 − c)(1 + c))."""
    v = torch.tensor([2.0, 3.0], dtype=DT)
    k = torch.tensor([[2.0, 2.449489742783178 * (1 - 1e-15)], [2.449489742783178 * (1 - 1e-15), 3.0]], dtype=DT)
    f, _ = relu_maps(k.clone(), None, v[:, None], v[None, :])
    expected, _ = get_activation("relu").dual(k, v[:, None], v[None, :])
    torch.testing.assert_close(f, expected, rtol=1e-15, atol=0)
