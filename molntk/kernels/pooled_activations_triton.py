"""The fused activation-then-mean of :mod:`molntk.kernels.pooled_activations` on CUDA (Triton).

For P pairs with pre-activation kernels K_pk at the K points of a measure with weights w_k,
tangent kernels Θ_pk and variances v_p, v'_p, one program reads a block of rows once and
accumulates

    F̄_p = Σ_k w_k F(K_pk; v_p, v'_p),       Θ̄_p = Σ_k w_k Θ_pk Ḟ(K_pk; v_p, v'_p),

with the same per-pair constants, clamps and polynomial arcsin
(:data:`~molntk.kernels.arcsin.ASIN_COEFFICIENTS`, passed in as float64 values) as the CPU
loop; values are read in their dtype and computed and summed in float64. The torch path
makes about ten passes over the (P, K) values (each a read and a write); this makes one
read (4× faster than the torch path on an H200; see :data:`BLOCK_ROWS`).

Each row's sum is a sequence of tree reductions over fixed column blocks, so the result of a
pair does not depend on the other rows of the call (blockwise kernels equal
one-shot kernels bit for bit on one device). Triton is imported only here, when a CUDA
tensor reaches :func:`~molntk.kernels.pooled_activations.pooled_dual`; under
``TRITON_INTERPRET=1`` the same kernel runs on CPU tensors (used by the tests).
"""

from __future__ import annotations

import math
from functools import lru_cache

import torch
import triton
import triton.language as tl
from torch import Tensor

from molntk.kernels.activations import CLAMP
from molntk.kernels.arcsin import ASIN_COEFFICIENTS

#: Activations with a Triton kernel (the codes passed to it).
ACTIVATIONS = {"erf": 0, "relu": 1}
#: Rows per program, columns per step and warps per program. Measured on an H200 (2026-11-23,
#: ``benchmarks/so3_cuda.py --part blocks``: erf, 2¹⁹ rows × 381 float64 values, median of
#: do_bench): 16 × 32 × 4 warps 2.08 ms (9.6e10 values/s, 156 registers, no spills), against
#: 2.4–6.6 ms for the 13 other shapes from 4 × 128 to 128 × 32 (those of 32 × 64 and more
#: spill registers) and 8.35 ms for the torch path. The kernel is bound by float64
#: arithmetic (the arcsin polynomial, square roots, a division), not by memory: 0.77 TB/s
#: read of the card's 4.8.
BLOCK_ROWS = 16
BLOCK_COLS = 32
NUM_WARPS = 4

#: The float64 constants the kernel loads (Python float literals in a Triton kernel would be
#: rounded to float32): [0:13] the arcsin polynomial's coefficients, [13] π/2, [14] 2/π,
#: [15] 4/π, [16] 1/(2π), [17] the clamp of the dual activations.
CONSTANTS = (*ASIN_COEFFICIENTS, math.pi / 2, 2 / math.pi, 4 / math.pi, 1 / (2 * math.pi), CLAMP)
assert len(ASIN_COEFFICIENTS) == 13 and len(CONSTANTS) == 18


@triton.jit
def _asin(x, g0, g1, g2, g3, g4, g5, g6, g7, g8, g9, g10, g11, g12, half_pi):
    """arcsin x for |x| ≤ 1 (the formula of :func:`~molntk.kernels.pooled_activations.asin_poly`, degree-12 g by Estrin)."""
    ax = tl.abs(x)
    big = ax > 0.5
    t = tl.where(big, (1.0 - ax) * 0.5, ax * ax)
    s = tl.where(big, tl.sqrt(t), ax)
    t2 = t * t
    t4 = t2 * t2
    low = (g0 + g1 * t) + (g2 + g3 * t) * t2 + ((g4 + g5 * t) + (g6 + g7 * t) * t2) * t4
    high = (g8 + g9 * t) + (g10 + g11 * t) * t2 + g12 * t4
    r = s + s * t * (low + high * (t4 * t4))
    r = tl.where(big, half_pi - 2.0 * r, r)
    return tl.where(x < 0, -r, r)


@triton.jit
def _pooled_dual_kernel(
    k_ptr, t_ptr, va_ptr, vb_ptr, w_ptr, c_ptr, out_f_ptr, out_t_ptr, n_rows,
    N_COLS: tl.constexpr, ACT: tl.constexpr, SAME: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr,
):
    g0, g1, g2, g3 = tl.load(c_ptr + 0), tl.load(c_ptr + 1), tl.load(c_ptr + 2), tl.load(c_ptr + 3)
    g4, g5, g6, g7 = tl.load(c_ptr + 4), tl.load(c_ptr + 5), tl.load(c_ptr + 6), tl.load(c_ptr + 7)
    g8, g9, g10, g11 = tl.load(c_ptr + 8), tl.load(c_ptr + 9), tl.load(c_ptr + 10), tl.load(c_ptr + 11)
    g12, half_pi, two_over_pi = tl.load(c_ptr + 12), tl.load(c_ptr + 13), tl.load(c_ptr + 14)
    four_over_pi, inv_two_pi, clamp = tl.load(c_ptr + 15), tl.load(c_ptr + 16), tl.load(c_ptr + 17)
    rows = tl.program_id(0).to(tl.int64) * BLOCK_R + tl.arange(0, BLOCK_R)
    row_ok = rows < n_rows
    va = tl.load(va_ptr + rows, mask=row_ok, other=1.0).to(tl.float64)
    vb = tl.load(vb_ptr + rows, mask=row_ok, other=1.0).to(tl.float64)
    if ACT == 0:  # erf: ρ = c K, c = 2 d^{-1/2}, Ḟ = (4/π) d^{-1/2} (1 − ρ²)^{-1/2}, d = (1 + 2v)(1 + 2v')
        inv_sqrt_d = 1.0 / tl.sqrt((1.0 + 2.0 * va) * (1.0 + 2.0 * vb))
        a = (2.0 * inv_sqrt_d)[:, None]
        b = (four_over_pi * inv_sqrt_d)[:, None]
    else:  # relu: cos θ = K / √(v v') (0 for a zero variance), F = √(v v') sin θ / (2π) + K Ḟ
        prod = va * vb
        a = tl.where(prod > 0.0, 1.0 / tl.sqrt(tl.where(prod > 0.0, prod, 1.0)), 0.0)[:, None]
        b = (tl.sqrt(prod) * inv_two_pi)[:, None]
    f_sum = tl.zeros([BLOCK_R], dtype=tl.float64)
    t_sum = tl.zeros([BLOCK_R], dtype=tl.float64)
    for start in range(0, N_COLS, BLOCK_C):
        cols = start + tl.arange(0, BLOCK_C)
        col_ok = cols < N_COLS
        ok = row_ok[:, None] & col_ok[None, :]
        offsets = rows[:, None] * N_COLS + cols[None, :]
        k = tl.load(k_ptr + offsets, mask=ok, other=0.0).to(tl.float64)
        if SAME:
            theta = k
        else:
            theta = tl.load(t_ptr + offsets, mask=ok, other=0.0).to(tl.float64)
        w = tl.load(w_ptr + cols, mask=col_ok, other=0.0).to(tl.float64)[None, :]
        if ACT == 0:
            rho = tl.minimum(tl.maximum(k * a, -1.0 + clamp), 1.0 - clamp)
            f = two_over_pi * _asin(rho, g0, g1, g2, g3, g4, g5, g6, g7, g8, g9, g10, g11, g12, half_pi)
            fdot = b / tl.sqrt(tl.maximum(1.0 - rho * rho, clamp))
        else:
            cos = tl.minimum(tl.maximum(k * a, -1.0), 1.0)
            arcsin = _asin(cos, g0, g1, g2, g3, g4, g5, g6, g7, g8, g9, g10, g11, g12, half_pi)
            fdot = 0.5 - (half_pi - arcsin) * inv_two_pi
            f = b * tl.sqrt(1.0 - cos * cos) + k * fdot
        f_sum += tl.sum(w * f, axis=1)
        t_sum += tl.sum(w * theta * fdot, axis=1)
    tl.store(out_f_ptr + rows, f_sum, mask=row_ok)
    tl.store(out_t_ptr + rows, t_sum, mask=row_ok)


@lru_cache(maxsize=None)
def _constants(device: torch.device) -> Tensor:
    """:data:`CONSTANTS` on ``device``, copied there once (a copy from host memory per call
    would wait for the device's queued work)."""
    return torch.tensor(CONSTANTS, dtype=torch.float64, device=device)


def pooled_dual_triton(
    activation: str, k: Tensor, theta: Tensor | None, va: Tensor, vb: Tensor, weights: Tensor
) -> tuple[Tensor, Tensor]:
    """(F̄, Θ̄) of P rows: ``k`` and ``theta`` (P, K) contiguous (``theta`` None or ``k``
    itself: Θ = K), ``va``, ``vb`` (P,), ``weights`` (K,); results (P,) in float64."""
    n_rows, n_cols = k.shape
    constants = _constants(k.device)
    out_f = torch.empty(n_rows, dtype=torch.float64, device=k.device)
    out_t = torch.empty_like(out_f)
    same = theta is None or theta is k
    grid = (triton.cdiv(n_rows, BLOCK_ROWS),)
    _pooled_dual_kernel[grid](
        k, k if same else theta, va, vb, weights, constants, out_f, out_t, n_rows,
        N_COLS=n_cols, ACT=ACTIVATIONS[activation], SAME=same, BLOCK_R=BLOCK_ROWS, BLOCK_C=BLOCK_COLS, num_warps=NUM_WARPS,
    )
    return out_f, out_t
