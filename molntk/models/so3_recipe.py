"""The SO(3) NTK model's recipe: its settings, their one set of defaults, and the one place
that builds its pieces.

The model is E(M) = Σ_{a∈M} N_{Z_a}(env_a), N the SO(3) group-convolutional network ``layers``
(:func:`~molntk.kernels.so3.spec.parse_architecture`, weight and bias variances σ_w², σ_b²)
on the environment feature maps ``features``
(:class:`~molntk.features.environments.FeatureConfig`); its molecular NTK/NNGP
(:class:`~molntk.molecular.SO3MolecularKernel`) is the atom-pair sum of the network's
environment kernel, evaluated on the SO(3) grid (``grid_band_limit``, ``sampling``) in
``mode`` "fast" (the invariant recursion, a quadrature accurate to about ``psd_rtol``
relative) or "exact" (the discretised network, PSD by construction), in ``dtype``.

The defaults, chosen by leave-one-out on 200 QM9 training molecules: ``lift:3 erf pool
dense``, σ_w = 2, σ_b = 1; the feature maps of :class:`FeatureConfig`'s defaults (L = 4,
σ = 0.3 rad, 8 Gaussians on [0.5, 3] Å); fast mode on the Lebedev grid of band limit 5
(exact to Wigner degree 9, kernels accurate to ≈ 5e-11); element pairing; float64;
psd_rtol = 3e-8 (eigenvalue clipping and the λ floor of the quadrature) and rank_rtol =
1e-10 (the sparse model's K_mm eigenvalue cut). The main QM9 job (configs/qm9_u0.yaml)
changes three of them, chosen by leave-one-out on 1,000 QM9 training molecules: 16
Gaussians whose widths grow with the distance, σ_w = 2.85 and psd_rtol = 1e-10. They stay
out of the defaults because they fit equilibrium geometries: on molecular-dynamics frames
the force field's errors grow with them (ethanol: 31.7 against 24.4 meV/Å,
benchmarks/md_force_field_variants.py). :class:`~molntk.models.so3_ntk.SO3NTKRegressor`
and the QM9 pipeline build the model from it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from molntk.data.molecule import Molecule
from molntk.errors import InputError
from molntk.features.environments import EnvironmentBatch, FeatureConfig, environment_features
from molntk.kernels.so3 import Discretisation, SO3Grid, SO3Network
from molntk.kernels.so3.spec import parse_architecture
from molntk.molecular import SO3MolecularKernel
from molntk.regression.selection import lambda_grid

#: Floating-point types of the kernels, by name.
DTYPES = ("float64", "float32")


@dataclass(frozen=True)
class SO3ModelRecipe:
    """Settings of the SO(3) NTK model, with the defaults of the module docstring.

    - the network: ``layers``, ``sigma_w``, ``sigma_b``;
    - ``features``: the environment feature maps (and the elements the model accepts);
    - the kernel engine: ``grid_band_limit``, ``sampling``, ``mode``, ``pairing``, ``reduce``
      (sum or mean over atom pairs), ``dtype``, ``block_size`` (environments per block);
    - regression: ``psd_rtol`` (relative accuracy of a quadrature kernel: its eigenvalues
      down to −psd_rtol · s_max are clipped and λ / mean(diag K) stays ≥ psd_rtol) and
      ``rank_rtol`` (sparse model: K_mm eigenvalues ≤ rank_rtol · s_max are dropped).
    """

    layers: str = "lift:3 erf pool dense"
    sigma_w: float = 2.0
    sigma_b: float = 1.0
    features: FeatureConfig = field(default_factory=FeatureConfig)
    grid_band_limit: int = 5
    sampling: str = "lebedev"
    mode: str = "fast"
    pairing: str = "element"
    reduce: str = "sum"
    dtype: str = "float64"
    block_size: int = 512
    psd_rtol: float = 3e-8
    rank_rtol: float = 1e-10

    @property
    def quadrature(self) -> bool:
        """Whether the kernel is a quadrature (fast mode), accurate only to about psd_rtol."""
        return self.mode == "fast"

    @property
    def relative_grid(self) -> np.ndarray | None:
        """The relative λ grid of the regression: ≥ psd_rtol for a quadrature, else the default
        (:func:`~molntk.regression.selection.lambda_grid`)."""
        return lambda_grid(self.psd_rtol, self.quadrature)

    @property
    def torch_dtype(self) -> torch.dtype:
        """``dtype`` as a torch dtype (InputError unless float64 or float32)."""
        if self.dtype not in DTYPES:
            raise InputError("dtype", f"must be 'float64' or 'float32', got {self.dtype!r}")
        return getattr(torch, self.dtype)

    def network(self) -> SO3Network:
        """The SO(3) network ``layers`` with variances σ_w², σ_b²."""
        return parse_architecture(self.layers, sigma_w=self.sigma_w, sigma_b=self.sigma_b)

    def discretisation(self, network: SO3Network, device: torch.device | str = "cpu") -> Discretisation:
        """``network``'s evaluation on SO3Grid(grid_band_limit, sampling) in ``mode``, in ``dtype`` on ``device``."""
        return network.discretisation(SO3Grid(self.grid_band_limit, self.sampling), self.mode, self.torch_dtype, device)

    def molecular_kernel(self, device: torch.device | str = "cpu") -> SO3MolecularKernel:
        """The molecular NTK/NNGP Θ(M, M') of the model on ``device``."""
        network = self.network()
        return SO3MolecularKernel(network, self.discretisation(network, device), self.pairing, self.reduce,
                                  self.block_size, self.features)

    def environments(self, molecules: Sequence[Molecule], device: torch.device | str = "cpu") -> EnvironmentBatch:
        """The environment feature maps of ``molecules`` in ``dtype`` on ``device``."""
        return environment_features(molecules, self.features, dtype=self.torch_dtype, device=device)
