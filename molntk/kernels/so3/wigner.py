"""Real Wigner D-matrices (e3nn conventions) tabulated on sets of rotations.

e3nn's real spherical harmonics satisfy Y^l(R x) = D^l(R) Y^l(x) with D^l orthogonal.
A table for band limit L stacks the flattened blocks D^l(g), l < L, along the last
axis: width Σ_{l<L} (2l+1)² ("L3"). Coefficient vectors use the same (l, m) order as
e3nn (width Σ_{l<L} (2l+1) = L²).
"""

from __future__ import annotations

import contextlib
import threading

import torch
from e3nn import o3
from torch import Tensor


def n_coeffs(band_limit: int) -> int:
    """Number of spherical-harmonic coefficients with l < L: L²."""
    return band_limit * band_limit


def n_wigner(band_limit: int) -> int:
    """Number of Wigner matrix entries with l < L: Σ_{l<L} (2l+1)² = L(2L−1)(2L+1)/3."""
    return sum((2 * l + 1) ** 2 for l in range(band_limit))


def wigner_slices(band_limit: int) -> list[slice]:
    """Slice of each l block in a flattened Wigner table."""
    out, start = [], 0
    for l in range(band_limit):
        out.append(slice(start, start + (2 * l + 1) ** 2))
        start += (2 * l + 1) ** 2
    return out


def coeff_slices(band_limit: int) -> list[slice]:
    """Slice of each l block in a coefficient vector (e3nn order)."""
    return [slice(l * l, (l + 1) * (l + 1)) for l in range(band_limit)]


def degree_weights(band_limit: int, dtype: torch.dtype = torch.float64, device=None) -> Tensor:
    """(2l+1) repeated over each l block of a flattened Wigner table (shape (L3,))."""
    return torch.cat(
        [torch.full(((2 * l + 1) ** 2,), float(2 * l + 1), dtype=dtype, device=device) for l in range(band_limit)]
    )


#: Serialises the sections that switch torch's process-wide default dtype: without it, two
#: threads (e.g. the DeviceExecutor's, one per device) building tables at once could restore
#: float32 while the other is still inside, and e3nn would build its generators in float32
#: (kernel errors of ~1e-9 relative, seen as run-to-run differences).
_DEFAULT_DTYPE_LOCK = threading.RLock()


@contextlib.contextmanager
def float64_default():
    """e3nn builds its so(3) generators in the default dtype; build tables in float64."""
    with _DEFAULT_DTYPE_LOCK:
        old = torch.get_default_dtype()
        torch.set_default_dtype(torch.float64)
        try:
            yield
        finally:
            torch.set_default_dtype(old)


def wigner_blocks(band_limit: int, alpha: Tensor, beta: Tensor, gamma: Tensor) -> list[Tensor]:
    """D^l(α, β, γ) for l < L, each of shape (n, 2l+1, 2l+1), float64 (e3nn's Euler angles)."""
    with float64_default():
        a, b, c = (torch.as_tensor(t, dtype=torch.float64).reshape(-1) for t in (alpha, beta, gamma))
        return [o3.wigner_D(l, a, b, c) for l in range(band_limit)]


def flatten_blocks(blocks: list[Tensor]) -> Tensor:
    """Stack per-l blocks (n, 2l+1, 2l+1) into a table of shape (n, L3)."""
    return torch.cat([b.reshape(b.shape[0], -1) for b in blocks], dim=1)
