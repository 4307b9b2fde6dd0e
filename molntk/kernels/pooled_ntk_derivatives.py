"""Derivatives of the pooled one-hidden-layer NTK with respect to its pre-activation kernel and variances.

For a nonlinearity σ with dual (F, Ḟ) (:mod:`molntk.kernels.activations`) after a layer whose
NTK equals its NNGP c (the SO(3) lift), the NTK of σ → Pool → Dense is, per pair of inputs,
Σ_u w_u g(c(u); v_a, v_b) up to the dense layer's σ₂², β₂² (w_u the pooling weights), with

    g(c; v, v') = F(c; v, v') + c Ḟ(c; v, v').

:func:`pooled_terms` returns what the position derivatives of that kernel need
(:mod:`molntk.molecular.pooled_derivatives`): the weighted sums over u of g, g_v, g_v', g_vv'
(one number per pair) and the weighted values w_u g_c(u), w_u g_cv(u), w_u g_cv'(u),
w_u g_cc(u) (subscripts: partial derivatives at (c(u), v_a, v_b)). Three evaluations:

- a compiled loop (numba, no GIL, pairs split over torch's threads) for erf and exp on the
  CPU in float64: every value of a pair in one pass, the sums accumulated in it;
- the closed forms in torch (:data:`CLOSED_FORMS`; any device);
- autograd of the activation's torch formulas (any activation; the reference the other two are
  tested against).

erf, with α = 1/(1 + 2v_a), β = 1/(1 + 2v_b), s = (αβ)^{1/2}, ρ = 2 s c clamped to
±(1 − CLAMP) (m = 1 inside, 0 where clamped: the ρ-terms vanish there, as in autograd of the
torch formulas), r = (1 − ρ²)^{-1/2}, q = ρ² r², Ḟ = (4/π) s r, Ḟ_c = m (8/π) s² ρ r³:

    g = (2/π) asin ρ + c Ḟ,   g_c = (1 + m) Ḟ + c Ḟ_c,   g_cc = 3 Ḟ_c + c m (16/π) s³ r³ (1 + 3q),
    g_v = −α (m (2/π) ρ r + c Ḟ (1 + m q)),   g_cv = −α ((1 + m) Ḟ (1 + m q) + 3 c Ḟ_c (1 + q)),
    g_vv' = αβ (m (2/π) ρ r (1 + q) + c (4/π) s r (1 + m q (4 + 3q))),

and g_v', g_cv' with β for α. exp, with E = F = Ḟ = exp(c + (v_a + v_b)/2): g = (1 + c) E,
g_c = (2 + c) E, g_cc = (3 + c) E, g_v = g_v' = g / 2, g_cv = g_cv' = g_c / 2, g_vv' = g / 4.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numba
import numpy as np
import torch
from torch import Tensor

from molntk.kernels.activations import CLAMP, get_activation
from molntk.kernels.pooled_gradients import run_rows
from molntk.utils.autograd import grads_or_zeros

_FLAGS = {"contract"}


@dataclass(frozen=True)
class PooledTerms:
    """For pairs (a, b) on the support u (module docstring): ``g``, ``va``, ``vb``, ``vavb``
    (A, B): Σ_u w_u g(u), Σ_u w_u g_v(u), Σ_u w_u g_v'(u), Σ_u w_u g_vv'(u); ``c``, ``cva``,
    ``cvb``, ``cc`` (A, B, K): w_u g_c(u), w_u g_cv(u), w_u g_cv'(u), w_u g_cc(u) (the last
    four None unless second derivatives were asked for, except ``c``)."""

    g: Tensor
    va: Tensor
    vb: Tensor
    vavb: Tensor | None
    c: Tensor
    cva: Tensor | None
    cvb: Tensor | None
    cc: Tensor | None


def pooled_terms(activation: str, c: Tensor, va: Tensor, vb: Tensor, weights: Tensor, *, second: bool = True) -> PooledTerms:
    """:class:`PooledTerms` of the pairs with pre-activation kernels ``c`` (A, B, K), variances
    ``va`` (A,), ``vb`` (B,) and pooling weights ``weights`` (K,) (module docstring)."""
    if activation in COMPILED and c.device.type == "cpu" and c.dtype == torch.float64:
        return _compiled_terms(activation, c, va, vb, weights, second)
    values = (CLOSED_FORMS[activation](c, va[:, None, None], vb[None, :, None]) if activation in CLOSED_FORMS
              else autograd_g_derivatives(activation, c, va[:, None, None], vb[None, :, None], second))
    return terms_from_values(values, weights, second)


def terms_from_values(values: dict[str, Tensor], weights: Tensor, second: bool) -> PooledTerms:
    """:class:`PooledTerms` from the values of g and its derivatives at every (pair, u)."""
    full = lambda key: values[key].expand(values["g"].shape) * weights  # noqa: E731
    total = lambda key: values[key].expand(values["g"].shape) @ weights  # noqa: E731
    return PooledTerms(total("g"), total("va"), total("vb"), total("vavb") if second else None, full("c"),
                       full("cva") if second else None, full("cvb") if second else None, full("cc") if second else None)


def autograd_g_derivatives(activation: str, c: Tensor, va: Tensor, vb: Tensor, second: bool) -> dict[str, Tensor]:
    """g and its derivatives at every (pair, u) by autograd of the torch formulas of the dual
    (any activation); va, vb broadcast against c. Keys: g, c, va, vb and, with ``second``, cc,
    cva, cvb, vavb."""
    dual = get_activation(activation).dual
    with torch.enable_grad():
        c = c.detach().requires_grad_(True)
        va = va.detach().expand_as(c).clone().requires_grad_(True)
        vb = vb.detach().expand_as(c).clone().requires_grad_(True)
        f, fdot = dual(c, va, vb)
        g = f + c * fdot
        first = grads_or_zeros(g.sum(), (c, va, vb), create_graph=second)
        out = {"g": g.detach(), **{k: v.detach() for k, v in zip(("c", "va", "vb"), first)}}
        if second:
            cc, cva, cvb = grads_or_zeros(first[0].sum(), (c, va, vb), retain_graph=True)
            (vavb,) = grads_or_zeros(first[1].sum(), (vb,))
            out.update(cc=cc.detach(), cva=cva.detach(), cvb=cvb.detach(), vavb=vavb.detach())
    return out


def _erf_values(c: Tensor, va: Tensor, vb: Tensor) -> dict[str, Tensor]:
    """erf's g and its derivatives in torch (module docstring); va, vb broadcast against c."""
    alpha, beta = 1.0 / (1.0 + 2.0 * va), 1.0 / (1.0 + 2.0 * vb)
    s = torch.sqrt(alpha * beta)
    x = 2.0 * s * c
    rho = x.clamp(-1.0 + CLAMP, 1.0 - CLAMP)
    m = (x == rho).to(c.dtype)
    r = torch.rsqrt((1.0 - rho * rho).clamp(min=CLAMP))
    q = rho * rho * r * r
    fdot = (4.0 / math.pi) * s * r
    fdot_c = m * (8.0 / math.pi) * s * s * rho * r**3
    g = (2.0 / math.pi) * torch.asin(rho) + c * fdot
    d_v = m * (2.0 / math.pi) * rho * r + c * fdot * (1.0 + m * q)  # −g_v / α
    d_cv = (1.0 + m) * fdot * (1.0 + m * q) + 3.0 * c * fdot_c * (1.0 + q)  # −g_cv / α
    vavb = alpha * beta * (m * (2.0 / math.pi) * rho * r * (1.0 + q) + c * (4.0 / math.pi) * s * r * (1.0 + m * q * (4.0 + 3.0 * q)))
    return {"g": g, "c": (1.0 + m) * fdot + c * fdot_c, "va": -alpha * d_v, "vb": -beta * d_v,
            "cc": 3.0 * fdot_c + c * m * (16.0 / math.pi) * s**3 * r**3 * (1.0 + 3.0 * q),
            "cva": -alpha * d_cv, "cvb": -beta * d_cv, "vavb": vavb}


def _exp_values(c: Tensor, va: Tensor, vb: Tensor) -> dict[str, Tensor]:
    """exp's g and its derivatives in torch (module docstring)."""
    e = torch.exp(c + 0.5 * (va + vb))
    g, gc = (1.0 + c) * e, (2.0 + c) * e
    return {"g": g, "c": gc, "va": 0.5 * g, "vb": 0.5 * g, "cc": (3.0 + c) * e, "cva": 0.5 * gc, "cvb": 0.5 * gc,
            "vavb": 0.25 * g}


#: Activations whose g-derivatives have closed forms in torch.
CLOSED_FORMS: dict[str, Callable[[Tensor, Tensor, Tensor], dict[str, Tensor]]] = {"erf": _erf_values, "exp": _exp_values}


@numba.njit(nogil=True, inline="always", fastmath=_FLAGS)
def _erf_point(c, va, vb):  # pragma: no cover - compiled
    """(g, g_c, g_v, g_v', g_vv', g_cv, g_cv', g_cc) of erf at one point (module docstring)."""
    alpha, beta = 1.0 / (1.0 + 2.0 * va), 1.0 / (1.0 + 2.0 * vb)
    s = math.sqrt(alpha * beta)
    x = 2.0 * s * c
    rho = min(max(x, -1.0 + CLAMP), 1.0 - CLAMP)
    m = 1.0 if x == rho else 0.0
    r = 1.0 / math.sqrt(max(1.0 - rho * rho, CLAMP))
    r3 = r * r * r
    q = rho * rho * r * r
    fdot = (4.0 / math.pi) * s * r
    fdot_c = m * (8.0 / math.pi) * s * s * rho * r3
    g = (2.0 / math.pi) * math.asin(rho) + c * fdot
    d_v = m * (2.0 / math.pi) * rho * r + c * fdot * (1.0 + m * q)
    d_cv = (1.0 + m) * fdot * (1.0 + m * q) + 3.0 * c * fdot_c * (1.0 + q)
    vavb = alpha * beta * (m * (2.0 / math.pi) * rho * r * (1.0 + q) + c * (4.0 / math.pi) * s * r * (1.0 + m * q * (4.0 + 3.0 * q)))
    cc = 3.0 * fdot_c + c * m * (16.0 / math.pi) * s * s * s * r3 * (1.0 + 3.0 * q)
    return g, (1.0 + m) * fdot + c * fdot_c, -alpha * d_v, -beta * d_v, vavb, -alpha * d_cv, -beta * d_cv, cc


@numba.njit(nogil=True, inline="always", fastmath=_FLAGS)
def _exp_point(c, va, vb):  # pragma: no cover - compiled
    """(g, g_c, g_v, g_v', g_vv', g_cv, g_cv', g_cc) of exp at one point (module docstring)."""
    e = math.exp(c + 0.5 * (va + vb))
    g, gc = (1.0 + c) * e, (2.0 + c) * e
    return g, gc, 0.5 * g, 0.5 * g, 0.25 * g, 0.5 * gc, 0.5 * gc, (3.0 + c) * e


def _make_rows(point):
    """The compiled loop over pairs start..stop (p = a·B + b) for one activation's ``point``:
    sums (4, P) of w g, w g_v, w g_v', w g_vv' and, with ``second``, values (4, P, K) of w g_c,
    w g_cv, w g_cv', w g_cc (else only w g_c)."""

    @numba.njit(nogil=True, fastmath=_FLAGS)
    def rows(c, va, vb, w, n_b, second, sums, values, start, stop):  # pragma: no cover - compiled
        n = c.shape[1]
        for p in range(start, stop):
            a_var, b_var = va[p // n_b], vb[p % n_b]
            s_g = s_va = s_vb = s_vavb = 0.0
            for k in range(n):
                g, gc, gva, gvb, gvavb, gcva, gcvb, gcc = point(c[p, k], a_var, b_var)
                wk = w[k]
                s_g += wk * g
                s_va += wk * gva
                s_vb += wk * gvb
                s_vavb += wk * gvavb
                values[0, p, k] = wk * gc
                if second:
                    values[1, p, k] = wk * gcva
                    values[2, p, k] = wk * gcvb
                    values[3, p, k] = wk * gcc
            sums[0, p], sums[1, p], sums[2, p], sums[3, p] = s_g, s_va, s_vb, s_vavb

    return rows


#: Activations with a compiled loop (CPU, float64).
COMPILED = {"erf": _make_rows(_erf_point), "exp": _make_rows(_exp_point)}


def _compiled_terms(activation: str, c: Tensor, va: Tensor, vb: Tensor, weights: Tensor, second: bool) -> PooledTerms:
    """:func:`pooled_terms` by the compiled loop."""
    n_a, n_b, n = c.shape
    rows = np.ascontiguousarray(c.detach().reshape(n_a * n_b, n).numpy())
    sums = np.empty((4, n_a * n_b))
    values = np.empty((4 if second else 1, n_a * n_b, n))
    run_rows(COMPILED[activation], n_a * n_b, rows.size, rows, va.detach().contiguous().numpy(),
             vb.detach().contiguous().numpy(), weights.detach().contiguous().numpy(), n_b, second, sums, values)
    s = torch.from_numpy(sums).view(4, n_a, n_b)
    v = torch.from_numpy(values).view(-1, n_a, n_b, n)
    return PooledTerms(s[0], s[1], s[2], s[3] if second else None, v[0], v[1] if second else None,
                       v[2] if second else None, v[3] if second else None)
