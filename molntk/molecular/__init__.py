"""Atoms → molecules: molecular kernels from atom-environment kernels.

Every molecular kernel here is a Behler–Parrinello atom-pair sum of an environment kernel k
(:mod:`~molntk.molecular.pair_sum`), the NTK/NNGP of E(M) = Σ_{a∈M} N_{Z_a}(env_a):

    K(M, M') = Σ_{a∈M} Σ_{b∈M'} [Z_a = Z_b] k(env_a, env_b)      (``pairing="element"``)

(``shared``: without [Z_a = Z_b]; ``reduce="mean"``: divided by n_atoms(M) · n_atoms(M')),
except the Laplacian kernels on global descriptors, K(M, M') = exp(−‖x(M) − x(M')‖₁/σ).

- :mod:`~molntk.molecular.protocol`: the one protocol (:class:`MolecularKernel`:
  ``describe``, a call returning :class:`KernelMatrices`, ``on(device)``, ``settings``);
- :mod:`~molntk.molecular.pair_sum`: the one atom-pair sum, blockwise, with a per-block callback;
- :mod:`~molntk.molecular.so3`: :class:`SO3MolecularKernel`, the SO(3) network's kernel
  (element / shared pairing, or the reference's padded atom-index layout);
- :mod:`~molntk.molecular.derivative_kernels`: the SO(3) NTK's covariances of energies and
  forces (∂Θ/∂r', ∂²Θ/∂r∂r') by autograd, and the joint (N + 3Σn) matrix;
- :mod:`~molntk.molecular.baselines`: MLP, augmented MLP, power spectrum, SOAP, FCHL19, Laplacian;
- :mod:`~molntk.molecular.sets`: :class:`MoleculeSet` (feature maps once per feature config),
  :class:`InducingSet` (inducing atoms of sparse models, by feature maps or per-atom descriptors);
- :mod:`~molntk.molecular.descriptors`: :class:`AtomDescriptors`, :class:`GlobalDescriptors`;
- :mod:`~molntk.molecular.blocks`: :class:`BlockKernelOf`, a kernel on a set as a block
  kernel of :mod:`molntk.scale` (cache key: kernel settings; blocks known by their
  molecules' content digests).
"""

from molntk.molecular.blocks import BlockKernelOf
from molntk.molecular.descriptors import AtomDescriptors, GlobalDescriptors
from molntk.molecular.pair_sum import PAIRINGS, REDUCTIONS, pair_sum
from molntk.molecular.protocol import Descriptors, KernelMatrices, MolecularKernel
from molntk.molecular.sets import InducingSet, MoleculeSet, molecule_digests
from molntk.molecular.so3 import SO3_PAIRINGS, SO3MolecularKernel

__all__ = [
    "PAIRINGS",
    "REDUCTIONS",
    "SO3_PAIRINGS",
    "AtomDescriptors",
    "BlockKernelOf",
    "Descriptors",
    "GlobalDescriptors",
    "InducingSet",
    "KernelMatrices",
    "MolecularKernel",
    "MoleculeSet",
    "SO3MolecularKernel",
    "molecule_digests",
    "pair_sum",
]
