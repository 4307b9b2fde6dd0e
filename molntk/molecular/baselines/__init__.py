"""Baseline kernels to compare with the SO(3) NTKs, all behind the molecular kernel protocol
(:mod:`molntk.molecular.protocol`): ``describe(molecules)`` once, ``kern(a, b=None)`` →
:class:`~molntk.molecular.protocol.KernelMatrices` (M1, M2), float64.

=============================  ===================================================
:class:`MLPNTK`                per-atom MLP NNGP/NTK on the flattened feature maps
:class:`AugmentedMLPNTK`       its rotation-orbit average (→ SO(3) GCNN kernel)
:class:`PowerSpectrumKernel`   SOAP-type power spectrum of the feature maps, (p̂·p̂')^ζ
:class:`LaplacianKernel`       exp(−‖x − x'‖₁/σ) on :class:`CoulombMatrix` / :class:`BagOfBonds`
:class:`DScribeSOAPKernel`     SOAP from DScribe (optional package ``dscribe``)
:class:`FCHL19Kernel`          FCHL19 from qmllib (optional package ``qmllib``)
=============================  ===================================================

The network kernels return ``{"nngp", "ntk"}``, the classic ones ``{"kernel"}``. Local
kernels (all but the Laplacian) sum an environment kernel over element-matched atom pairs
(:func:`~molntk.molecular.pair_sum.pair_sum`), exactly as the SO(3) molecular kernel does.
"""

from molntk.molecular.baselines.augmented import AugmentedMLPNTK, RotationSet, wigner_table
from molntk.molecular.baselines.coulomb import QM9_MAX_COUNTS, BagOfBonds, CoulombMatrix, coulomb_matrices
from molntk.molecular.baselines.external import DScribeSOAPKernel, FCHL19Kernel
from molntk.molecular.baselines.laplacian import LaplacianKernel, l1_distances, median_l1_width
from molntk.molecular.baselines.local import FeatureMapKernel, LocalKernel, MoleculeDescriptorKernel
from molntk.molecular.baselines.mlp import MLPNTK, FiniteMLP, MLPArchitecture, mlp_kernels
from molntk.molecular.baselines.power_spectrum import PowerSpectrumKernel, power_spectrum

__all__ = [
    "QM9_MAX_COUNTS",
    "AugmentedMLPNTK",
    "BagOfBonds",
    "CoulombMatrix",
    "DScribeSOAPKernel",
    "FCHL19Kernel",
    "FeatureMapKernel",
    "FiniteMLP",
    "LaplacianKernel",
    "LocalKernel",
    "MLPArchitecture",
    "MLPNTK",
    "MoleculeDescriptorKernel",
    "PowerSpectrumKernel",
    "RotationSet",
    "coulomb_matrices",
    "l1_distances",
    "median_l1_width",
    "mlp_kernels",
    "power_spectrum",
    "wigner_table",
]
