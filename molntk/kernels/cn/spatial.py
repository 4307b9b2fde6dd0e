"""Covariance maps of convolutions: padding and filter-offset sums over site pairs.

A convolution z(x) = Σ_u w(u) y(x + u) with i.i.d. filter entries (covariance A(u, u'))
maps a covariance C(x, x') = E[y(x) y'(x')] to Σ_{u,u'} A(u, u') C(x + u, x' + u').

Padding modes (odd filter size k, pad c = (k − 1)/2 on each side):
  "valid"     no padding, the grid shrinks by k − 1;
  "same"      zero padding: padded sites carry zero features, so zero covariance;
  "circular"  periodic padding: indices wrap on both grids.

:func:`box_sum_` and :func:`correlate_into` act on one (H, W, H, W) covariance block and
take an array namespace ``xp`` (numpy or torch, see :mod:`molntk.kernels.cn.slabs`).
"""

from __future__ import annotations

import torch
from torch import Tensor

PADDINGS = ("valid", "same", "circular")


def check_padding(padding: str) -> str:
    """``padding`` if it is one of :data:`PADDINGS`, else ValueError."""
    if padding not in PADDINGS:
        raise ValueError(f"unknown padding {padding!r}; choose one of {PADDINGS}")
    return padding


def output_size(size: int, k: int, padding: str) -> int:
    """Grid length after a k-wide convolution: size − k + 1 for "valid", else size."""
    return size - k + 1 if padding == "valid" else size


def pad_pairs(c: Tensor, dims: tuple[int, ...], k: int, padding: str) -> Tensor:
    """The covariance of the padded feature maps; ``dims`` index the grids of both images."""
    if padding == "valid":
        return c
    pad = (k - 1) // 2
    if padding == "same":
        shape = list(c.shape)
        for d in dims:
            shape[d] += 2 * pad
        out = c.new_zeros(shape)
        inner = out
        for d in dims:
            inner = inner.narrow(d, pad, c.shape[d])
        inner.copy_(c)
        return out
    for d in dims:
        index = torch.arange(-pad, c.shape[d] + pad, device=c.device) % c.shape[d]
        c = c.index_select(d, index)
    return c


def box_sum_(xp, c, k: int):
    """In place on a padded block c (H, W, H, W): Σ_{u ∈ [0,k)²} c(x + u, x' + u) (A = identity).

    Returns the leading (H−k+1, W−k+1, H−k+1, W−k+1) view of ``c``. Output row i only
    reads rows i..i+k−1, so rows are overwritten in increasing order without a copy.
    """
    for axis in (0, 1):
        length = c.shape[axis] - k + 1
        for i in range(length):
            dst = _pair_slice(c, axis, i, 0, length)
            for a in range(1, k):
                xp.add(dst, _pair_slice(c, axis, i + a, a, length), out=dst)
        c = c[:length, :, :length] if axis == 0 else c[:, :length, :, :length]
    return c


def _pair_slice(c, axis: int, row: int, start: int, length: int):
    """c[row, :, start:start+length, :] along grid axis 0 (or the same on axis 1)."""
    if axis == 0:
        return c[row, :, start : start + length]
    return c[:, row, :, start : start + length]


def correlate_into(xp, out, c, taps: list[tuple[int, int, float]], k: int) -> None:
    """out (h, w, h, w) = Σ_{(i, j, a) ∈ taps} a · c(x + u_i, x' + u_j) on a padded block c.

    u_i is the row-major offset of index i in the k×k filter; ``taps`` lists the
    nonzero entries A(u_i, u_j) = a.
    """
    h, w = out.shape[:2]
    scratch = xp.empty_like(out)
    for n, (i, j, a) in enumerate(taps):
        (ui, uj), (vi, vj) = divmod(i, k), divmod(j, k)
        view = c[ui : ui + h, uj : uj + w, vi : vi + h, vj : vj + w]
        xp.multiply(view, a, out=out if n == 0 else scratch)
        if n:
            xp.add(out, scratch, out=out)
