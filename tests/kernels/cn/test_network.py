"""Exact properties of the C_n ⋉ R² kernels (float precision, small images).

- The orbit-block reduction (exact 90° rotations, shift invariance in distribution)
  equals the unreduced docs/mathematics.md §4 recursion for every n and padding.
- Pooled C4 / C8 kernels are invariant under quarter turns of either input, in all three
  paddings (square images, odd filters: each padding commutes with rot90).
- The seeds' theorem: the C_n GCNN kernel equals the orbit-averaged CNN kernel for
  n ∈ {2, 4} when rotations are averaged after the last nonlinearity; with a nonlinear
  head after a full group pool (the published ordering), and for n = 8 with bilinear
  image rotations, the identity is not exact (sizes asserted as measured).
- Tolerances: 1e-13 relative, except for ReLU NTKs, 1e-8: ReLU's Ḟ(cos ψ) has a square-root
  singularity at cos ψ = 1, so a rounding of 1e-16 in a self-pair's K(a, a) (different
  summation orders in the two evaluations) moves Θ there by ~1e-8 relative; with erf the
  same comparisons agree to 1e-15.
- Gram matrices are symmetric and positive semi-definite; chunking and dtype do not
  change the result; bad input raises InputError.
"""

import math

import numpy as np
import pytest
import torch

from molntk.errors import InputError
from molntk.kernels.cn import (
    Nonlinearity,
    Dense,
    Flatten,
    GroupConv,
    Lift,
    Pool,
    augmented,
    cnn_flatten,
    cnn_gap,
    gcnn,
    mlp,
    rotate_images,
    serial,
)
from molntk.kernels.cn.nonlinearity import relu_slab
from molntk.kernels.result import Kernels

DT = torch.float64


pytestmark = pytest.mark.usefixtures("one_thread")


def images(n: int, size: int = 7, channels: int = 2, seed: int = 0) -> torch.Tensor:
    return torch.randn(n, channels, size, size, generator=torch.Generator().manual_seed(seed), dtype=DT)


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max() / b.abs().max())


def rel_kernels(a: Kernels, b: Kernels) -> float:
    """Largest relative difference of the NNGP and NTK of two kernel results."""
    return max(rel(a.nngp, b.nngp), rel(a.ntk, b.ntk))


def assert_same(a: Kernels, b: Kernels, activation: str = "relu") -> None:
    assert rel(a.nngp, b.nngp) < 1e-13
    assert rel(a.ntk, b.ntk) < (1e-8 if activation == "relu" else 1e-13)


@pytest.mark.parametrize("n", [2, 3, 4, 6, 8])
@pytest.mark.parametrize("padding", ["valid", "same", "circular"])
@pytest.mark.parametrize("activation", ["relu", "erf"])
def test_orbit_reduction_equals_direct_recursion(n, padding, activation):
    x, y = images(2, 6, seed=1), images(2, 6, seed=2)
    net = gcnn(n, 2, padding=padding, activation=activation, sigma_b=0.3)
    assert_same(net.kernel(x, y), net.kernel(x, y, symmetry=False), activation)


@pytest.mark.parametrize("activation", ["relu", "erf"])
def test_orbit_reduction_per_rotation_head_and_non_square(activation):
    x = torch.randn(2, 1, 7, 9, generator=torch.Generator().manual_seed(3), dtype=DT)
    nets = (
        gcnn(8, 2, per_rotation_head=True, activation=activation, sigma_b=0.2),
        gcnn(4, 3, padding="same", activation=activation),
    )
    for net in nets:
        assert net.orbit(7, 9) == 2
        assert_same(net.kernel(x), net.kernel(x, symmetry=False), activation)


@pytest.mark.parametrize("n", [4, 8])
def test_orbit_reduction_with_flatten_readout(n):
    x = images(3, 6, seed=17)
    net = serial(Lift(n, 3, "same"), Nonlinearity("relu"), GroupConv(n, 3), Nonlinearity("relu"), Flatten(), Dense(out=1))
    assert_same(net.kernel(x), net.kernel(x, symmetry=False))


def test_network_must_end_in_one_vector_per_image():
    with pytest.raises(ValueError, match="one vector per image"):
        serial(Lift(4), Nonlinearity("relu"), Dense(out=1)).kernel(images(1, 5))


def test_relu_slab_torch_and_numpy_paths_agree():
    """The torch path (used on CUDA) and the numpy path (CPU) of the in-place ReLU."""
    g = torch.Generator().manual_seed(18)
    k = torch.rand(5, 6, generator=g, dtype=DT) - 0.3
    v1, v2 = torch.rand(5, 1, generator=g, dtype=DT) + 1, torch.rand(1, 6, generator=g, dtype=DT) + 1
    theta = torch.rand(5, 6, generator=g, dtype=DT)
    factors = [v1.rsqrt(), v2.rsqrt(), v1.sqrt() / (2 * math.pi), v2.sqrt()]
    results = []
    for xp, convert in ((torch, lambda t: t.clone()), (np, lambda t: t.clone().numpy())):
        out_k, out_t = convert(k), convert(torch.empty_like(k))
        temps = [convert(torch.empty_like(k)) for _ in range(3)]
        relu_slab(xp, out_k, convert(theta), *(convert(f) for f in factors), out_t, *temps)
        results.append((torch.as_tensor(out_k), torch.as_tensor(out_t)))
    torch.testing.assert_close(results[0][0], results[1][0], rtol=1e-14, atol=1e-15)
    torch.testing.assert_close(results[0][1], results[1][1], rtol=1e-14, atol=1e-15)


@pytest.mark.parametrize("n", [4, 8])
@pytest.mark.parametrize("padding", ["valid", "same", "circular"])
def test_quarter_turns_leave_pooled_kernels_unchanged(n, padding):
    x, y = images(3, 8, seed=4), images(2, 8, seed=5)
    net = gcnn(n, 2, padding=padding, sigma_b=0.1)
    base = net.kernel(x, y)
    turned = net.kernel(torch.rot90(x, 1, (-2, -1)), torch.rot90(y, 2, (-2, -1)))
    assert_same(turned, base)


def test_cnn_is_not_rotation_invariant():
    x, y = images(2, 8, seed=6), images(2, 8, seed=7)
    net = cnn_gap(2)
    assert rel_kernels(net.kernel(x, torch.rot90(y, 1, (-2, -1))), net.kernel(x, y)) > 1e-3


@pytest.mark.parametrize("n", [2, 4])
@pytest.mark.parametrize("padding", ["valid", "same", "circular"])
def test_augmented_cnn_equals_gcnn(n, padding):
    x, y = images(2, 8, seed=8), images(3, 8, seed=9)
    options = dict(padding=padding, sigma_b=0.2)
    linear = gcnn(n, 2, head=0, **options).kernel(x, y)
    assert_same(linear, augmented(cnn_gap(2, head=0, **options), n).kernel(x, y))
    per_rotation = gcnn(n, 2, per_rotation_head=True, **options).kernel(x, y)
    assert_same(per_rotation, augmented(cnn_gap(2, **options), n).kernel(x, y))


def test_augmentation_identity_not_exact_for_published_ordering_and_interpolated_rotations():
    """Measured on these inputs: published ordering ≈ 2e-2, C8 with bilinear image rotation ≈ 2e-1."""
    x, y = images(2, 8, seed=8), images(3, 8, seed=9)
    aug = augmented(cnn_gap(2, sigma_b=0.2), 4).kernel(x, y)
    assert 1e-3 < rel_kernels(gcnn(4, 2, sigma_b=0.2).kernel(x, y), aug) < 0.1
    aug8 = augmented(cnn_gap(2, head=0, sigma_b=0.2), 8).kernel(x, y)
    assert rel_kernels(gcnn(8, 2, head=0, sigma_b=0.2).kernel(x, y), aug8) > 1e-2


def test_rotate_images_matches_rot90_and_orbit_average_for_quarter_turns():
    x = images(1, 6, seed=10)
    for q in range(4):
        assert torch.equal(rotate_images(x, q * math.pi / 2), torch.rot90(x, q, (-2, -1)))
    turned = rotate_images(x, math.pi / 4)
    assert turned.shape == x.shape and float(turned[..., 0, 0].abs().max()) == 0.0


@pytest.mark.parametrize(
    "net",
    [gcnn(4, 2), gcnn(8, 2, padding="same", sigma_b=0.1), cnn_gap(3, activation="erf"), cnn_flatten(2), mlp(2)],
    ids=["c4", "c8-same", "cnn-gap-erf", "cnn-flatten", "mlp"],
)
def test_gram_matrices_symmetric_and_psd(net):
    x = images(7, 7, seed=11)
    gram = net.kernel(x)
    cross = net.kernel(x, x.clone())
    for kind in ("nngp", "ntk"):
        k = getattr(gram, kind)
        assert torch.equal(k, k.T)
        torch.testing.assert_close(getattr(cross, kind), k, rtol=1e-13, atol=0)
        eig = torch.linalg.eigvalsh(k)
        assert eig.min() > -1e-12 * eig.max()


def test_cross_kernel_transposes():
    x, y = images(3, 7, seed=12), images(4, 7, seed=13)
    net = gcnn(4, 2, sigma_b=0.2)
    torch.testing.assert_close(net.kernel(x, y).ntk, net.kernel(y, x).ntk.T, rtol=1e-13, atol=0)


def test_chunking_and_dtype_do_not_change_the_kernel():
    x, y = images(5, 8, seed=14), images(3, 8, seed=15)
    net = gcnn(4, 2, sigma_b=0.2)
    whole = net.kernel(x, y)
    assert_same(net.kernel(x, y, memory_mb=1e-3), whole)
    assert_same(net.kernel(x, memory_mb=1e-3), net.kernel(x))
    single = net.kernel(x.float(), y.float())
    assert single.ntk.dtype == torch.float32
    assert rel_kernels(Kernels(single.nngp.double(), single.ntk.double()), whole) < 1e-5


def test_ntk_false_computes_only_the_nngp():
    x = images(2, 6, seed=16)
    net = gcnn(4, 2)
    both = net.kernel(x)
    nngp_only = net.kernel(x, ntk=False)
    assert torch.equal(nngp_only.nngp, both.nngp)
    assert nngp_only.ntk is None


def test_bad_inputs_raise_input_error():
    net = gcnn(4, 2)
    with pytest.raises(InputError, match="x1"):
        net.kernel(torch.zeros(3, 8, 8, dtype=DT))
    with pytest.raises(InputError, match="x2"):
        net.kernel(images(2, 8), images(2, 9))
    with pytest.raises(InputError, match="NaN"):
        net.kernel(torch.full((1, 1, 8, 8), math.nan, dtype=DT))
    with pytest.raises(InputError, match="too small"):
        net.kernel(images(2, 4))
    with pytest.raises(ValueError):
        gcnn(4, 2, k=2)
    with pytest.raises(ValueError):
        gcnn(4, 2, padding="reflect")


def test_nonlinearity_without_a_weight_layer_before_it_is_rejected():
    """The dual activation needs a Gaussian input: σ of pooled σ'-features or of raw pixels is
    refused, naming the layer (the SO(3) branch's measured reason: tests/kernels/so3/test_network.py)."""
    with pytest.raises(ValueError, match="layer 4 \\(relu\\) has no weight layer"):
        serial(Lift(4), Nonlinearity("relu"), Pool(), Nonlinearity("relu"), Dense(out=1))
    with pytest.raises(ValueError, match="layer 2 \\(erf\\)"):
        serial(Flatten(), Nonlinearity("erf"), Dense(out=1))
    serial(Lift(4), Nonlinearity("relu"), Pool(), Dense(), Nonlinearity("relu"), Dense(out=1))
