"""Derivatives of g = F + c Ḟ (molntk.kernels.pooled_ntk_derivatives): the torch closed forms
and the compiled loops against autograd of the activations' torch formulas.

All three evaluate the same formulas, in a different order: inside the clamp (|ρ| ≤ 0.95)
they agree to rounding, measured ≤ 4.5e-15 relative to the largest value; at points where
erf's ρ = 2c/√((1 + 2v)(1 + 2v')) is clamped (identical environments at the identity) Ḟ is
≈ 1e6 and the rounding of ρ near 1 − CLAMP is amplified: measured 2.5e-13. Bound 1e-12 for
both: a wrong or missing term is an O(1) error.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from molntk.kernels.activations import CLAMP
from molntk.kernels.pooled_ntk_derivatives import (
    CLOSED_FORMS,
    COMPILED,
    PooledTerms,
    autograd_g_derivatives,
    pooled_terms,
    terms_from_values,
)

BOUND = 1e-12
FIELDS = ("g", "va", "vb", "vavb", "c", "cva", "cvb", "cc")


def points(clamped: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """c (4, 5, 7), v_a (4,), v_b (5,) and weights (7,) with |ρ| ≤ 0.95, and with ``clamped``
    one more support point per pair at ρ = 1 − CLAMP/4 (v_a = v_b there)."""
    gen = torch.Generator().manual_seed(0)
    va = torch.rand(4, generator=gen, dtype=torch.float64) + 0.2
    vb = va[[0, 1, 2, 3, 0]] if clamped else torch.rand(5, generator=gen, dtype=torch.float64) + 0.2
    limit = 0.5 * torch.sqrt((1 + 2 * va[:, None, None]) * (1 + 2 * vb[None, :, None]))  # c at ρ = 1
    c = 0.95 * limit * (2 * torch.rand(4, 5, 7, generator=gen, dtype=torch.float64) - 1)
    if clamped:
        c = torch.cat([c, (1 - CLAMP / 4) * limit], -1)
    weights = torch.rand(c.shape[-1], generator=gen, dtype=torch.float64)
    return c, va, vb, weights


def reference(activation: str, c, va, vb, weights) -> PooledTerms:
    return terms_from_values(autograd_g_derivatives(activation, c, va[:, None, None], vb[None, :, None], True), weights, True)


def assert_close(expected: PooledTerms, got: PooledTerms) -> None:
    for name in FIELDS:
        a, b = getattr(expected, name).numpy(), getattr(got, name).numpy()
        assert np.abs(a - b).max() < BOUND * np.abs(a).max(), name


@pytest.mark.parametrize("clamped", [False, True])
@pytest.mark.parametrize("activation", sorted(CLOSED_FORMS))
def test_closed_forms_equal_autograd(activation, clamped):
    c, va, vb, w = points(clamped)
    values = CLOSED_FORMS[activation](c, va[:, None, None], vb[None, :, None])
    assert_close(reference(activation, c, va, vb, w), terms_from_values(values, w, True))


@pytest.mark.parametrize("clamped", [False, True])
@pytest.mark.parametrize("activation", sorted(COMPILED))
def test_compiled_loops_equal_autograd(activation, clamped):
    """The compiled path (``pooled_terms`` on CPU float64), and without second derivatives the
    same first-order terms."""
    c, va, vb, w = points(clamped)
    expected = reference(activation, c, va, vb, w)
    assert_close(expected, pooled_terms(activation, c, va, vb, w))
    first = pooled_terms(activation, c, va, vb, w, second=False)
    assert first.cc is None and first.cva is None and first.vavb is None
    for name in ("g", "va", "vb", "c"):
        torch.testing.assert_close(getattr(first, name), getattr(expected, name), rtol=0, atol=BOUND * float(getattr(expected, name).abs().max()))


def test_other_activations_use_autograd():
    """relu has neither closed form nor compiled loop: pooled_terms is the autograd reference
    (at correlations |c|/√(v_a v_b) ≤ 0.9: at ±1 the arc-cosine kernel is not differentiable)."""
    c, va, vb, w = points(False)
    c = 0.9 * torch.sqrt(va[:, None, None] * vb[None, :, None]) * torch.tanh(c)
    assert_close(reference("relu", c, va, vb, w), pooled_terms("relu", c, va, vb, w))
