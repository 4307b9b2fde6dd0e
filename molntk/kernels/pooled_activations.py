"""A dual activation followed by a weighted mean, fused into one pass over the values.

For P pairs with pre-activation kernels K_pk at the K points of a measure with weights
w_k, tangent kernels Θ_pk and the variances v_p, v'_p of the two inputs (docs/mathematics.md §2), a
nonlinearity followed by the mean (SO(3) ``Pool``, or the orbit average of the augmented
MLP) contributes

    F̄_p = Σ_k w_k F(K_pk; v_p, v'_p),       Θ̄_p = Σ_k w_k Θ_pk Ḟ(K_pk; v_p, v'_p),

with the dual activation (F, Ḟ) of :mod:`molntk.kernels.activations`. Evaluated with torch
this takes about ten passes over the (P, K) values plus torch's float64 arcsin, which is
scalar on CPU (≈ 5 ns a value, the largest single cost of the SO(3) NTK). On CPU, for erf
and ReLU, :func:`pooled_dual` instead runs one compiled loop per pair (numba, no GIL, the
pairs split over ``torch.get_num_threads()`` threads), with the arcsin of
:func:`asin_poly`: the same formulas, 3–7× faster on the development CPU (benchmark:
``benchmarks/so3_quadrature.py``). On CUDA the same formulas run as one Triton kernel
(:mod:`molntk.kernels.pooled_activations_triton`: one read of the values instead of about
ten passes). Other devices, dtypes and activations, and CUDA without Triton, take the
torch path. A call that autograd records (:func:`~molntk.kernels.activations.recording`:
gradients with respect to the kernels, e.g. forces) runs, for erf and exp on the CPU, the
unrecorded pass forward and a compiled loop backward
(:class:`~molntk.kernels.pooled_gradients.FusedPooledDual`); other recorded calls take the
differentiable torch path.

Results do not depend on how pairs are grouped into calls or threads: each pair's sum is one
loop over its K values, vectorised in an order fixed by K alone (tested), so blockwise and
one-shot kernels agree bit for bit.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numba
import numpy as np
import torch
from torch import Tensor

from molntk.kernels.activations import CLAMP, get_activation, recording
from molntk.kernels.arcsin import ASIN_COEFFICIENTS
from molntk.kernels.pooled_gradients import FusedPooledDual, backward_available, run_rows

_G = ASIN_COEFFICIENTS
_HALF_PI = math.pi / 2
#: fastmath flags: FMA contraction for the values; the sums over K may also be reassociated
#: (vectorised into partial sums; LLVM's order depends on the loop length only).
_FLAGS = {"contract"}
_SUM_FLAGS = {"contract", "reassoc"}


@numba.njit(nogil=True, inline="always", fastmath=_FLAGS)
def asin_poly(x: float) -> float:
    """arcsin x for |x| ≤ 1 to ≈ 2 ulp, branch-free enough to vectorise:

    |x| ≤ 1/2:  arcsin x = x + x t g(t),                       t = x²;
    |x| > 1/2:  arcsin |x| = π/2 − 2 arcsin √t = π/2 − 2 (s + s t g(t)),   t = (1 − |x|)/2, s = √t,

    with t ≤ 1/4 in both branches and g (:func:`~molntk.kernels.arcsin.asin_series_tail`) the
    degree-12 polynomial :data:`~molntk.kernels.arcsin.ASIN_COEFFICIENTS`, evaluated by
    Estrin's scheme."""
    ax = abs(x)
    big = ax > 0.5
    t = (1.0 - ax) * 0.5 if big else ax * ax
    s = math.sqrt(t) if big else ax
    t2 = t * t
    t4 = t2 * t2
    low = (_G[0] + _G[1] * t) + (_G[2] + _G[3] * t) * t2 + ((_G[4] + _G[5] * t) + (_G[6] + _G[7] * t) * t2) * t4
    high = (_G[8] + _G[9] * t) + (_G[10] + _G[11] * t) * t2 + _G[12] * t4
    r = s + s * t * (low + high * (t4 * t4))
    r = _HALF_PI - 2.0 * r if big else r
    return math.copysign(r, x)


@numba.njit(nogil=True, inline="always", fastmath=_FLAGS)
def _erf_row(va, vb):
    """erf, per pair: (c, s) = (2 d^{-1/2}, (4/π) d^{-1/2}) with d = (1 + 2v)(1 + 2v')."""
    inv_sqrt_d = 1.0 / math.sqrt((1.0 + 2.0 * va) * (1.0 + 2.0 * vb))
    return 2.0 * inv_sqrt_d, (4.0 / math.pi) * inv_sqrt_d


@numba.njit(nogil=True, inline="always", fastmath=_FLAGS)
def _erf_value(k, c, s):
    """erf at one point: F = (2/π) arcsin ρ, Ḟ = s (1 − ρ²)^{-1/2}, ρ = c K (clamped as in torch)."""
    rho = min(max(k * c, -1.0 + CLAMP), 1.0 - CLAMP)
    return (2.0 / math.pi) * asin_poly(rho), s / math.sqrt(max(1.0 - rho * rho, CLAMP))


@numba.njit(nogil=True, inline="always", fastmath=_FLAGS)
def _relu_row(va, vb):
    """ReLU, per pair: (1/√(v v') or 0 for a zero variance, √(v v') / (2π))."""
    prod = va * vb
    return (1.0 / math.sqrt(prod) if prod > 0.0 else 0.0), math.sqrt(prod) / (2.0 * math.pi)


@numba.njit(nogil=True, inline="always", fastmath=_FLAGS)
def _relu_value(k, inv_norm, scale):
    """ReLU at one point: cos θ = K/√(v v'), θ = π/2 − arcsin(cos θ), Ḟ = (π − θ)/(2π),
    F = √(v v') sin θ / (2π) + K Ḟ."""
    cos = min(max(k * inv_norm, -1.0), 1.0)
    fdot = 0.5 - (_HALF_PI - asin_poly(cos)) / (2.0 * math.pi)
    return scale * math.sqrt(1.0 - cos * cos) + k * fdot, fdot


def _make_rows(row, value):
    """The compiled loop over pairs start..stop for one activation (``row``: per-pair
    constants, ``value``: (F, Ḟ) at one point)."""

    @numba.njit(nogil=True, fastmath=_SUM_FLAGS)
    def rows(k, theta, va, vb, w, out_f, out_t, start, stop):  # pragma: no cover - compiled
        n = k.shape[1]
        for p in range(start, stop):
            a, b = row(va[p], vb[p])
            f_sum = 0.0
            t_sum = 0.0
            for q in range(n):
                f, d = value(k[p, q], a, b)
                f_sum += w[q] * f
                t_sum += w[q] * theta[p, q] * d
            out_f[p] = f_sum
            out_t[p] = t_sum

    return rows


_ROWS = {"erf": _make_rows(_erf_row, _erf_value), "relu": _make_rows(_relu_row, _relu_value)}

@lru_cache(maxsize=None)
def triton_available() -> bool:
    """Whether the Triton kernel (:mod:`molntk.kernels.pooled_activations_triton`) can be
    used: Triton importable (it ships with torch's CUDA builds on Linux)."""
    try:
        import molntk.kernels.pooled_activations_triton  # noqa: F401
    except ImportError:
        return False
    return True


def fused_available(activation: str, values: Tensor) -> bool:
    """Whether :func:`pooled_dual` runs a fused pass for ``activation`` on ``values``: the
    compiled loop on CPU, the Triton kernel on CUDA."""
    if activation not in _ROWS or values.dtype not in (torch.float64, torch.float32):
        return False
    return values.device.type == "cpu" or (values.device.type == "cuda" and triton_available())


def pooled_dual(
    activation: str, nngp: Tensor, ntk: Tensor | None, var1: Tensor, var2: Tensor, weights: Tensor
) -> tuple[Tensor, Tensor | None]:
    """(F̄, Θ̄) of the module docstring: ``nngp`` and ``ntk`` of shape (..., K), ``var1`` and
    ``var2`` broadcastable to (..., 1), ``weights`` (K,); results of shape (...) (Θ̄ None
    when ``ntk`` is None). ``ntk`` may be the same tensor as ``nngp``."""
    grad = recording(nngp, ntk, var1, var2)
    if grad and backward_available(activation, nngp, weights):
        return _fused_with_gradient(activation, nngp, ntk, var1, var2, weights)
    if grad or not fused_available(activation, nngp):
        f, fdot = get_activation(activation).dual(nngp, var1, var2)
        return f @ weights, None if ntk is None else (fdot * ntk if grad else fdot.mul_(ntk)) @ weights
    lead, k, theta, va, vb = _as_rows(nngp, ntk, var1, var2)
    if nngp.device.type == "cuda":
        from molntk.kernels.pooled_activations_triton import pooled_dual_triton

        f, t = pooled_dual_triton(activation, k, theta, va, vb, weights.detach().contiguous())
        return f.to(nngp.dtype).reshape(lead), None if ntk is None else t.to(nngp.dtype).reshape(lead)
    k, va, vb = k.numpy(), va.numpy(), vb.numpy()
    theta = k if theta is None else theta.numpy()
    w = weights.detach().contiguous().numpy()
    out_f, out_t = np.empty(k.shape[0], dtype=np.float64), np.empty(k.shape[0], dtype=np.float64)
    run_rows(_ROWS[activation], k.shape[0], k.size, k, theta, va, vb, w, out_f, out_t)
    f = torch.from_numpy(out_f).to(nngp.dtype).reshape(lead)
    return f, None if ntk is None else torch.from_numpy(out_t).to(nngp.dtype).reshape(lead)


def _fused_with_gradient(activation: str, nngp: Tensor, ntk: Tensor | None, var1: Tensor, var2: Tensor,
                         weights: Tensor) -> tuple[Tensor, Tensor | None]:
    """:func:`pooled_dual` recorded by autograd through :class:`~molntk.kernels.pooled_gradients.FusedPooledDual`
    (the unrecorded pass forward, a compiled loop backward)."""
    f, t = FusedPooledDual.apply(pooled_dual, activation, nngp, None if ntk is None or ntk is nngp else ntk, var1, var2, weights)
    return f, None if ntk is None else t


def _as_rows(nngp: Tensor, ntk: Tensor | None, var1: Tensor, var2: Tensor):
    """The pairs as rows: (leading shape, K values (P, K), Θ values (P, K) or None when Θ is
    absent or K itself, variances (P,) of each side), all contiguous."""
    lead, n = nngp.shape[:-1], nngp.shape[-1]
    k = nngp.detach().reshape(-1, n).contiguous()
    theta = None if ntk is None or ntk is nngp else ntk.detach().reshape(-1, n).contiguous()
    va, vb = (v.detach().expand(lead + (1,)).reshape(-1).contiguous() for v in (var1, var2))
    return lead, k, theta, va, vb
