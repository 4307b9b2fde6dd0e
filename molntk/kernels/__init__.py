"""Infinite-width NNGP / NTK kernels of group-convolutional networks: pure tensor code.

- :mod:`molntk.kernels.so3`: SO(3) networks on spherical signals (molecular environments);
- :mod:`molntk.kernels.cn`: C_n ⋉ R² networks on images.

Both branches use one set of names: layers ``Lift``, ``GroupConv``, ``Nonlinearity``,
``Dense``, ``Pool`` (the invariant pool; C_n adds ``SpatialPool``, ``RotationPool``,
``Flatten``; SO(3) adds ``LayerNorm``), composed by ``serial`` into :class:`~molntk.kernels.so3.SO3Network` /
:class:`~molntk.kernels.cn.CnNetwork`, whose ``kernel(x1, x2=None, ..., ntk=True)``
returns a :class:`PooledKernel` (NNGP and NTK matrices) and whose ``finite(in_shape,
width, ...)`` builds the finite-width twin. Shared pieces:

- :mod:`~molntk.kernels.activations`: dual activations F(k12; k11, k22) = E[σ(u) σ(v)],
  Ḟ = E[σ'(u) σ'(v)] (:class:`DualActivation`, :func:`get_activation`), and the rule that
  every nonlinearity's input is Gaussian (:func:`~molntk.kernels.activations.check_gaussian_inputs`);
- :mod:`~molntk.kernels.pooled_activations`: a dual activation followed by a weighted
  mean, F̄ = Σ_k w_k F(K_k), Θ̄ = Σ_k w_k Θ_k Ḟ(K_k), fused into one pass (numba on CPU,
  Triton on CUDA: :mod:`~molntk.kernels.pooled_activations_triton`), with the polynomial
  arcsin of :mod:`~molntk.kernels.arcsin`;
- :mod:`~molntk.kernels.empirical`: empirical NTK Θ̂ = ∂f·∂f and Monte Carlo NNGP of finite
  networks (the checks that the kernels are right);
- :mod:`~molntk.kernels.result`: :class:`Kernels` (nngp, ntk) and :class:`PooledKernel`
  (+ the self-kernels of each input).
"""

from molntk.kernels.activations import ACTIVATIONS, DualActivation, get_activation
from molntk.kernels.empirical import empirical_ntk, monte_carlo_nngp
from molntk.kernels.pooled_activations import pooled_dual
from molntk.kernels.result import Kernels, PooledKernel

__all__ = [
    "ACTIVATIONS",
    "DualActivation",
    "Kernels",
    "PooledKernel",
    "empirical_ntk",
    "get_activation",
    "monte_carlo_nngp",
    "pooled_dual",
]
