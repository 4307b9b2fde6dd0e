"""The Cholesky factorisation of a large symmetric matrix in its own memory, on torch's BLAS.

scipy's OpenBLAS faults in its multithreaded dpotrf on large matrices (measured with two
threads: n = 17,000 segfaults, n = 12,000 does not; on one thread n = 17,000 factors; the
sGDML baseline met the same fault at n = 27,000), while its triangular solves, dpotri and
LU do not (n ≈ 16,500). :func:`upper_cholesky_in_place` factors any size without a copy
of the matrix: the right-looking blocked algorithm, for each diagonal block k,

    T_kk = chol(A_kk),   T_k,>k = T_kk⁻ᵀ A_k,>k,   A_i,≥i −= T_k,iᵀ T_k,≥i  (later block rows i),

m³/3 flops in matrix products on views of A. Only the upper triangle of A and its
diagonal blocks are written; the strict lower triangle outside the diagonal blocks keeps
A's entries, so that :class:`SymmetricBackup` (the diagonal blocks) makes A whole again
afterwards: :func:`cholesky_solve_in_place` solves with a kernel matrix that is the memory
of a model, for several shifts, without a copy of it.
"""

from __future__ import annotations

import numpy as np
import scipy.linalg
import torch

from molntk.regression.validation import row_slices
from molntk.scale.progress import ProgressCallback

#: Rows and columns per block.
CHOLESKY_BLOCK = 1024


def upper_cholesky_in_place(A: np.ndarray, block: int) -> int:
    """Overwrite the upper triangle of the symmetric C-ordered ``A`` with T, TᵀT = A (module
    docstring; blocks of ``block`` rows): :func:`upper_cholesky_panels` on the row panels
    A[k, k.start:], views of A."""
    return upper_cholesky_panels([A[k, k.start :] for k in row_slices(len(A), block)])


def upper_panels(m: int, block: int = CHOLESKY_BLOCK) -> list[np.ndarray]:
    """The upper triangle of an m × m matrix as zeroed row panels, half its memory: panel k
    holds the rows of block k (``block`` rows) from column k.start on, [A_kk, A_k,>k], so that
    entry (r, c ≥ k.start) of a row r in block k is panel k's [r − k.start, c − k.start]."""
    return [np.zeros((k.stop - k.start, m - k.start)) for k in row_slices(m, block)]


def upper_cholesky_panels(panels: list[np.ndarray], progress: ProgressCallback | None = None) -> int:
    """Overwrite the row panels [A_kk, A_k,>k] of a symmetric A (:func:`upper_panels`, or views
    of a full matrix) with those of T, TᵀT = A, by the module docstring's algorithm, reading
    and writing nothing below the diagonal blocks (each diagonal block is first made
    symmetric from its upper triangle, so only that must hold A). Returns 0, or as LAPACK's
    info the (1-based) position of the first pivot that is not positive; the panels are
    then part way through. ``progress(done, total)`` after each panel, in block updates: panel
    k of P updates the (P − k)(P − k + 1)/2 blocks (i, j ≥ i) of the trailing triangle, its
    share of the work, so that the count grows with the flops done."""
    tensors = [torch.from_numpy(p) for p in panels]
    updates = [(len(tensors) - k) * (len(tensors) - k + 1) // 2 for k in range(len(tensors))]
    start, done, total = 0, 0, sum(updates)
    for index, t in enumerate(tensors):
        size = t.shape[0]
        diagonal = t[:, :size]
        diagonal.copy_(torch.triu(diagonal) + torch.triu(diagonal, 1).mT)
        T_kk, info = torch.linalg.cholesky_ex(diagonal, upper=True)
        if int(info):
            return start + int(info)
        diagonal.copy_(T_kk)
        right = t[:, size:]
        right.copy_(torch.linalg.solve_triangular(T_kk.mT, right, upper=False))
        column = 0
        for later in tensors[index + 1 :]:  # A_i,≥i −= T_k,iᵀ T_k,≥i, in place (no panel-sized temporary)
            width = later.shape[0]
            later.addmm_(right[:, column : column + width].mT, right[:, column:], alpha=-1)
            column += width
        start += size
        done += updates[index]
        if progress is not None:
            progress(done, total)
    return 0


def upper_panels_solve(panels: list[np.ndarray], y: np.ndarray) -> np.ndarray:
    """x = (TᵀT)⁻¹ y for the factor T in row panels (:func:`upper_cholesky_panels`): Tᵀ z = y
    forward, z_k = T_kk⁻ᵀ z_k then z_>k −= T_k,>kᵀ z_k, and T x = z backward, x_k = T_kk⁻¹
    (z_k − T_k,>k x_>k), reading the panels only."""
    tensors = [torch.from_numpy(p) for p in panels]
    x = torch.tensor(np.asarray(y, dtype=np.float64).reshape(len(y), -1))
    starts = np.cumsum([0] + [t.shape[0] for t in tensors])
    for t, start, stop in zip(tensors, starts[:-1], starts[1:]):
        size = stop - start
        x[start:stop] = torch.linalg.solve_triangular(t[:, :size].mT, x[start:stop], upper=False)
        x[stop:] -= t[:, size:].mT @ x[start:stop]
    for t, start, stop in reversed(list(zip(tensors, starts[:-1], starts[1:]))):
        size = stop - start
        x[start:stop] = torch.linalg.solve_triangular(t[:, :size], x[start:stop] - t[:, size:] @ x[stop:], upper=True)
    return x.numpy().reshape(np.shape(y))


def place_in_panels(panels: list[np.ndarray], rows: np.ndarray, cols: np.ndarray, block: np.ndarray) -> None:
    """Write the entries of ``block`` (at ``rows`` × ``cols`` of the matrix) that lie in the row
    panels of :func:`upper_panels` (column ≥ the row's panel start) into them; the others are
    below the diagonal blocks."""
    start = 0
    for panel in panels:
        stop = start + panel.shape[0]
        inside = (rows >= start) & (rows < stop)
        if inside.any():
            keep = cols >= start
            panel[np.ix_(rows[inside] - start, cols[keep] - start)] = block[np.ix_(inside, keep)]
        start = stop


def add_to_panels_diagonal(panels: list[np.ndarray], shift: np.ndarray) -> None:
    """A + diag(``shift``) for A in row panels (:func:`upper_panels`), in place."""
    start = 0
    for p in panels:
        size = p.shape[0]
        p[np.arange(size), np.arange(size)] += shift[start : start + size]
        start += size


def lower_cholesky_in_place(A: np.ndarray) -> int:
    """The same for a symmetric Fortran-ordered ``A``, whose lower triangle becomes L, L Lᵀ = A
    (LAPACK's layout: A's transpose view is C-ordered and its upper triangle is Lᵀ), in
    blocks of :data:`CHOLESKY_BLOCK`."""
    return upper_cholesky_in_place(A.T, CHOLESKY_BLOCK)


def c_ordered_view(A: np.ndarray) -> np.ndarray:
    """A symmetric matrix as a C-ordered view of its memory: itself, or for a Fortran-ordered
    one its transpose (the same matrix)."""
    if A.flags.c_contiguous:
        return A
    if A.flags.f_contiguous:
        return A.T
    raise ValueError("the matrix must be C- or Fortran-contiguous to be factored in place")


class SymmetricBackup:
    """The diagonal blocks (of :data:`CHOLESKY_BLOCK` rows, ``block``) of a symmetric C-ordered
    matrix: with its strict lower triangle, which :func:`upper_cholesky_in_place` with the
    same ``block`` leaves outside them, all of it."""

    def __init__(self, A: np.ndarray) -> None:
        A = c_ordered_view(A)
        self.block = CHOLESKY_BLOCK
        self.blocks = row_slices(len(A), self.block)
        self.diagonal_blocks = [A[k, k].copy() for k in self.blocks]

    @property
    def diagonal(self) -> np.ndarray:
        """The matrix's diagonal."""
        return np.concatenate([np.diag(block) for block in self.diagonal_blocks])

    def restore(self, A: np.ndarray) -> None:
        """A as it was backed up: the diagonal blocks, then the upper triangle from the lower,
        a block of rows at a time (temporaries of ``block`` rows)."""
        A = c_ordered_view(A)
        for k, block in zip(self.blocks, self.diagonal_blocks):
            A[k, k] = block
        for rows in self.blocks:
            A[rows, rows.start :] = np.triu(A[rows.start :, rows].T, k=1) + np.tril(A[rows, rows.start :])


def shifted_cholesky_in_place(A: np.ndarray, shift: np.ndarray | float, backup: SymmetricBackup) -> bool:
    """Factor A + diag(shift) in the memory of the symmetric C-ordered ``A`` (its diagonal
    set from ``backup``, made before): True with T in A's upper triangle, or False with A
    restored when A + diag(shift) is not positive definite."""
    np.fill_diagonal(A, backup.diagonal + shift)
    if upper_cholesky_in_place(A, backup.block) == 0:
        return True
    backup.restore(A)
    return False


def cholesky_solve_in_place(A: np.ndarray, Y: np.ndarray, shift: np.ndarray | float,
                            backup: SymmetricBackup) -> np.ndarray | None:
    """(A + diag(shift))⁻¹ Y by :func:`shifted_cholesky_in_place` on the symmetric ``A``
    (:func:`c_ordered_view`), A restored afterwards; None when A + diag(shift) is not positive
    definite. The solve is LAPACK's dpotrs (scipy)."""
    A = c_ordered_view(A)
    if not shifted_cholesky_in_place(A, shift, backup):
        return None
    try:
        return scipy.linalg.cho_solve((A.T, True), Y, check_finite=False)
    finally:
        backup.restore(A)
