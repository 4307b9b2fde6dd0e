"""Covariance maps of convolutions: padding and filter-offset sums over site pairs.

A convolution z(x) = Σ_u w(u) y(x + u) with i.i.d. filter entries (covariance A(u, u'))
maps a covariance C(x, x') = E[y(x) y'(x')] to Σ_{u,u'} A(u, u') C(x + u, x' + u'). The
functions here act on a tensor whose dimensions ``dims1`` index x and ``dims2`` index x'.

Padding modes (odd filter size k, pad c = (k − 1)/2 on each side):
  "valid"     no padding, the grid shrinks by k − 1;
  "same"      zero padding: padded sites carry zero features, so zero covariance;
  "circular"  periodic padding: indices wrap on both grids.
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


def pad_pairs(c: Tensor, dims1: tuple[int, ...], dims2: tuple[int, ...], k: int, padding: str) -> Tensor:
    """The covariance of the padded feature maps (``c`` itself for "valid")."""
    if padding == "valid":
        return c
    pad = (k - 1) // 2
    if padding == "same":
        shape = list(c.shape)
        for d in dims1 + dims2:
            shape[d] += 2 * pad
        out = c.new_zeros(shape)
        inner = out
        for d in dims1 + dims2:
            inner = inner.narrow(d, pad, c.shape[d])
        inner.copy_(c)
        return out
    for d in dims1 + dims2:
        size = c.shape[d]
        index = torch.arange(-pad, size + pad, device=c.device) % size
        c = c.index_select(d, index)
    return c


def diagonal_box_sum(c: Tensor, dims1: tuple[int, ...], dims2: tuple[int, ...], k: int) -> Tensor:
    """Σ_{u ∈ [0,k)²} c(x + u, x' + u) on a padded covariance (A = identity), separably."""
    for d1, d2 in zip(dims1, dims2):
        length = c.shape[d1] - k + 1
        terms = [c.narrow(d1, a, length).narrow(d2, a, length) for a in range(k)]
        acc = torch.add(terms[0], terms[1]) if k > 1 else terms[0].clone()
        for term in terms[2:]:
            acc.add_(term)
        c = acc
    return c


def correlate_pairs(
    c: Tensor, a: Tensor, dims1: tuple[int, int], dims2: tuple[int, int], k: int
) -> Tensor:
    """Σ_{u,u'} A(u, u') c(x + u, x' + u') on a padded covariance, A (k², k²) row-major offsets.

    One multiply-add per nonzero entry of A; :func:`diagonal_box_sum` is the fast path
    for A = identity.
    """
    lengths = [c.shape[d] - k + 1 for d in dims1]
    out = None
    for i, j in torch.nonzero(a).tolist():
        view = c
        for d, offset, length in zip(dims1 + dims2, divmod(i, k) + divmod(j, k), lengths + lengths):
            view = view.narrow(d, offset, length)
        weight = float(a[i, j])
        if out is None:
            out = view * weight
        else:
            out.add_(view, alpha=weight)
    return out
