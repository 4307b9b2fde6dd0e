"""C_n ⋉ R² group-convolutional networks on images: kernel rules and finite twins.

Layers (each with an infinite-width NNGP/NTK rule and a finite torch module):
:class:`Lifting`, :class:`GroupConv`, :class:`Activation`, :class:`Dense`,
:class:`GlobalPool`, :class:`SpatialPool`, :class:`RotationPool`, :class:`Flatten`,
composed by :func:`serial`. Ready-made models: :func:`gcnn` (C_n GCNN; n = 1 is the
CNN-GAP), :func:`cnn_gap`, :func:`cnn_flatten`, :func:`mlp`, and :func:`augmented`
(orbit-averaged kernels).

Paddings and exactness: "valid", "same" (zeros) and "circular" all commute with quarter
turns of square images when k is odd, so for each of them the pooled C4 (and C8) kernels
are exactly invariant under 90° rotations of either input, the orbit-block reduction of
:mod:`molntk.kernels.cn.state` is exact, and the augmentation identity of
:mod:`molntk.kernels.cn.models` holds to float precision for n ∈ {1, 2, 4}. Only circular
padding makes the feature maps translation equivariant as well. Rotations by other
angles (n = 3, 8, ...) are bilinear interpolations: the kernel rules use exactly the
filter covariance I_r I_r'ᵀ of the finite networks, but pooled kernels are not invariant
under those rotations of the input, and the identity with image-rotation augmentation
does not hold.
"""

from molntk.kernels.cn.dense import Dense
from molntk.kernels.cn.group_conv import GroupConv
from molntk.kernels.cn.lifting import Lifting
from molntk.kernels.cn.models import Augmented, augmented, cnn_flatten, cnn_gap, gcnn, mlp
from molntk.kernels.cn.network import Network, serial
from molntk.kernels.cn.nonlinearity import Activation
from molntk.kernels.cn.pooling import Flatten, GlobalPool, RotationPool, SpatialPool
from molntk.kernels.cn.rotations import filter_rotations, rotate_images, rotation_operator

__all__ = [
    "Activation",
    "Augmented",
    "Dense",
    "Flatten",
    "GlobalPool",
    "GroupConv",
    "Lifting",
    "Network",
    "RotationPool",
    "SpatialPool",
    "augmented",
    "cnn_flatten",
    "cnn_gap",
    "filter_rotations",
    "gcnn",
    "mlp",
    "rotate_images",
    "rotation_operator",
    "serial",
]
