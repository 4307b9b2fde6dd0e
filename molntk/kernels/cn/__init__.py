"""C_n ⋉ R² group-convolutional networks on images: kernel rules and finite twins.

Layers (each a frozen dataclass with its infinite-width NNGP/NTK rule ``kernel`` and its
finite torch twin ``finite``), named as in :mod:`molntk.kernels.so3`:

=====================  ================================================================
:class:`Lift`          Z² → C_n ⋉ R²: K = σ_w²/(C k²) Σ_{u,u'} A_{r,r'}(u,u') ⟨f(x+u), f'(x'+u')⟩ + σ_b²
:class:`GroupConv`     C_n ⋉ R² → C_n ⋉ R²: K' = σ_w²/(n k²) Σ_t Σ_{u,u'} A_{r,r'} K̃(·+u, r+t; ·+u', r'+t) + σ_b²
:class:`Nonlinearity`  K̃ = F_φ(K; v, v'),  Θ̃ = Θ · Ḟ_φ(K; v, v')
:class:`Dense`         K' = σ_w² K + σ_b²,  Θ' = K' + σ_w² Θ
:class:`Pool`          the invariant pool: mean over positions and rotations
:class:`SpatialPool`   mean over positions (one vector per rotation)
:class:`RotationPool`  mean over rotations of per-rotation vectors
:class:`Flatten`       all sites as one vector: K' = mean_a K(a, a)
=====================  ================================================================

(A_{r,r'} = I_r I_r'ᵀ, I_r the filter rotation by 2πr/n; Θ' = K' + the same linear map of
Θ for every linear layer.) :func:`serial` composes them into a :class:`CnNetwork`, whose
``kernel(x1, x2=None, *, ntk=True, ...)`` returns a
:class:`~molntk.kernels.result.PooledKernel` (``nngp``, ``ntk`` of shape (N1, N2)) and whose
``finite(in_shape, width, *, seed, dtype)`` builds the finite network. Ready-made models:
:func:`gcnn` (C_n GCNN; n = 1 is the CNN-GAP), :func:`cnn_gap`, :func:`cnn_flatten`,
:func:`mlp`, and :func:`augmented` (orbit-averaged kernels, :class:`Augmented`).

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

from molntk.kernels.cn.conv import GroupConv
from molntk.kernels.cn.dense import Dense
from molntk.kernels.cn.lift import Lift
from molntk.kernels.cn.models import Augmented, augmented, cnn_flatten, cnn_gap, gcnn, mlp
from molntk.kernels.cn.network import CnNetwork, serial
from molntk.kernels.cn.nonlinearity import Nonlinearity
from molntk.kernels.cn.pool import Flatten, Pool, RotationPool, SpatialPool
from molntk.kernels.cn.rotations import filter_rotations, rotate_images, rotation_operator

__all__ = [
    "Augmented",
    "CnNetwork",
    "Dense",
    "Flatten",
    "GroupConv",
    "Lift",
    "Nonlinearity",
    "Pool",
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
