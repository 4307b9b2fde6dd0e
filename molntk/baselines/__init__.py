"""Baseline kernels to compare with the SO(3) NTKs, all behind one small interface.

Every baseline is a frozen dataclass with a ``name`` and

- ``features(molecules)``: descriptors of a molecule set, computed once and reusable;
- ``kern(a, b=None)``: the molecular kernel between two sets (``b`` omitted: ``a`` with
  itself), where ``a`` and ``b`` are molecules or their precomputed ``features``
  (feature-map baselines also take an :class:`~molntk.features.environments.EnvironmentBatch`,
  the SO(3) kernel's own input). Results are float64 torch tensors of shape (M1, M2).

NTK-type baselines return :class:`~molntk.kernels.molecular.MoleculeKernels` (``nngp``,
``ntk``) from the call, like :class:`~molntk.kernels.molecular.MolecularKernel`, and also
have ``kern.nngp(a, b)`` and ``kern.ntk(a, b)``; the classic kernels return one Tensor.

=============================  ===================================================
:class:`MLPNTK`                per-atom MLP NNGP/NTK on the flattened feature maps
:class:`AugmentedMLPNTK`       its rotation-orbit average (→ SO(3) GCNN kernel)
:class:`PowerSpectrumKernel`   SOAP-type power spectrum of the feature maps, (p̂·p̂')^ζ
:class:`LaplacianKernel`       exp(−‖x − x'‖₁/σ) on :class:`CoulombMatrix` / :class:`BagOfBonds`
:class:`DScribeSOAPKernel`     SOAP from DScribe (optional package ``dscribe``)
:class:`FCHL19Kernel`          FCHL19 from qmllib (optional package ``qmllib``)
=============================  ===================================================

Local kernels (all but the Laplacian) sum an environment kernel over element-matched atom
pairs (:func:`pair_sum`), exactly as the SO(3) molecular kernel does.
"""

from molntk.baselines.assembly import AtomDescriptors, LocalKernel, pair_sum
from molntk.baselines.augmented import AugmentedMLPNTK, RotationSet
from molntk.baselines.coulomb import QM9_MAX_COUNTS, BagOfBonds, CoulombMatrix, coulomb_matrices
from molntk.baselines.external import DScribeSOAPKernel, FCHL19Kernel
from molntk.baselines.laplacian import LaplacianKernel, l1_distances, median_l1_width
from molntk.baselines.mlp import MLPNTK, FiniteMLP, MLPArchitecture, mlp_kernels
from molntk.baselines.power_spectrum import PowerSpectrumKernel, power_spectrum

__all__ = [
    "QM9_MAX_COUNTS",
    "AtomDescriptors",
    "AugmentedMLPNTK",
    "BagOfBonds",
    "CoulombMatrix",
    "DScribeSOAPKernel",
    "FCHL19Kernel",
    "FiniteMLP",
    "LaplacianKernel",
    "LocalKernel",
    "MLPArchitecture",
    "MLPNTK",
    "PowerSpectrumKernel",
    "RotationSet",
    "coulomb_matrices",
    "l1_distances",
    "median_l1_width",
    "mlp_kernels",
    "pair_sum",
    "power_spectrum",
]
