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
torch path.

Calls that autograd records (:func:`~molntk.kernels.activations.recording`: gradients with
respect to the kernels, e.g. forces) take the compiled loop too for erf on CPU
(:class:`FusedPooledDual`), whose backward is a second compiled pass: with upstream gradients
g_F = ∂L/∂F̄_p, g_Θ = ∂L/∂Θ̄_p and ρ = c K, c = 2 d^{-1/2}, d = (1 + 2v)(1 + 2v'),

    ∂L/∂K_pk = w_k c [g_F ∂F/∂ρ + g_Θ Θ_pk ∂Ḟ/∂ρ],          ∂L/∂Θ_pk = w_k g_Θ Ḟ_pk,
    ∂L/∂v_p  = −Σ_k w_k [(g_F ∂F/∂ρ + g_Θ Θ_pk ∂Ḟ/∂ρ) ρ + g_Θ Θ_pk Ḟ_pk] / (1 + 2v_p)   (v' alike),

with ∂F/∂ρ = (2/π)(1 − ρ²)^{-1/2} and ∂Ḟ/∂ρ = Ḟ ρ / (1 − ρ²), both zeroed where torch's clamp
of ρ cuts the gradient, so that it is the torch path's gradient to rounding (tested); forces
of the default model cost 2.3× less CPU time than through the torch formulas (measured,
:mod:`molntk.models.forces`). Other activations and devices, and backward passes that autograd
records in turn (second derivatives), go through the torch formulas.

Results do not depend on how pairs are grouped into calls or threads: each pair's sum is one
loop over its K values, vectorised in an order fixed by K alone (tested), so blockwise and
one-shot kernels agree bit for bit.
"""

from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache

import numba
import numpy as np
import torch
from torch import Tensor

from molntk.kernels.activations import CLAMP, get_activation, recording
from molntk.kernels.arcsin import ASIN_COEFFICIENTS

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


@numba.njit(nogil=True, fastmath=_SUM_FLAGS, error_model="numpy")  # no ZeroDivisionError check: the loop vectorises
def _erf_backward_rows(k, theta, va, vb, w, g_f, g_t, out_k, out_t, out_va, out_vb, same, start, stop):  # pragma: no cover - compiled
    """The backward pass of the module docstring for erf over pairs start..stop; ``same``: Θ is
    K (one tensor), whose gradient ``out_k`` then sums both terms (``out_t`` unused). The clamp
    of 1 − ρ² at CLAMP never engages (|ρ| ≤ 1 − CLAMP gives 1 − ρ² ≥ 2 CLAMP − CLAMP²), so
    ∂F/∂ρ = (2/π) r and ∂Ḟ/∂ρ = Ḟ ρ r² with r = (1 − ρ²)^{-1/2}; the one of ρ zeroes both."""
    n = k.shape[1]
    for p in range(start, stop):
        c, s = _erf_row(va[p], vb[p])
        total = 0.0  # Σ_k of the bracket of ∂L/∂v, the same for both variances
        for q in range(n):
            x = k[p, q] * c
            rho = min(max(x, -1.0 + CLAMP), 1.0 - CLAMP)
            r = 1.0 / math.sqrt(1.0 - rho * rho)
            fdot = s * r
            g_fdot = w[q] * g_t[p]
            d_rho = w[q] * r * ((2.0 / math.pi) * g_f[p] + g_t[p] * theta[p, q] * fdot * rho * r) if x == rho else 0.0
            if same:
                out_k[p, q] = d_rho * c + g_fdot * fdot
            else:
                out_k[p, q] = d_rho * c
                out_t[p, q] = g_fdot * fdot
            total += d_rho * x + g_fdot * theta[p, q] * fdot  # the second term: ∂Ḟ/∂v through its prefactor s
        out_va[p] = -total / (1.0 + 2.0 * va[p])
        out_vb[p] = -total / (1.0 + 2.0 * vb[p])


_BACKWARD_ROWS = {"erf": _erf_backward_rows}

#: Pair-value products below which one thread does the whole call.
_SPLIT_MIN = 1 << 15


@lru_cache(maxsize=None)
def _pool(threads: int) -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=threads, thread_name_prefix="molntk-pooled-dual")


@lru_cache(maxsize=None)
def triton_available() -> bool:
    """Whether the Triton kernel (:mod:`molntk.kernels.pooled_activations_triton`) can be
    used: Triton importable (it ships with torch's CUDA builds on Linux)."""
    try:
        import molntk.kernels.pooled_activations_triton  # noqa: F401
    except ImportError:
        return False
    return True


def _over_pairs(rows, n_pairs: int, n_values: int, *args) -> None:
    """``rows(*args, start, stop)`` over pairs 0..n_pairs, split over up to
    ``torch.get_num_threads()`` threads when the call has at least :data:`_SPLIT_MIN` values a thread."""
    threads = max(1, min(torch.get_num_threads(), n_pairs, n_values // _SPLIT_MIN))
    if threads == 1:
        rows(*args, 0, n_pairs)
        return
    bounds = np.linspace(0, n_pairs, threads + 1).astype(int)
    for job in [_pool(threads).submit(rows, *args, a, b) for a, b in zip(bounds[:-1], bounds[1:])]:
        job.result()


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
    if grad and ntk is not None and activation in _BACKWARD_ROWS and nngp.device.type == "cpu" and fused_available(activation, nngp):
        return FusedPooledDual.apply(activation, nngp, ntk, var1, var2, weights)
    if grad or not fused_available(activation, nngp):
        return _torch_pooled_dual(activation, nngp, ntk, var1, var2, weights, grad)
    lead, k, theta, va, vb = _as_rows(nngp, ntk, var1, var2)
    if nngp.device.type == "cuda":
        from molntk.kernels.pooled_activations_triton import pooled_dual_triton

        f, t = pooled_dual_triton(activation, k, theta, va, vb, weights.detach().contiguous())
        return f.to(nngp.dtype).reshape(lead), None if ntk is None else t.to(nngp.dtype).reshape(lead)
    k, va, vb = k.numpy(), va.numpy(), vb.numpy()
    theta = k if theta is None else theta.numpy()
    out_f, out_t = np.empty(k.shape[0], dtype=np.float64), np.empty(k.shape[0], dtype=np.float64)
    _over_pairs(_ROWS[activation], k.shape[0], k.size, k, theta, va, vb, weights.detach().contiguous().numpy(), out_f, out_t)
    f = torch.from_numpy(out_f).to(nngp.dtype).reshape(lead)
    return f, None if ntk is None else torch.from_numpy(out_t).to(nngp.dtype).reshape(lead)


def _torch_pooled_dual(activation: str, nngp: Tensor, ntk: Tensor | None, var1: Tensor, var2: Tensor, weights: Tensor,
                       grad: bool) -> tuple[Tensor, Tensor | None]:
    """(F̄, Θ̄) by the torch dual activation and a weighted sum (``grad``: autograd records, no
    update in place)."""
    f, fdot = get_activation(activation).dual(nngp, var1, var2)
    return f @ weights, None if ntk is None else (fdot * ntk if grad else fdot.mul_(ntk)) @ weights


class FusedPooledDual(torch.autograd.Function):
    """:func:`pooled_dual` on CPU as a differentiable function (erf): forward the compiled
    pass, backward the compiled pass of the module docstring. Gradients with respect to
    ``nngp``, ``ntk`` and the variances (summed back to their broadcast shapes); ``ntk`` may
    be ``nngp`` itself, whose gradient then holds both terms. A backward that autograd records
    (``create_graph``: second derivatives, :mod:`molntk.molecular.derivative_kernels`) goes
    through the torch formulas instead, which are differentiable again."""

    @staticmethod
    def forward(ctx, activation: str, nngp: Tensor, ntk: Tensor, var1: Tensor, var2: Tensor,
                weights: Tensor) -> tuple[Tensor, Tensor]:
        ctx.activation, ctx.same = activation, ntk is nngp
        ctx.save_for_backward(nngp, ntk, var1, var2, weights)
        return pooled_dual(activation, nngp, ntk, var1, var2, weights)  # autograd records nothing in here

    @staticmethod
    def backward(ctx, grad_f: Tensor, grad_t: Tensor) -> tuple[Tensor | None, ...]:
        nngp, ntk, var1, var2, weights = ctx.saved_tensors
        if torch.is_grad_enabled():
            return (None, *_recorded_backward(ctx.activation, nngp, None if ctx.same else ntk, var1, var2, weights, grad_f, grad_t), None)
        lead, k, theta, va, vb = _as_rows(nngp, None if ctx.same else ntk, var1, var2)
        k_np = k.numpy()
        theta_np = k_np if theta is None else theta.numpy()
        out_k, out_t = np.empty_like(k_np), (np.empty((0, 0), dtype=k_np.dtype) if ctx.same else np.empty_like(k_np))
        out_va, out_vb = np.empty(k_np.shape[0], dtype=np.float64), np.empty(k_np.shape[0], dtype=np.float64)
        g_f, g_t = (g.reshape(-1).to(torch.float64).contiguous().numpy() for g in (grad_f, grad_t))
        _over_pairs(_BACKWARD_ROWS[ctx.activation], k_np.shape[0], k_np.size, k_np, theta_np, va.numpy(), vb.numpy(),
                    weights.detach().contiguous().numpy(), g_f, g_t, out_k, out_t, out_va, out_vb, ctx.same)
        d_k = torch.from_numpy(out_k).reshape(nngp.shape)
        d_t = None if ctx.same else torch.from_numpy(out_t).reshape(ntk.shape)
        d_v1, d_v2 = (torch.from_numpy(g).to(v.dtype).reshape(lead + (1,)).sum_to_size(v.shape) for g, v in ((out_va, var1), (out_vb, var2)))
        return None, d_k, d_t, d_v1, d_v2, None


def _as_rows(nngp: Tensor, ntk: Tensor | None, var1: Tensor, var2: Tensor):
    """The pairs as rows: (leading shape, K values (P, K), Θ values (P, K) or None when Θ is
    absent or K itself, variances (P,) of each side), all contiguous."""
    lead, n = nngp.shape[:-1], nngp.shape[-1]
    k = nngp.detach().reshape(-1, n).contiguous()
    theta = None if ntk is None or ntk is nngp else ntk.detach().reshape(-1, n).contiguous()
    va, vb = (v.detach().expand(lead + (1,)).reshape(-1).contiguous() for v in (var1, var2))
    return lead, k, theta, va, vb


def _recorded_backward(activation: str, nngp: Tensor, ntk: Tensor | None, var1: Tensor, var2: Tensor, weights: Tensor,
                       grad_f: Tensor, grad_t: Tensor) -> list[Tensor | None]:
    """Gradients of Σ (grad_f F̄ + grad_t Θ̄) with respect to (nngp, ntk, var1, var2) through the
    torch formulas, recorded for a further derivative (``ntk`` None: it is ``nngp``, whose
    gradient holds both terms; then None in its place)."""
    inputs = [nngp, ntk, var1, var2]
    f, t = _torch_pooled_dual(activation, nngp, nngp if ntk is None else ntk, var1, var2, weights, True)
    wanted = [x for x in inputs if x is not None and x.requires_grad]
    grads = iter(torch.autograd.grad((f, t), wanted, (grad_f, grad_t), create_graph=True, allow_unused=True))
    return [next(grads) if x is not None and x.requires_grad else None for x in inputs]
