"""The Cholesky factorisation of a large symmetric matrix in its own memory, on torch's BLAS.

scipy's LAPACK runs on a 32-bit-index OpenBLAS whose dpotrf faults on matrices of more than
2³¹ bytes (n > 16,383 in float64; measured: n = 17,000 segfaults, 12,000 does not), while its
triangular solves do not. :func:`upper_cholesky_in_place` factors any size without a copy
of the matrix: the right-looking blocked algorithm, for each diagonal block k,

    T_kk = chol(A_kk),   T_k,>k = T_kk⁻ᵀ A_k,>k,   A_i,≥i −= T_k,iᵀ T_k,≥i  (later block rows i),

m³/3 flops in matrix products on views of A. Only the upper triangle of A and its
diagonal blocks are written; the strict lower triangle outside the diagonal blocks keeps
A's entries (a caller can undo a failed attempt from it).
"""

from __future__ import annotations

import numpy as np
import torch

from molntk.regression.validation import row_slices

#: Rows and columns per block.
CHOLESKY_BLOCK = 1024


def upper_cholesky_in_place(A: np.ndarray, block: int) -> int:
    """Overwrite the upper triangle of the symmetric C-ordered ``A`` with T, TᵀT = A (module
    docstring; blocks of ``block`` rows). Returns 0, or as LAPACK's info the (1-based)
    position of the first pivot that is not positive; A's upper triangle and diagonal
    blocks are then part way through."""
    t = torch.from_numpy(A)
    m = len(A)
    for k in row_slices(m, block):
        T_kk, info = torch.linalg.cholesky_ex(t[k, k], upper=True)
        if int(info):
            return k.start + int(info)
        t[k, k] = T_kk
        if k.stop == m:
            return 0
        right = t[k, k.stop :]
        right.copy_(torch.linalg.solve_triangular(T_kk.mT, right, upper=False))
        for i in row_slices(m - k.stop, block):
            rows = slice(k.stop + i.start, k.stop + i.stop)
            t[rows, rows.start :] -= right[:, i].mT @ right[:, i.start :]
    return 0


def lower_cholesky_in_place(A: np.ndarray) -> int:
    """The same for a symmetric Fortran-ordered ``A``, whose lower triangle becomes L, L Lᵀ = A
    (LAPACK's layout: A's transpose view is C-ordered and its upper triangle is Lᵀ), in
    blocks of :data:`CHOLESKY_BLOCK`."""
    return upper_cholesky_in_place(A.T, CHOLESKY_BLOCK)
