"""What the two convolutions on C_n ⋉ R² share: k×k filters rotated by 2πr/n, their padding
and their NTK scales.

Both :class:`~molntk.kernels.cn.lift.Lift` and :class:`~molntk.kernels.cn.conv.GroupConv`
are :class:`FilterLayer` s: group order n, odd filter size k (rotations about the centre
pixel), a padding of :data:`~molntk.kernels.cn.spatial.PADDINGS`, and the weight and bias
scales σ_w, σ_b of the NTK parametrisation z = σ_w/√fan_in · Σ w y + σ_b b.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch.nn.functional as F
from torch import Tensor

from molntk.kernels.cn.spatial import check_padding, output_size


def pad_images(x: Tensor, k: int, padding: str) -> Tensor:
    """Pad images (B, C, H, W) for a k×k convolution ("valid": unchanged)."""
    if padding == "valid":
        return x
    c = (k - 1) // 2
    return F.pad(x, (c, c, c, c), mode="constant" if padding == "same" else "circular")


def check_filter(n: int, k: int) -> None:
    """ValueError unless n ≥ 1 and k is odd and positive (rotations about the centre pixel)."""
    if n < 1:
        raise ValueError(f"the rotation group order n must be at least 1, got {n}")
    if k < 1 or k % 2 == 0:
        raise ValueError(f"the filter size k must be odd and positive, got {k}")


@dataclass(frozen=True)
class FilterLayer:
    """A convolution with k×k filters rotated by 2πr/n, r < n (n = 1: an ordinary convolution)."""

    n: int = 4
    k: int = 3
    padding: str = "valid"
    sigma_w: float = 1.0
    sigma_b: float = 0.0

    def __post_init__(self) -> None:
        check_filter(self.n, self.k)
        check_padding(self.padding)

    def out_spatial(self, h: int, w: int) -> tuple[int, int]:
        """Grid (H', W') of the output for an (h, w) input grid."""
        return output_size(h, self.k, self.padding), output_size(w, self.k, self.padding)
