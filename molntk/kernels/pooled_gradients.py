"""Reverse mode of the fused activation-then-mean (:func:`~molntk.kernels.pooled_activations.pooled_dual`).

For P pairs with pre-activation kernels K_pk, tangent kernels Θ_pk, variances v_p, v'_p and
weights w_k, the fused pass returns F̄_p = Σ_k w_k F(K_pk; v_p, v'_p) and
Θ̄_p = Σ_k w_k Θ_pk Ḟ(K_pk; v_p, v'_p). Given the cotangents a_p of F̄ and b_p of Θ̄:

    ∂/∂K_pk = w_k (a_p ∂F/∂K + b_p Θ_pk ∂Ḟ/∂K),      ∂/∂Θ_pk = w_k b_p Ḟ,
    ∂/∂v_p  = Σ_k w_k (a_p ∂F/∂v + b_p Θ_pk ∂Ḟ/∂v),    the same for v'_p,

with ∂F/∂K = Ḟ for every dual activation (Price's theorem; except where a clamp cuts it), and

- erf (ρ = c K, c = 2 d^{-1/2}, d = (1 + 2v)(1 + 2v'), q = 1 − ρ², Ḟ = (2/π) c q^{-1/2}):
  ∂Ḟ/∂K = Ḟ ρ c / q,  ∂F/∂v = −K Ḟ / (1 + 2v),  ∂Ḟ/∂v = −Ḟ / ((1 + 2v) q); where ρ is
  clamped to ±(1 − CLAMP) (as the torch formulas clamp it) the ρ-terms vanish, as in autograd
  of those formulas: ∂F/∂K = ∂Ḟ/∂K = ∂F/∂v = 0 and ∂Ḟ/∂v = −Ḟ / (1 + 2v);
- exp (F = Ḟ = exp(K + (v + v')/2)): ∂Ḟ/∂K = F,  ∂F/∂v = ∂Ḟ/∂v = F / 2.

:class:`FusedPooledDual` is the autograd function: its forward is the fused pass (detached),
its backward one compiled loop per pair over the K values (numba, no GIL, pairs split over
torch's threads as the forward does), about the cost of the forward pass. The torch path
instead records about ten passes over the (P, K) values and differentiates them (≈ 40× the
fused forward, measured on ethanol environment pairs). A backward pass that is itself
recorded (``create_graph=True``, second derivatives) recomputes the torch formulas on fresh
aliases of the saved inputs and differentiates them, so higher derivatives stay exact (aliases:
a self-kernel's variance is an entry of its own K, so the inputs are not independent).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache

import numba
import numpy as np
import torch
from torch import Tensor

from molntk.kernels.activations import CLAMP, get_activation

_FLAGS = {"contract"}
_SUM_FLAGS = {"contract", "reassoc"}
#: Pair-value products below which one thread does the whole call.
SPLIT_MIN = 1 << 15


@numba.njit(nogil=True, inline="always", fastmath=_FLAGS)
def _erf_constants(va, vb):
    """(c, 1/(1 + 2v), 1/(1 + 2v')) of a pair."""
    ia, ib = 1.0 / (1.0 + 2.0 * va), 1.0 / (1.0 + 2.0 * vb)
    return 2.0 * math.sqrt(ia * ib), ia, ib


@numba.njit(nogil=True, inline="always", fastmath=_FLAGS)
def _erf_derivatives(k, c, ia, ib):
    """(Ḟ, ∂F/∂K, ∂Ḟ/∂K, ∂F/∂v, ∂Ḟ/∂v, ∂F/∂v', ∂Ḟ/∂v') of erf at one point (module docstring),
    branch-free (``inside`` is 0 where ρ is clamped) so that the loop vectorises."""
    x = k * c
    rho = min(max(x, -1.0 + CLAMP), 1.0 - CLAMP)
    inside = 1.0 if x == rho else 0.0
    r = 1.0 / math.sqrt(max(1.0 - rho * rho, CLAMP))
    fdot = (2.0 / math.pi) * c * r
    on_rho = inside * fdot
    reach = fdot * (1.0 + inside * (r * r - 1.0))  # Ḟ / q inside, Ḟ where clamped
    return fdot, on_rho, on_rho * rho * c * r * r, -on_rho * k * ia, -reach * ia, -on_rho * k * ib, -reach * ib


@numba.njit(nogil=True, inline="always", fastmath=_FLAGS)
def _exp_constants(va, vb):
    """(exp((v + v')/2) shift, unused, unused) of a pair."""
    return 0.5 * (va + vb), 0.0, 0.0


@numba.njit(nogil=True, inline="always", fastmath=_FLAGS)
def _exp_derivatives(k, half, unused_a, unused_b):
    """(Ḟ, ∂F/∂K, ∂Ḟ/∂K, ∂F/∂v, ∂Ḟ/∂v, ∂F/∂v', ∂Ḟ/∂v') of exp at one point: F three times, F/2 four times."""
    f = math.exp(k + half)
    return f, f, f, 0.5 * f, 0.5 * f, 0.5 * f, 0.5 * f


def _make_backward(constants, derivatives):
    """The compiled backward loop over pairs start..stop for one activation. ``same``: Θ is K
    (one tensor), and its two gradients are summed into ``dk``."""

    @numba.njit(nogil=True, fastmath=_SUM_FLAGS)
    def rows(k, theta, va, vb, w, ga, gb, same, dk, dtheta, dva, dvb, start, stop):  # pragma: no cover - compiled
        n = k.shape[1]
        for p in range(start, stop):
            c0, c1, c2 = constants(va[p], vb[p])
            a, b = ga[p], gb[p]
            sa = 0.0
            sb = 0.0
            if same:  # dΘ is added into dK
                for q in range(n):
                    fdot, dfk, dfdot, dfa, dfdota, dfb, dfdotb = derivatives(k[p, q], c0, c1, c2)
                    bt = b * theta[p, q]
                    dk[p, q] = w[q] * (a * dfk + bt * dfdot + b * fdot)
                    sa += w[q] * (a * dfa + bt * dfdota)
                    sb += w[q] * (a * dfb + bt * dfdotb)
            else:
                for q in range(n):
                    fdot, dfk, dfdot, dfa, dfdota, dfb, dfdotb = derivatives(k[p, q], c0, c1, c2)
                    bt = b * theta[p, q]
                    dk[p, q] = w[q] * (a * dfk + bt * dfdot)
                    dtheta[p, q] = w[q] * b * fdot
                    sa += w[q] * (a * dfa + bt * dfdota)
                    sb += w[q] * (a * dfb + bt * dfdotb)
            dva[p] = sa
            dvb[p] = sb

    return rows


BACKWARD_ROWS = {"erf": _make_backward(_erf_constants, _erf_derivatives), "exp": _make_backward(_exp_constants, _exp_derivatives)}


@lru_cache(maxsize=None)
def _pool(threads: int) -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=threads, thread_name_prefix="molntk-pooled-dual")


def run_rows(rows: Callable, n_pairs: int, n_values: int, *args) -> None:
    """``rows(*args, start, stop)`` over pairs 0..n_pairs, split over ``torch.get_num_threads()``
    threads when there are at least :data:`SPLIT_MIN` values per thread (the compiled loops
    release the GIL)."""
    threads = max(1, min(torch.get_num_threads(), n_pairs, n_values // SPLIT_MIN))
    if threads == 1:
        rows(*args, 0, n_pairs)
        return
    bounds = np.linspace(0, n_pairs, threads + 1).astype(int)
    jobs = [_pool(threads).submit(rows, *args, a, b) for a, b in zip(bounds[:-1], bounds[1:])]
    for job in jobs:
        job.result()


def backward_available(activation: str, values: Tensor, weights: Tensor) -> bool:
    """Whether :class:`FusedPooledDual` differentiates ``activation`` on ``values``: erf or exp,
    float32/64 on the CPU, constant weights."""
    return (activation in BACKWARD_ROWS and values.device.type == "cpu" and values.dtype in (torch.float64, torch.float32)
            and not weights.requires_grad)


def _rows(t: Tensor, lead: torch.Size, n: int) -> np.ndarray:
    """A (..., n) tensor, or one broadcastable to lead + (n,), as contiguous float64 rows (P, n)."""
    return t.detach().expand(lead + (n,)).reshape(-1, n).to(torch.float64).contiguous().numpy()


class FusedPooledDual(torch.autograd.Function):
    """(F̄, Θ̄) = ``evaluate``(activation, K, Θ, v, v', w) with the backward of the module
    docstring. ``ntk`` None means Θ is K itself (one tensor; Θ̄ is then Σ w K Ḟ)."""

    @staticmethod
    def forward(ctx, evaluate: Callable, activation: str, nngp: Tensor, ntk: Tensor | None, var1: Tensor, var2: Tensor,
                weights: Tensor) -> tuple[Tensor, Tensor]:
        ctx.activation = activation
        ctx.save_for_backward(nngp, ntk, var1, var2, weights)
        k = nngp.detach()
        return evaluate(activation, k, k if ntk is None else ntk.detach(), var1.detach(), var2.detach(), weights.detach())

    @staticmethod
    def backward(ctx, grad_f: Tensor | None, grad_t: Tensor | None):
        nngp, ntk, var1, var2, weights = ctx.saved_tensors
        if torch.is_grad_enabled():  # a recorded backward (second derivatives): the torch formulas
            grads = _recorded_backward(ctx.activation, nngp, ntk, var1, var2, weights, grad_f, grad_t, ctx.needs_input_grad[2:6])
            return (None, None, *grads, None)
        lead, n = nngp.shape[:-1], nngp.shape[-1]
        zeros = torch.zeros(lead, dtype=torch.float64)
        ga = (zeros if grad_f is None else grad_f.detach().to(torch.float64).cpu()).reshape(-1).contiguous().numpy()
        gb = (zeros if grad_t is None else grad_t.detach().to(torch.float64).cpu()).reshape(-1).contiguous().numpy()
        k = _rows(nngp, lead, n)
        theta = k if ntk is None else _rows(ntk, lead, n)
        va, vb = _rows(var1, lead, 1)[:, 0].copy(), _rows(var2, lead, 1)[:, 0].copy()
        w = weights.detach().to(torch.float64).contiguous().numpy()
        dk, dva, dvb = np.empty_like(k), np.empty(k.shape[0]), np.empty(k.shape[0])
        dtheta = np.empty((0, n)) if ntk is None else np.empty_like(k)
        run_rows(BACKWARD_ROWS[ctx.activation], k.shape[0], k.size, k, theta, va, vb, w, ga, gb, ntk is None, dk, dtheta,
                 dva, dvb)
        d_nngp = torch.from_numpy(dk).to(nngp.dtype).reshape(nngp.shape)
        d_ntk = None if ntk is None else torch.from_numpy(dtheta).to(ntk.dtype).reshape(ntk.shape)
        d_var1, d_var2 = (torch.from_numpy(d).to(v.dtype).reshape(lead + (1,)).sum_to_size(v.shape) if need else None
                          for d, v, need in ((dva, var1, ctx.needs_input_grad[4]), (dvb, var2, ctx.needs_input_grad[5])))
        return None, None, d_nngp, d_ntk, d_var1, d_var2, None


def _recorded_backward(activation: str, nngp: Tensor, ntk: Tensor | None, var1: Tensor, var2: Tensor, weights: Tensor,
                       grad_f: Tensor | None, grad_t: Tensor | None, needs: tuple[bool, ...]) -> list[Tensor | None]:
    """Partial derivatives with respect to (K, Θ, v, v') of the torch formulas recomputed from
    the saved inputs, recorded (differentiable again).

    The formulas are recomputed on a fresh alias of each input, and the gradients taken with
    respect to the aliases: the inputs need not be independent (a self-kernel's variance v is
    an entry of its own K, and v and v' are one tensor), and a gradient with respect to the
    inputs themselves would also collect the paths from one through the other, which autograd
    then adds once more.
    """
    k, theta, v1, v2 = (None if x is None else x.view_as(x) for x in (nngp, ntk, var1, var2))
    f, fdot = get_activation(activation).dual(k, v1, v2)
    outputs = [f @ weights, (fdot * (k if theta is None else theta)) @ weights]
    pairs = [(o, g) for o, g in zip(outputs, (grad_f, grad_t)) if g is not None]
    aliases = (k, theta, v1, v2)
    inputs = [x for x, need in zip(aliases, needs) if need and x is not None]
    grads = iter(torch.autograd.grad([o for o, _ in pairs], inputs, [g for _, g in pairs], create_graph=True, allow_unused=True))
    return [next(grads) if need and x is not None else None for x, need in zip(aliases, needs)]
