"""Spherical feature maps of per-atom molecular environments (docs/mathematics.md §1).

:func:`environment_features` turns molecules into Fourier coefficients f̂^l_c(a) of
smeared neighbour densities on S², one (C, L²) block per atom; :class:`FeatureConfig`
fixes the elements, band limit, angular smearing (:mod:`.smearing`) and radial basis
(:mod:`.radial`); :class:`S2Grid` samples coefficient maps on a sphere grid and back.
"""

from molntk.features.environments import (
    EnvironmentBatch,
    FeatureConfig,
    PaddedFeatures,
    environment_features,
    padded_features,
)
from molntk.features.radial import CoulombBasis, GaussianBasis, RadialBasis, radial_basis_from_dict
from molntk.features.smearing import smearing_coefficients, vmf_density
from molntk.features.sphere import S2Grid

__all__ = [
    "CoulombBasis",
    "EnvironmentBatch",
    "FeatureConfig",
    "GaussianBasis",
    "PaddedFeatures",
    "RadialBasis",
    "S2Grid",
    "environment_features",
    "padded_features",
    "radial_basis_from_dict",
    "smearing_coefficients",
    "vmf_density",
]
