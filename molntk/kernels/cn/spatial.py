"""Covariance maps of convolutions: padding and filter-offset sums over site pairs.

A convolution z(x) = Σ_u w(u) y(x + u) with i.i.d. filter entries (covariance A(u, u'))
maps a covariance C(x, x') = E[y(x) y'(x')] to Σ_{u,u'} A(u, u') C(x + u, x' + u').

Padding modes (odd filter size k, pad c = (k − 1)/2 on each side):
  "valid"     no padding, the grid shrinks by k − 1;
  "same"      zero padding: padded sites carry zero features, so zero covariance;
  "circular"  periodic padding: indices wrap on both grids.

:func:`box_sum_into` and :func:`correlate_into` act on covariances whose last four
dimensions are the interleaved grids (x_i, x'_i, x_j, x'_j) and write into given buffers.
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


def padded_shape(shape: tuple[int, ...], dims: tuple[int, ...], k: int, padding: str) -> tuple[int, ...]:
    """Shape of :func:`pad_pairs`' result."""
    pad = 0 if padding == "valid" else (k - 1) // 2
    return tuple(size + 2 * pad if d in dims else size for d, size in enumerate(shape))


def pad_pairs(c: Tensor, dims: tuple[int, ...], k: int, padding: str, out: Tensor | None = None) -> Tensor:
    """The covariance of the padded feature maps; ``dims`` index the grids of both images.

    ``out`` (optional, shape :func:`padded_shape`) receives the result; for "same" its
    border must already be zero.
    """
    if padding == "valid":
        return c
    pad = (k - 1) // 2
    if out is None:
        out = c.new_zeros(padded_shape(tuple(c.shape), dims, k, padding))
    inner = out
    for d in dims:
        inner = inner.narrow(d, pad, c.shape[d])
    inner.copy_(c)
    if padding == "circular":
        for d in dims:
            size = c.shape[d]
            out.narrow(d, 0, pad).copy_(out.narrow(d, size, pad))
            out.narrow(d, pad + size, pad).copy_(out.narrow(d, pad, pad))
    return out


def box_sum_into(out: Tensor, c: Tensor, k: int, partial: Tensor) -> Tensor:
    """out = Σ_{u ∈ [0,k)²} c(x + u, x' + u) (A = identity) on padded interleaved covariances.

    The last four dimensions of ``c`` are (x_i, x'_i, x_j, x'_j) of sizes (H, H, W, W);
    ``out`` has (H−k+1, H−k+1, W−k+1, W−k+1) there and ``partial`` (H−k+1, H−k+1, W, W).
    Separable: the sum along the i-diagonal into ``partial``, then along the j-diagonal.
    """
    h, w = out.shape[-4], out.shape[-2]
    rows = [c[..., a : a + h, a : a + h, :, :] for a in range(k)]
    _sum_into(partial, rows)
    _sum_into(out, [partial[..., b : b + w, b : b + w] for b in range(k)])
    return out


def _sum_into(out: Tensor, terms: list[Tensor]) -> None:
    if len(terms) == 1:
        out.copy_(terms[0])
        return
    torch.add(terms[0], terms[1], out=out)
    for term in terms[2:]:
        out.add_(term)


def correlate_into(out: Tensor, c: Tensor, taps: list[tuple[int, int, float]], k: int) -> Tensor:
    """out = Σ_{(a, b, A) ∈ taps} A · c(x + u_a, x' + u_b) on padded interleaved covariances.

    Last four dimensions as in :func:`box_sum_into`; u_a is the row-major offset of index
    a in the k×k filter, and ``taps`` lists the nonzero entries A(u_a, u_b) of the filter
    covariance.
    """
    h, w = out.shape[-4], out.shape[-2]
    for n, (a, b, weight) in enumerate(taps):
        (ai, aj), (bi, bj) = divmod(a, k), divmod(b, k)
        view = c[..., ai : ai + h, bi : bi + h, aj : aj + w, bj : bj + w]
        if n == 0:
            torch.mul(view, weight, out=out)
        else:
            out.add_(view, alpha=weight)
    return out
